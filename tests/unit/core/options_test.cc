// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "batchcast/options.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <string>

#include "core/option_scope.h"
#include "tests/unit/core/scoped_env.h"

namespace batchcast {
namespace {

TEST(OptionsTest, DefaultsAreValid) {
  Options o;
  EXPECT_TRUE(ValidateOptions(o).ok());
  EXPECT_EQ(o.batch_size, 64);
  EXPECT_EQ(o.buffer_depth, 2);
}

TEST(OptionsTest, PrecedenceDefaultsFileEnvFlags) {
  std::string path = ::testing::TempDir() + "/bc_opts.toml";
  {
    std::ofstream f(path);
    f << "# comment\nbatch_size = 16\nbuffer_depth = 3\nseed = 7\ncrop = \"center\"\nimage_size=32\n";
  }
  ScopedEnv env({{"BATCHCAST_BUFFER_DEPTH", "4"}, {"BATCHCAST_SEED", "9"}});
  auto r = ResolveOptions({"--config", path, "--seed=11"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->batch_size, 16);    // file
  EXPECT_EQ(r->buffer_depth, 4);   // env beats file
  EXPECT_EQ(r->seed, 11u);         // flag beats env
  EXPECT_EQ(r->crop, "center");
  EXPECT_EQ(r->epochs, 1);         // default
}

TEST(OptionsTest, UnknownFlagSuggestsClosestKey) {
  auto r = ResolveOptions({"--batch-sise=3"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("did you mean 'batch_size'"), std::string::npos)
      << r.status().message();
}

TEST(OptionsTest, BadValuesNameTheOption) {
  auto r = ResolveOptions({"--batch-size=abc"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("batch_size"), std::string::npos);
  auto r2 = ResolveOptions({"--crop=diagonal"});
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("none|center|random"), std::string::npos);
  auto r3 = ResolveOptions({"--batch-size=0"});
  ASSERT_FALSE(r3.ok());
  auto r4 = ResolveOptions({"--crop=random"});  // needs image_size
  ASSERT_FALSE(r4.ok());
  EXPECT_NE(r4.status().message().find("image_size"), std::string::npos);
}

TEST(OptionsTest, BadEnvironmentValueNamesTheVariable) {
  ScopedEnv env({{"BATCHCAST_EPOCHS", std::string("many")}});
  auto r = ResolveOptions({});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("BATCHCAST_EPOCHS"), std::string::npos);
}

TEST(OptionsTest, ConfigFileErrorsPointAtTheLine) {
  std::string path = ::testing::TempDir() + "/bc_bad.toml";
  {
    std::ofstream f(path);
    f << "batch_size = 8\nthis line is wrong\n";
  }
  auto r = ResolveOptions({"--config=" + path});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path + ":2"), std::string::npos) << r.status().message();
  auto missing = ResolveOptions({"--config=/nonexistent/bc.toml"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(OptionsTest, SizesDurationsAndBareBooleans) {
  auto r = ResolveOptions({"--max-pixels=64m", "--heartbeat-ms=2s", "--flip", "--shuffle=off"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->max_pixels, 64LL << 20);
  EXPECT_EQ(r->heartbeat_ms, 2000);
  EXPECT_TRUE(r->flip);
  EXPECT_FALSE(r->shuffle);
}

TEST(OptionsTest, RestCollectsNonOptions) {
  std::vector<std::string> rest;
  auto r = ResolveOptions({"--epochs=2", "--lr=0.1", "train"}, &rest);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->epochs, 2);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0], "--lr=0.1");
}

TEST(OptionsTest, JsonListsEveryOptionWithSource) {
  Options o;
  ASSERT_TRUE(SetOption(&o, "batch-size", "8").ok());
  std::string json = OptionsToJson(o);
  EXPECT_NE(json.find("\"BATCHCAST_BATCH_SIZE\""), std::string::npos);
  EXPECT_NE(json.find("\"code\""), std::string::npos);
  EXPECT_EQ(ListOptions().size(), static_cast<size_t>(std::count(json.begin(), json.end(), '{')));
}

TEST(StatusTest, ContextAndCodes) {
  Status s = Status(StatusCode::kNotFound, "file 'x.h5' does not exist");
  Status c = s.WithContext("dataset");
  EXPECT_EQ(c.code(), StatusCode::kNotFound);
  EXPECT_EQ(c.message(), "dataset: file 'x.h5' does not exist");
  EXPECT_EQ(c.ToString(), "not found: dataset: file 'x.h5' does not exist");
  EXPECT_TRUE(Status::Ok().WithContext("x").ok());
  Result<int> r(Status(StatusCode::kOk, ""));
  EXPECT_FALSE(r.ok());  // a Result is never built from OK without a value
}

// A consumer's own front door (the Python Consumer) refuses options only the leader reads
// when they were set explicitly, naming the option, where it belongs and what a consumer
// accepts; the same option from the environment (a job-wide setting) is left to the leader.
TEST(OptionsTest, ConsumerRefusesLeaderOnlyOptionsSetExplicitly) {
  for (const auto& info : ListOptions()) {
    Options o;
    ASSERT_TRUE(SetOption(&o, info.key, info.default_value).ok()) << info.key;
    Status st = CheckConsumerOptions(o, "batchcast.Consumer", "batchcast.Leader(...)");
    EXPECT_EQ(st.ok(), ConsumerReadsOption(info.key)) << info.key << ": " << st.ToString();
  }
  Options o;
  ASSERT_TRUE(SetOption(&o, "batch_size", "32").ok());
  ASSERT_TRUE(SetOption(&o, "threads", "4").ok());
  Status st = CheckConsumerOptions(o, "batchcast.Consumer", "batchcast.Leader(...)");
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
  for (const char* part : {"batchcast.Consumer: option 'threads' configures the leader",
                           "batchcast.Leader(...)", "a consumer accepts ", "batch_size",
                           "drop_last", "start_batch"})
    EXPECT_NE(st.message().find(part), std::string::npos) << part << " in " << st.message();
  EXPECT_EQ(st.message().find("image_size,"), std::string::npos) << st.message();
  for (const char* leader_only :
       {"dataset", "threads", "resize", "on_bad_sample", "flip", "cache", "stage"})
    EXPECT_FALSE(ConsumerReadsOption(leader_only)) << leader_only;
  for (const char* own : {"batch_size", "epochs", "seed", "mode", "telemetry", "start_epoch"})
    EXPECT_TRUE(ConsumerReadsOption(own)) << own;
  ScopedEnv env({{"BATCHCAST_THREADS", std::string("4")}});
  auto from_env = ResolveOptions({});
  ASSERT_TRUE(from_env.ok());
  EXPECT_TRUE(CheckConsumerOptions(*from_env, "c", "l").ok());
}

// A leader front door with its own options (the Python Leader, `batchcast serve`) refuses
// the options only a consumer reads when they were set explicitly; every key has a scope.
TEST(OptionsTest, LeaderRefusesConsumerOnlyOptionsSetExplicitly) {
  for (const auto& info : ListOptions()) {
    EXPECT_TRUE(ConsumerReadsOption(info.key) || LeaderReadsOption(info.key)) << info.key;
    Options o;
    ASSERT_TRUE(SetOption(&o, info.key, info.default_value).ok()) << info.key;
    Status st = CheckLeaderOptions(o, "batchcast.Leader", "batchcast.Consumer(...)");
    EXPECT_EQ(st.ok(), LeaderReadsOption(info.key)) << info.key << ": " << st.ToString();
  }
  for (const char* own : {"drop_last", "pad_last", "connect_timeout", "carve_offset"})
    EXPECT_FALSE(LeaderReadsOption(own)) << own;
  for (const char* shared : {"batch_size", "epochs", "seed", "mode", "start_batch", "telemetry"})
    EXPECT_TRUE(LeaderReadsOption(shared) && ConsumerReadsOption(shared)) << shared;
  Options o;
  ASSERT_TRUE(SetOption(&o, "drop_last", "true").ok());
  EXPECT_EQ(CheckLeaderOptions(o, "batchcast.Leader", "batchcast.Consumer(...)").message(),
            "batchcast.Leader: option 'drop_last' is each consumer's own (how it carves its "
            "batches, waits for and checks its leader); a leader never reads it. Give it to the "
            "consumers (batchcast.Consumer(...))");
  ScopedEnv env({{"BATCHCAST_DROP_LAST", std::string("1")}});  // job-wide: the consumers'
  auto from_env = ResolveOptions({});
  ASSERT_TRUE(from_env.ok());
  EXPECT_TRUE(CheckLeaderOptions(*from_env, "l", "c").ok());
}

// A leader that runs no decode pipeline (the Python Producer) refuses every leader-only
// option it does not read, wherever it was set: a BATCHCAST_* variable too, since no other
// process of its job reads it.
TEST(OptionsTest, PublisherRefusesLeaderOptionsItDoesNotReadFromAnySource) {
  for (const auto& info : ListOptions()) {
    Options o;
    ASSERT_TRUE(SetOption(&o, info.key, info.default_value).ok()) << info.key;
    Status st = CheckPublisherOptions(o, "P", {"ring_slots"}, "do this");
    EXPECT_EQ(st.ok(), ConsumerReadsOption(info.key) || info.key == "ring_slots")
        << info.key << ": " << st.ToString();
  }
  {
    ScopedEnv env({{"BATCHCAST_CACHE", std::string("1g")},
                   {"BATCHCAST_RING_SLOTS", std::string("6")},
                   {"BATCHCAST_BATCH_SIZE", std::string("8")}});
    auto from_env = ResolveOptions({});
    ASSERT_TRUE(from_env.ok());
    Status st = CheckPublisherOptions(*from_env, "P", {"ring_slots"}, "Unset it.");
    ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(st.message(),
              "P: option 'cache' (set by BATCHCAST_CACHE) configures a native leader's decode "
              "pipeline or ring; P publishes the batches your code makes and never reads it. "
              "Unset it.");
  }
  ScopedEnv env({{"BATCHCAST_RING_SLOTS", std::string("6")},
                 {"BATCHCAST_BATCH_SIZE", std::string("8")}});
  auto from_env = ResolveOptions({});
  ASSERT_TRUE(from_env.ok());
  EXPECT_TRUE(CheckPublisherOptions(*from_env, "P", {"ring_slots"}, "x").ok());
}

}  // namespace
}  // namespace batchcast
