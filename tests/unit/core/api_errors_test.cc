// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Errors that stay readable at the API's edges (issue 17): Result::value() on an error
// prints the status and the rank instead of std::bad_variant_access; a mistyped option
// left for the program is refused with a hint; the "did you mean" matcher; the version.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/sanitizers.h"
#include "batchcast/options.h"
#include "batchcast/status.h"
#include "batchcast/version.h"
#include "core/log.h"
#include "core/suggest.h"
#include "tests/unit/core/scoped_env.h"

namespace batchcast {
namespace {

#if BC_SANITIZE_THREAD
#define BC_SKIP_DEATH_UNDER_TSAN() GTEST_SKIP() << "death tests fork; not under ThreadSanitizer"
#else
#define BC_SKIP_DEATH_UNDER_TSAN() (void)0
#endif

Result<int> Missing() {
  return Status(StatusCode::kNotFound, "dataset '/data/x.h5' does not exist");
}

TEST(ResultDeathTest, ValueOnErrorPrintsTheStatus) {
  BC_SKIP_DEATH_UNDER_TSAN();
  ScopedEnv env({{"RANK", std::string("5")}});
  EXPECT_DEATH((void)Missing().value(),
               "batchcast: fatal \\(rank 5\\): Result::value\\(\\) on an error: not found: "
               "dataset '/data/x.h5' does not exist");
}

TEST(ResultDeathTest, ArrowAndStarOnErrorPrintTheStatusToo) {
  BC_SKIP_DEATH_UNDER_TSAN();
  Result<std::string> r(Status(StatusCode::kUnavailable, "no Batchcast leader listens"));
  EXPECT_DEATH((void)r->size(), "on an error: unavailable: no Batchcast leader listens");
  EXPECT_DEATH((void)*std::move(r), "on an error: unavailable");
}

TEST(ResultTest, ValueOfAnOkResult) {
  Result<int> r(7);
  EXPECT_EQ(r.value(), 7);
  EXPECT_EQ(*r, 7);
}

TEST(LeftoverFlagTest, MistypedOptionIsAnErrorWithAHint) {
  std::vector<std::string> rest;
  auto r = ResolveOptions({"--batch-sze", "32", "--dataset=x.h5"}, &rest);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("unknown option '--batch-sze'"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("did you mean '--batch-size'?"), std::string::npos);
  auto eq = ResolveOptions({"--epoch=3"}, &rest);
  ASSERT_FALSE(eq.ok());
  EXPECT_NE(eq.status().message().find("'--epochs'"), std::string::npos);
}

TEST(LeftoverFlagTest, ProgramFlagsThatLookUnlikeOptionsPassThrough) {
  std::vector<std::string> rest;
  auto r = ResolveOptions({"--lrs=0.1,0.2", "--results", "out.json", "--bs", "8", "--width", "4",
                           "--sharing", "--epochs", "2"},
                          &rest);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->epochs, 2);
  EXPECT_EQ(rest, (std::vector<std::string>{"--lrs=0.1,0.2", "--results", "out.json", "--bs", "8",
                                            "--width", "4", "--sharing"}));
}

TEST(LeftoverFlagTest, WordsAfterDoubleDashAreNotExamined) {
  std::vector<std::string> rest;
  auto r = ResolveOptions({"--epochs=2", "--", "--batch-sze", "3", "--epochs=9"}, &rest);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->epochs, 2);
  EXPECT_EQ(rest, (std::vector<std::string>{"--", "--batch-sze", "3", "--epochs=9"}));
}

TEST(SuggestTest, ClosestMatchAndTypos) {
  std::vector<std::string> cmds = {"convert", "inspect", "info", "serve", "status", "report"};
  EXPECT_EQ(ClosestMatch("inspct", cmds), "inspect");
  EXPECT_EQ(ClosestMatch("stauts", cmds), "status");
  EXPECT_EQ(ClosestMatch("frobnicate", cmds), "");
  EXPECT_TRUE(LooksLikeTypo("batch_sze", "batch_size"));
  EXPECT_TRUE(LooksLikeTypo("sed", "seed"));
  EXPECT_FALSE(LooksLikeTypo("seed", "seed"));
  EXPECT_FALSE(LooksLikeTypo("bs", "std"));
  EXPECT_FALSE(LooksLikeTypo("lr", "gpu"));
}

TEST(VersionTest, LibraryMatchesHeaders) {
  EXPECT_EQ(VersionCode(), BATCHCAST_VERSION_CODE);
  EXPECT_EQ(std::string(Version()), std::to_string(BATCHCAST_VERSION_MAJOR) + "." +
                                        std::to_string(BATCHCAST_VERSION_MINOR) + "." +
                                        std::to_string(BATCHCAST_VERSION_PATCH));
  EXPECT_EQ(BATCHCAST_VERSION_NUMBER(1, 2, 3), 10203);
}

}  // namespace
}  // namespace batchcast
