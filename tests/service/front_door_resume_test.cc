// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Resume behind the stream on every front door of the native pipeline (issue 34): the same
// randomized run as `batchcast serve`'s (resume_test_util.h: a trial killed at random batches
// and resumed 1-4 times while the pacer moves the stream on, every batch byte for byte what
// the uninterrupted pacer read, exactly its epochs) against a real dataset streamed by
//   - batchcast.Leader (a Python process; the killed trials are counted as lost),
//   - the MPI Runtime (mpirun; rank 0 leads and trains: the trial is stopped cleanly, since
//     a consumer lost without detaching fails an MPI job by design),
//   - batchcast-run (one task, --leader-trains, --on-trainer-loss continue: a sweep).
// Each one replays a passed position to the resuming trial alone, through the one
// producer::Producer (Admission::SettleResumers). Labels: service, mpi.
#include <sys/stat.h>

#include <fmt/format.h>

#include <fstream>
#include <memory>

#include "tests/service/resume_test_util.h"
#include "tests/unit/core/scoped_env.h"

namespace batchcast::front_door_resume {
namespace {

using namespace resume_test;

// The stream's options on every door's command line (the service_server's stream over a real
// dataset: kSamples samples, producer batches of kProducerBatch, seed kServerSeed shuffled).
std::vector<std::string> StreamFlags(const std::string& dataset) {
  return {"--dataset", dataset, "--limit-samples", std::to_string(kSamples), "--batch-size",
          std::to_string(kBatch), "--producer-batch", std::to_string(kProducerBatch),
          "--epochs", std::to_string(kStreamEpochs), "--seed", std::to_string(kServerSeed),
          "--shuffle", "--threads", "1", "--ring-slots", std::to_string(kSlots),
          "--heartbeat-ms", "1s"};
}

// A real dataset of kSamples 8x8 images (batchcast convert idx), made once per test program.
const std::string& Dataset() {
  static const std::string path = [] {
    const std::string dir = ::testing::TempDir() + "/bc_fd_resume_" + std::to_string(getpid());
    mkdir(dir.c_str(), 0700);
    service_test::WriteIdx(dir + "/img.idx", dir + "/lab.idx", kSamples);
    const std::string h5 = dir + "/set.h5";
    const std::string out = service_test::RunShell(
        std::string(BATCHCAST_CLI) + " convert idx --encode raw --images " + dir +
        "/img.idx --labels " + dir + "/lab.idx --out " + h5);
    EXPECT_EQ(access(h5.c_str(), R_OK), 0) << out;
    return h5;
  }();
  return path;
}

// The first line of `t`'s output that starts with `prefix` ("" at its end).
std::string LineWith(Trial& t, const std::string& prefix) {
  service_test::Child c{t.pid, t.out};
  return service_test::ReadLineWith(c, prefix);
}

// Waits for `t` to exit; its exit status (-1: killed by a signal).
int ExitOf(Trial& t) {
  if (t.ack >= 0) close(t.ack);
  int status = 0;
  waitpid(t.pid, &status, 0);
  if (t.out != nullptr) fclose(t.out);
  t = Trial();
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string Tag(const std::string& door, const std::string& tag) {
  return door + std::to_string(getpid()) + "x" + tag;
}

#ifdef BATCHCAST_PYTHON_DIR
// batchcast.Leader in its own Python process, ending with its consumers (end_when_empty).
Door PythonLeaderDoor() {
  Door d;
  d.name = "batchcast.Leader";
  d.samples = "real:" + std::to_string(kSamples);
  d.start = [](const std::string& tag, std::string* socket) {
    *socket = "bc-fdr-" + Tag("py", tag);
    const char* script =
        "import sys, batchcast\n"
        "ds, sock, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
        "leader = batchcast.Leader(ds, consumers=1, address=sock, epochs=epochs, batch_size=8,\n"
        "    producer_batch=16, limit_samples=192, seed=7, shuffle=True, threads=1,\n"
        "    ring_slots=4, heartbeat_ms='1s')\n"
        "print('ready', flush=True)\n"
        "try:\n"
        "    leader.wait()\n"
        "except Exception as e:  # the killed trials: lost consumers, reported here\n"
        "    print('lost:', e, flush=True)\n"
        "s = leader.stats()\n"
        "print('end', s['resume_replays'], len(s['lost_consumers']), flush=True)\n";
    ScopedEnv env({{"PYTHONPATH", std::string(BATCHCAST_PYTHON_DIR)}});
    Trial t = SpawnTrial({BATCHCAST_PYTHON, "-c", script, Dataset(), *socket,
                          std::to_string(kStreamEpochs)});
    EXPECT_NE(LineWith(t, "ready"), "");
    return t;
  };
  d.finish = [](Trial& leader) {
    const std::string end = LineWith(leader, "end ");
    EXPECT_EQ(ExitOf(leader), 0) << end;
    long long replays = -1, lost = -1;
    EXPECT_EQ(std::sscanf(end.c_str(), "end %lld %lld", &replays, &lost), 2) << end;
    EXPECT_GE(lost, 1) << end;  // every life but the last was SIGKILLed
  };
  return d;
}
#endif

// The MPI Runtime: one rank that leads and trains, its trainer reading the whole stream.
Door MpiRuntimeDoor() {
  Door d;
  d.name = "MPI Runtime";
  d.samples = "real:" + std::to_string(kSamples);
  d.stop_cleanly = true;
  d.others_at_start = d.others = 1;
  d.start = [](const std::string& tag, std::string* socket) {
    const std::string job = Tag("mpi", tag);
    std::vector<std::string> args = {MPIEXEC, "--oversubscribe", "--bind-to", "none", "-n", "1",
                                     RESUME_MPI_TRAINER, "--leader-trains", "--job-id", job};
    for (const std::string& f : StreamFlags(Dataset())) args.push_back(f);
    ScopedEnv env({{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}});
    Trial t = SpawnTrial(args);
    const std::string ready = LineWith(t, "ready ");
    EXPECT_NE(ready, "") << "the MPI job did not start";
    *socket = fmt::format("batchcast-{}-{}-n0-{}", getuid(), job, std::atoi(ready.c_str() + 6));
    return t;
  };
  d.go = [](Trial& job) { EXPECT_EQ(write(job.ack, "go\n", 3), 3); };
  d.finish = [](Trial& job) {
    const std::string end = LineWith(job, "trainer ");
    EXPECT_EQ(end, "trainer " + std::to_string(kStreamEpochs) + " epochs ok\n");
    EXPECT_EQ(ExitOf(job), 0) << end;
  };
  return d;
}

// batchcast-run as one torchrun-style task that leads and trains (--leader-trains), with the
// sweep policy: its trainer reads the whole stream once the test says go.
Door LauncherDoor() {
  Door d;
  d.name = "batchcast-run";
  d.samples = "real:" + std::to_string(kSamples);
  d.others = 1;
  auto trainer_log = std::make_shared<std::string>();
  d.start = [trainer_log](const std::string& tag, std::string* socket) {
    const std::string job = Tag("run", tag);
    *socket = fmt::format("batchcast-run-{}-{}-n0", getuid(), job);
    const std::string log = ::testing::TempDir() + "/bc_fdr_" + job + ".log";
    std::remove(log.c_str());
    *trainer_log = log;
    std::vector<std::string> args = {BATCHCAST_RUN, "--leader-trains", "--on-trainer-loss",
                                     "continue"};
    for (const std::string& f : StreamFlags(Dataset())) args.push_back(f);
    for (const std::string& a :
         {std::string("--"), std::string("/bin/sh"), std::string("-c"),
          "read go && exec " + std::string(SERVICE_CONSUMER) + " " + *socket + " " +
              std::to_string(kBatch) + " " + std::to_string(kStreamEpochs) + " real:" +
              std::to_string(kSamples) + " " + log})
      args.push_back(a);
    ScopedEnv env({{"RANK", "0"}, {"LOCAL_RANK", "0"}, {"WORLD_SIZE", "1"},
                   {"LOCAL_WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", "29400"}, {"TORCHELASTIC_RUN_ID", job}});
    Trial t = SpawnTrial(args);
    EXPECT_TRUE(service_test::WaitStatus(*socket, [](const shm::StatusReply&) { return true; }));
    return t;
  };
  d.go = [](Trial& run) { EXPECT_EQ(write(run.ack, "go\n", 3), 3); };
  d.finish = [trainer_log](Trial& run) {
    std::string out, line;
    while (!(line = LineWith(run, "")).empty()) out += line;
    EXPECT_EQ(ExitOf(run), 0) << out;
    // Its trainer, there from the stream's start, read every epoch whole.
    int whole = 0;
    std::string end;
    for (const std::string& l : service_test::ReadLines(*trainer_log)) {
      service_test::EpochLine e;
      if (service_test::ParseEpoch(l, &e))
        whole += e.samples == kSamples && e.dups == 0 && e.missing == 0 && e.first_batch == 0;
      if (l.rfind("end ", 0) == 0 || l.rfind("error ", 0) == 0) end = l;
    }
    EXPECT_EQ(whole, kStreamEpochs) << end;
    EXPECT_EQ(end, "end ok " + std::to_string(kStreamEpochs)) << *trainer_log;
    std::remove(trainer_log->c_str());
  };
  return d;
}

void RunDoor(const Door& door, uint64_t base) {
  for (uint64_t run = 0; run < 2; ++run) ResumedManyTimes(door, base + run);
}

TEST(FrontDoorResumeTest, PythonLeaderReplaysAResumedTrialByteForByte) {
#ifdef BATCHCAST_PYTHON_DIR
  RunDoor(PythonLeaderDoor(), 0x4600 + std::random_device()() % 10000 * 8);
#else
  GTEST_SKIP() << "built without the Python module";
#endif
}

TEST(FrontDoorResumeTest, MpiRuntimeReplaysAResumedTrialByteForByte) {
  RunDoor(MpiRuntimeDoor(), 0x5600 + std::random_device()() % 10000 * 8);
}

TEST(FrontDoorResumeTest, BatchcastRunReplaysAResumedTrialByteForByte) {
  RunDoor(LauncherDoor(), 0x6600 + std::random_device()() % 10000 * 8);
}

}  // namespace
}  // namespace batchcast::front_door_resume
