// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Where a run's outputs go (telemetry/run_outputs.h): the run directory and its one naming
// rule, explicit paths, and every path created or refused at the start with a message that
// names it and the cause.
#include "telemetry/run_outputs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "telemetry/spec.h"
#include "tests/unit/telemetry/scratch_dir.h"

namespace batchcast::telemetry {
namespace {

namespace fs = std::filesystem;

class RunOutputsTest : public ScratchDirTest {
 protected:
  static std::string Host() {
    char buf[256] = {0};
    gethostname(buf, sizeof(buf) - 1);
    return buf;
  }
};

TelemetrySpec Spec(const std::string& text) {
  auto s = ParseTelemetrySpec(text);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : TelemetrySpec();
}

TEST(RunFileStemTest, KindHostPid) {
  EXPECT_EQ(RunFileStem(ProcessKind::kService, "node7", 4242), "service-node7-4242");
  EXPECT_EQ(RunFileStem(ProcessKind::kTrainMany, "n1", 1), "train-many-n1-1");
  EXPECT_EQ(RunFileStem(ProcessKind::kJob, "a/b c", 2), "job-a_b_c-2");
  EXPECT_EQ(RunFileStem(ProcessKind::kConsumer, "", 3), "consumer-unknown-3");
  EXPECT_EQ(TaggedPath("run.h5", "rank3"), "run.rank3.h5");
  EXPECT_EQ(TaggedPath("out.d/run", "rank1"), "out.d/run.rank1");
}

TEST_F(RunOutputsTest, RunDirectoryIsCreatedAndEachProcessClaimsItsFileByTheRule) {
  const std::string run = Path("sweep/run1");  // two levels that do not exist yet
  TelemetrySpec spec = Spec("telemetry(dir=" + run + ",json=on,trace=on)");
  auto first = PrepareSinks(spec, {ProcessKind::kService, 0, false, ""});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string stem = run + "/service-" + Host() + "-" + std::to_string(getpid());
  EXPECT_EQ(first->hdf5, stem + ".h5");
  EXPECT_EQ(first->json, stem + ".json");
  EXPECT_EQ(first->trace, stem + ".trace.json");
  EXPECT_TRUE(first->csv.empty());
  // Claimed at the start: the file exists, empty (a process killed now leaves it so).
  ASSERT_TRUE(fs::exists(first->hdf5));
  EXPECT_EQ(fs::file_size(first->hdf5), 0u);
  // A second collector of the same kind in this process gets the next name, never the same.
  auto second = PrepareSinks(spec, {ProcessKind::kService, 0, false, ""});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->hdf5, stem + "-2.h5");
  EXPECT_EQ(second->json, stem + "-2.json");
  // The short form and another kind.
  auto consumer = PrepareSinks(Spec("dir:" + run), {ProcessKind::kConsumer, 5, false, "x"});
  ASSERT_TRUE(consumer.ok());
  EXPECT_EQ(consumer->hdf5, run + "/consumer-" + Host() + "-" + std::to_string(getpid()) + ".h5");
}

TEST_F(RunOutputsTest, ExplicitPathsExpandPatternsAndTagProcessesThatWriteAlone) {
  TelemetrySpec spec = Spec("telemetry(hdf5=" + Path("t.h5") + ",json=" + Path("r%r.json") + ")");
  auto alone = PrepareSinks(spec, {ProcessKind::kTrainer, 3, false, "rank3"});
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_EQ(alone->hdf5, Path("t.rank3.h5"));  // no pattern: the process tag is inserted
  EXPECT_EQ(alone->json, Path("r3.json"));     // a pattern: expanded, not tagged
  EXPECT_FALSE(fs::exists(alone->hdf5)) << "an explicit path is checked, not left behind";
  auto gathered = PrepareSinks(spec, {ProcessKind::kJob, 0, true, ""});
  ASSERT_TRUE(gathered.ok());
  EXPECT_EQ(gathered->hdf5, Path("t.h5"));  // rank 0 of an MPI job writes every rank
  auto other = PrepareSinks(spec, {ProcessKind::kJob, 2, true, ""});
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->hdf5.empty() && other->json.empty()) << "other ranks write nothing";
}

TEST_F(RunOutputsTest, AnExistingFileIsCheckedWithoutBeingTruncated) {
  {
    std::ofstream f(Path("keep.h5"));
    f << "previous run";
  }
  ASSERT_TRUE(PrepareOutputFile(Path("keep.h5"), "telemetry hdf5 file").ok());
  EXPECT_EQ(fs::file_size(Path("keep.h5")), 12u);
  ASSERT_TRUE(PrepareOutputFile(Path("new/deeper/out.json"), "x").ok());
  EXPECT_TRUE(fs::is_directory(Path("new/deeper"))) << "parents are created";
  EXPECT_FALSE(fs::exists(Path("new/deeper/out.json")));
}

TEST_F(RunOutputsTest, UnwritablePathsAreRefusedNamingThePathAndTheCause) {
  {
    std::ofstream f(Path("plain"));
    f << "x";
  }
  // Under a regular file (refused even for root, unlike permission bits).
  Status s = PrepareOutputFile(Path("plain/run.h5"), "telemetry hdf5 file");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("telemetry hdf5 file " + Path("plain/run.h5")), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("Not a directory"), std::string::npos) << s.message();
  // A directory where a file should be.
  s = PrepareOutputFile(dir_.string(), "telemetry trace");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Is a directory"), std::string::npos) << s.message();
  // A run directory that cannot be made.
  auto sinks = PrepareSinks(Spec("dir:" + Path("plain/run")), {ProcessKind::kLeader, 0, false, ""});
  ASSERT_FALSE(sinks.ok());
  EXPECT_NE(sinks.status().message().find("telemetry run directory " + Path("plain/run")),
            std::string::npos)
      << sinks.status().message();
  EXPECT_NE(sinks.status().message().find(Path("plain") + " is not a directory"),
            std::string::npos)
      << sinks.status().message();
  // /proc is read-only for everyone: the probe write fails.
  Status ro = PrepareOutputDir("/proc/bc-no-such-dir", "report directory");
  EXPECT_FALSE(ro.ok());
  EXPECT_NE(ro.message().find("report directory /proc/bc-no-such-dir"), std::string::npos)
      << ro.message();
}

TEST_F(RunOutputsTest, CreateCollectorRefusesAnUnwritableSinkBeforeCollecting) {
  {
    std::ofstream f(Path("plain"));
    f << "x";
  }
  Options o;
  o.telemetry = "telemetry(trace=" + Path("plain/t.json") + ")";
  Sinks sinks;
  auto c = CreateCollector(o, {ProcessKind::kLeader, 0, false, ""}, 0, Role::kLeader, &sinks);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("option 'telemetry'"), std::string::npos);
  EXPECT_NE(c.status().message().find("telemetry trace " + Path("plain/t.json")),
            std::string::npos)
      << c.status().message();
}

}  // namespace
}  // namespace batchcast::telemetry
