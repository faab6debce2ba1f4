// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "schedule/resize_spec.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "batchcast/options.h"

namespace batchcast::schedule {
namespace {

// The parse error message for `text`, or "" when it parsed.
std::string ErrorOf(const std::string& text) {
  auto r = ParseResizeSpec(text);
  return r.ok() ? "" : r.status().message();
}

void ExpectErrorContains(const std::string& text, const std::string& part) {
  std::string msg = ErrorOf(text);
  EXPECT_NE(msg.find(part), std::string::npos) << "spec: " << text << "\nmessage: " << msg;
}

TEST(ResizeSpecTest, ParsesEveryKey) {
  auto r = ParseResizeSpec(
      "resize(min=96,max=224,step=32,upgrade=0.25,mode=exhaustive,lr=sqrt,max_batch=512,"
      "final_epochs=3,policy=random)");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->min_size, 96);
  EXPECT_EQ(r->max_size, 224);
  EXPECT_EQ(r->step, 32);
  EXPECT_DOUBLE_EQ(r->upgrade, 0.25);
  EXPECT_EQ(r->mode, ResizeMode::kExhaustive);
  EXPECT_EQ(r->lr, LrRule::kSqrt);
  EXPECT_EQ(r->max_batch, 512);
  EXPECT_EQ(r->final_epochs, 3);
  EXPECT_EQ(r->policy, "random");
  EXPECT_EQ(BucketSizes(*r), (std::vector<int>{96, 128, 160, 192, 224}));
}

TEST(ResizeSpecTest, DefaultsAndWhitespace) {
  auto r = ParseResizeSpec("  resize ( min = 96 , max = 224 )  ");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->step, 32);
  EXPECT_DOUBLE_EQ(r->upgrade, 0.25);
  EXPECT_EQ(r->mode, ResizeMode::kMixed);
  EXPECT_EQ(r->lr, LrRule::kLinear);
  EXPECT_EQ(r->max_batch, 0);
  EXPECT_EQ(r->final_epochs, 1);
}

TEST(ResizeSpecTest, MaxAlwaysIncludedWhenStepDoesNotDivide) {
  auto r = ParseResizeSpec("resize(min=96,max=224,step=48)");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(BucketSizes(*r), (std::vector<int>{96, 144, 192, 224}));
  auto one = ParseResizeSpec("resize(min=224,max=224)");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(BucketSizes(*one), (std::vector<int>{224}));
}

TEST(ResizeSpecTest, ExplicitSizeList) {
  auto r = ParseResizeSpec("resize(sizes=96:128:160:224,upgrade=50%)");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(BucketSizes(*r), (std::vector<int>{96, 128, 160, 224}));
  EXPECT_DOUBLE_EQ(r->upgrade, 0.5);
}

TEST(ResizeSpecTest, RoundTripsThroughText) {
  for (const char* text : {"resize(min=64,max=256,step=64,upgrade=0.1,lr=none,max_batch=9)",
                           "resize(sizes=32:64,mode=exhaustive,final_epochs=0)"}) {
    auto a = ParseResizeSpec(text);
    ASSERT_TRUE(a.ok()) << text;
    auto b = ParseResizeSpec(ResizeSpecToString(*a));
    ASSERT_TRUE(b.ok()) << ResizeSpecToString(*a);
    EXPECT_EQ(ResizeSpecToString(*a), ResizeSpecToString(*b));
    EXPECT_EQ(BucketSizes(*a), BucketSizes(*b));
    EXPECT_EQ(a->mode, b->mode);
    EXPECT_EQ(a->max_batch, b->max_batch);
  }
}

TEST(ResizeSpecTest, UnknownKeyNamesColumnAndSuggestion) {
  // "resize(min=96,max=224,step=32," is 30 characters: the key starts at column 31.
  EXPECT_EQ(ErrorOf("resize(min=96,max=224,step=32,upgarde=0.25)"),
            "resize spec: unknown key 'upgarde' at column 31 (did you mean 'upgrade'?)");
  ExpectErrorContains("resize(min=96,max=224,color=1)", "unknown key 'color' at column 23");
}

TEST(ResizeSpecTest, BadValuesPointAtTheValue) {
  EXPECT_EQ(ErrorOf("resize(min=9x6,max=224)"),
            "resize spec: '9x6' is not an integer for key 'min' at column 12");
  // "resize(sizes=96:160:" is 20 characters: the offending 128 starts at column 21.
  EXPECT_EQ(ErrorOf("resize(sizes=96:160:128)"),
            "resize spec: 'sizes' must be strictly ascending, but 128 follows 160 at column 21");
  ExpectErrorContains("resize(sizes=96::128)", "'' in 'sizes' is not an integer at column 17");
  ExpectErrorContains("resize(min=96,max=224,mode=mixd)",
                      "key 'mode' must be mixed|exhaustive, got 'mixd' at column 28 (did you "
                      "mean 'mixed'?)");
  ExpectErrorContains("resize(min=96,max=224,lr=cubic)", "key 'lr' must be linear|sqrt|none");
  ExpectErrorContains("resize(min=96,max=224,upgrade=0)",
                      "upgrade must be in (0, 1], got 0 at column 31");
  ExpectErrorContains("resize(min=96,max=224,upgrade=1.5)", "upgrade must be in (0, 1]");
  ExpectErrorContains("resize(min=96,max=224,upgrade=abc)", "'abc' is not a number");
  ExpectErrorContains("resize(min=96,max=224,step=0)", "step must be in [1, 16384], got 0");
  ExpectErrorContains("resize(min=96,max=224,max_batch=-1)", "max_batch must be >= 0");
  ExpectErrorContains("resize(min=96,max=224,final_epochs=-2)", "final_epochs must be >= 0");
  ExpectErrorContains(
      "resize(min=96,max=224,policy=rnadom)",
      "unknown policy 'rnadom' at column 30 (known: random) (did you mean 'random'?)");
  ExpectErrorContains("resize(min=,max=224)", "empty value for key 'min' at column 12");
}

TEST(ResizeSpecTest, SyntaxErrorsNamePositions) {
  ExpectErrorContains("resise(min=96,max=224)", "expected 'resize(' at column 1");
  ExpectErrorContains("resize min=96", "expected '(' after 'resize' at column 8");
  ExpectErrorContains("resize(min=96,max=224", "missing ')' at column 22 (end of spec)");
  ExpectErrorContains("resize(min=96,max=224) x", "unexpected 'x' after ')' at column 24");
  ExpectErrorContains("resize(min 96)", "expected '=' after key 'min' at column 12");
  ExpectErrorContains("resize(min=96,,max=1)", "expected a key at column 15, got ','");
  ExpectErrorContains("resize(min=96,min=128,max=224)", "duplicate key 'min' at column 15");
}

TEST(ResizeSpecTest, CrossKeyValidation) {
  ExpectErrorContains("resize(min=256,max=224)", "min (256) must be <= max (224)");
  ExpectErrorContains("resize(min=96)", "needs 'min' and 'max' (or 'sizes')");
  ExpectErrorContains("resize()", "needs 'min' and 'max' (or 'sizes')");
  ExpectErrorContains("resize(sizes=96:224,min=96)", "'sizes' cannot be combined");
  ExpectErrorContains("resize(min=1,max=200,step=1)", "200 buckets, at most 64");
  ResizeSpec s;  // built in code: no range
  EXPECT_FALSE(ValidateResizeSpec(s).ok());
  s.min_size = 64;
  s.max_size = 128;
  EXPECT_TRUE(ValidateResizeSpec(s).ok());
  s.policy = "loss";
  EXPECT_FALSE(ValidateResizeSpec(s).ok());
}

std::string WriteFile(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ResizeSpecConfigTest, SpecStringThenPerKeyOverrides) {
  std::string path = WriteFile("bc_resize_a.toml",
                               "# run config\nbatch_size = 32\n"
                               "resize = \"resize(min=96,max=224,step=32)\"\n"
                               "resize_upgrade = 0.5   # faster\nresize-mode = 'exhaustive'\n");
  auto r = ResizeSpecFromConfigFile(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(BucketSizes(*r), (std::vector<int>{96, 128, 160, 192, 224}));
  EXPECT_DOUBLE_EQ(r->upgrade, 0.5);
  EXPECT_EQ(r->mode, ResizeMode::kExhaustive);
}

TEST(ResizeSpecConfigTest, PerKeyLinesAlone) {
  auto r = ResizeSpecFromConfig({{"resize_sizes", "64:128"}, {"resize_lr", "none"}, {"seed", "3"}},
                                "test");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(BucketSizes(*r), (std::vector<int>{64, 128}));
  EXPECT_EQ(r->lr, LrRule::kNone);
  // An explicit list replaces the range of the spec string, and the other way round.
  auto both = ResizeSpecFromConfig(
      {{"resize", "resize(min=96,max=224)"}, {"resize_sizes", "32:64"}}, "test");
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_EQ(BucketSizes(*both), (std::vector<int>{32, 64}));
}

TEST(ResizeSpecConfigTest, ErrorsNameFileAndLine) {
  std::string path =
      WriteFile("bc_resize_b.toml", "resize_min = 96\nresize_max = 224\nresize_upgarde = 0.3\n");
  auto r = ResizeSpecFromConfigFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path + ":3: unknown key 'resize_upgarde' (did you mean "
                                             "'resize_upgrade'?)"),
            std::string::npos)
      << r.status().message();
  std::string bad = WriteFile("bc_resize_c.toml", "seed = 1\nresize = \"resize(min=96,max=2x)\"\n");
  auto r2 = ResizeSpecFromConfigFile(bad);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find(bad + ":2: resize spec: '2x' is not an integer for key "
                                             "'max' at column 19"),
            std::string::npos)
      << r2.status().message();
  auto none = ResizeSpecFromConfig({{"seed", "1"}}, "test");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  auto missing = ResizeSpecFromConfigFile(::testing::TempDir() + "/does_not_exist.toml");
  EXPECT_FALSE(missing.ok());
}

// The `resize` option carries the spec string from flags, environment or config file.
TEST(ResizeSpecConfigTest, ResizeOptionHoldsTheSpec) {
  auto o = ResolveOptions({"--resize", "resize(min=96,max=224,step=32,upgrade=0.25,mode=mixed)"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  auto r = ParseResizeSpec(o->resize);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(BucketSizes(*r).size(), 5u);
  EXPECT_TRUE(Options{}.resize.empty());  // off by default
}

}  // namespace
}  // namespace batchcast::schedule
