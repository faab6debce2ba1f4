// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "batchcast/options.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <string>
#include <utility>

#include "core/option_scope.h"
#include "core/units.h"
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

// late_join_catch_ups bounds the catch-ups' extra decode: outside 0..64 it is refused, naming
// the option, the range and what it costs; a Python Producer, which cannot catch up (its
// batches come from an iterable), refuses it as an option it does not read.
TEST(OptionsTest, LateJoinCatchUpsIsBoundedAndReadOnlyWhereACatchUpIsPossible) {
  for (const char* bad : {"--late-join-catch-ups=-1", "--late-join-catch-ups=65"}) {
    auto r = ResolveOptions({bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("option 'late_join_catch_ups' must be between 0"),
              std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("extra decode"), std::string::npos) << r.status().message();
  }
  auto ok = ResolveOptions({"--late-join-catch-ups=0"});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->late_join_catch_ups, 0);
  EXPECT_EQ(Options().late_join_catch_ups, 2);
  for (FrontDoor d : {FrontDoor::kServe, FrontDoor::kMpiRuntime, FrontDoor::kPythonLeader,
                      FrontDoor::kLauncher, FrontDoor::kCApiLeader})
    EXPECT_TRUE(FrontDoorReads(d, "late_join_catch_ups"));
  EXPECT_FALSE(FrontDoorReads(FrontDoor::kPythonProducer, "late_join_catch_ups"));
  EXPECT_FALSE(FrontDoorReads(FrontDoor::kMultinode, "late_join_catch_ups"));
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

// A size or duration past int64 after its unit is an error naming the value, never a wrapped
// number (the fuzzer found the telemetry spec's copy of this rule overflowing).
TEST(OptionsTest, SizesAndDurationsBeyondInt64AreRefused) {
  auto size = ResolveOptions({"--max-pixels=9000000000000t"});
  ASSERT_FALSE(size.ok());
  EXPECT_NE(size.status().message().find("'9000000000000t' is too large"), std::string::npos)
      << size.status().ToString();
  auto ms = ResolveOptions({"--heartbeat-ms=20000000209482764s"});
  ASSERT_FALSE(ms.ok());
  EXPECT_NE(ms.status().message().find("'20000000209482764s' is too long"), std::string::npos)
      << ms.status().ToString();
  int64_t v = 0;
  ASSERT_TRUE(ParseSize("8388607t", &v).ok());
  EXPECT_EQ(v, 8388607LL << 40);
  EXPECT_FALSE(ParseSize("8388608t", &v).ok());
  ASSERT_TRUE(ParseDuration("153722867280912m", &v).ok());
  EXPECT_EQ(v, 153722867280912LL * 60000);
  EXPECT_FALSE(ParseDuration("153722867280913m", &v).ok());
}

// A size a message suggests (cache=, view_bytes=) is never less than what is needed, and reads
// back as that many MiB.
TEST(OptionsTest, SuggestedSizesRoundUpToWholeMegabytesAndParseBack) {
  const std::pair<double, const char*> cases[] = {
      {1, "1m"}, {1 << 20, "1m"}, {(1 << 20) + 1, "2m"}, {5.5 * (1 << 20), "6m"},
      {double(3ULL << 30), "3072m"}};
  for (const auto& [bytes, text] : cases) {
    EXPECT_EQ(SizeOptionValue(bytes), text) << bytes;
    auto r = ResolveOptions({std::string("--max-pixels=") + SizeOptionValue(bytes)});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_GE(double(r->max_pixels), bytes);
  }
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

// The front-door table (core/option_scope.h): every option is read by at least one front door,
// every front door reads something, and the check refuses exactly what the table says.
TEST(OptionsTest, EveryOptionHasItsFrontDoors) {
  ASSERT_EQ(FrontDoors().size(), static_cast<size_t>(FrontDoor::kCount));
  for (size_t i = 0; i < FrontDoors().size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(FrontDoors()[i].door), i);
    EXPECT_EQ(FindFrontDoor(FrontDoors()[i].key), &FrontDoors()[i]);
  }
  for (const auto& info : ListOptions()) {
    EXPECT_FALSE(FrontDoorsReading(info.key).empty()) << info.key;
    for (const auto& door : FrontDoors()) {
      Options o;
      ASSERT_TRUE(SetOption(&o, info.key, info.default_value).ok()) << info.key;
      Status st = CheckFrontDoorOptions(o, door.door);  // set in code: explicit
      EXPECT_EQ(st.ok(), FrontDoorReads(door.door, info.key))
          << door.key << " / " << info.key << ": " << st.ToString();
      if (!st.ok()) {
        EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
        EXPECT_NE(st.message().find("option '" + info.key + "'"), std::string::npos) << st.message();
        EXPECT_EQ(st.message().rfind(door.name, 0), 0u) << st.message();
      }
    }
  }
  for (const char* leader_only :
       {"dataset", "threads", "resize", "on_bad_sample", "flip", "cache", "stage"})
    EXPECT_FALSE(ConsumerReadsOption(leader_only)) << leader_only;
  for (const char* own : {"batch_size", "epochs", "seed", "mode", "telemetry", "start_epoch"})
    EXPECT_TRUE(ConsumerReadsOption(own)) << own;
  for (const char* own : {"drop_last", "pad_last", "connect_timeout", "carve_offset", "rank"})
    EXPECT_FALSE(FrontDoorReads(FrontDoor::kPythonLeader, own)) << own;
}

// A consumer's own front door refuses options only the leader reads when they were set
// explicitly, naming the option, where it belongs and what a consumer accepts; the same option
// from the environment (a job-wide setting) is left to the leader.
TEST(OptionsTest, ConsumerRefusesLeaderOnlyOptionsSetExplicitly) {
  Options o;
  ASSERT_TRUE(SetOption(&o, "batch_size", "32").ok());
  ASSERT_TRUE(SetOption(&o, "threads", "4").ok());
  Status st = CheckFrontDoorOptions(o, FrontDoor::kConsumer, "batchcast.Consumer");
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
  for (const char* part : {"batchcast.Consumer: option 'threads' configures the leader",
                           "(set in code)", "a consumer accepts ", "batch_size", "drop_last",
                           "start_batch"})
    EXPECT_NE(st.message().find(part), std::string::npos) << part << " in " << st.message();
  EXPECT_EQ(st.message().find("image_size,"), std::string::npos) << st.message();
  ScopedEnv env({{"BATCHCAST_THREADS", std::string("4")}});
  auto from_env = ResolveOptions({});
  ASSERT_TRUE(from_env.ok());
  EXPECT_TRUE(CheckFrontDoorOptions(*from_env, FrontDoor::kConsumer).ok());
}

// A leader front door with its own options refuses the options only a consumer reads when they
// were set explicitly; from the environment they are the consumers' (job-wide).
TEST(OptionsTest, LeaderRefusesConsumerOnlyOptionsSetExplicitly) {
  Options o;
  ASSERT_TRUE(SetOption(&o, "drop_last", "true").ok());
  EXPECT_EQ(CheckFrontDoorOptions(o, FrontDoor::kPythonLeader).message(),
            "batchcast.Leader: option 'drop_last' is each consumer's own (set in code): how it "
            "carves its batches, waits for and checks its leader; batchcast.Leader never reads "
            "it. Give it to the consumers (batchcast.Consumer(address, ...)). Read by: mpi, "
            "multinode, launcher, consumer");
  ScopedEnv env({{"BATCHCAST_DROP_LAST", std::string("1")}});  // job-wide: the consumers'
  auto from_env = ResolveOptions({});
  ASSERT_TRUE(from_env.ok());
  EXPECT_TRUE(CheckFrontDoorOptions(*from_env, FrontDoor::kPythonLeader).ok());
  EXPECT_TRUE(CheckFrontDoorOptions(*from_env, FrontDoor::kServe).ok());
}

// A leader that reads no decode pipeline option (the Python Producer) refuses them wherever
// they were set: a BATCHCAST_* variable too, since no other process of its job reads it. So do
// the front doors that configure their own trainers (the MPI Runtime, batchcast-run) for what
// neither they nor their trainers read.
TEST(OptionsTest, OptionsNobodyInTheJobReadsAreRefusedFromAnySource) {
  {
    ScopedEnv env({{"BATCHCAST_CACHE", std::string("1g")},
                   {"BATCHCAST_RING_SLOTS", std::string("6")},
                   {"BATCHCAST_BATCH_SIZE", std::string("8")}});
    auto from_env = ResolveOptions({});
    ASSERT_TRUE(from_env.ok());
    Status st = CheckFrontDoorOptions(*from_env, FrontDoor::kPythonProducer);
    ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("batchcast.Producer: option 'cache' (set by BATCHCAST_CACHE) is "
                                "not read by batchcast.Producer"),
              std::string::npos) << st.message();
    EXPECT_NE(st.message().find("Read by: mpi, multinode, serve, python-leader, launcher, "
                                "c-leader"),
              std::string::npos) << st.message();
  }
  {
    ScopedEnv env({{"BATCHCAST_RING_SLOTS", std::string("6")},
                   {"BATCHCAST_BATCH_SIZE", std::string("8")}});
    auto from_env = ResolveOptions({});
    ASSERT_TRUE(from_env.ok());
    EXPECT_TRUE(CheckFrontDoorOptions(*from_env, FrontDoor::kPythonProducer).ok());
  }
  ScopedEnv env({{"BATCHCAST_RANK", std::string("1")}, {"BATCHCAST_WORLD_SIZE", std::string("2")}});
  auto from_env = ResolveOptions({});
  ASSERT_TRUE(from_env.ok());
  EXPECT_TRUE(CheckFrontDoorOptions(*from_env, FrontDoor::kPythonLeader).ok());  // its consumers'
  for (FrontDoor d : {FrontDoor::kMpiRuntime, FrontDoor::kLauncher}) {
    Status st = CheckFrontDoorOptions(*from_env, d);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << FrontDoorOf(d).key;
    EXPECT_NE(st.message().find("(set by BATCHCAST_RANK)"), std::string::npos) << st.message();
  }
}

// Every command line parses the registry the same way (ResolveOptions): a bare boolean flag
// before another flag, and the README's `--flip --normalize`.
TEST(OptionsTest, BareBooleanFlagsParseAlike) {
  auto o = ResolveOptions({"--flip", "--epochs", "1", "--normalize"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o->flip);
  EXPECT_TRUE(o->normalize);
  EXPECT_EQ(o->epochs, 1);
  auto off = ResolveOptions({"--flip", "false", "--shuffle=false"});
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->flip);
  EXPECT_FALSE(off->shuffle);
}

}  // namespace
}  // namespace batchcast
