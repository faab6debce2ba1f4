// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Resume behind the stream (docs/service.md, "Resuming a trial"): a trial is SIGKILLed at a
// random batch while another trial keeps the service's stream going, and comes back with its
// saved position after the stream has moved on. The service replays the rest of its epoch
// to it alone; then it joins the stream at the stream's next epoch. Every batch it receives
// is checked, sample id by sample id and pixel by pixel, against the stream definition
// (producer::StreamPlan: what an uninterrupted trial receives for that epoch and batch).
#include "tests/service/resume_test_util.h"

namespace batchcast::service_resume {

// By name: a unity build also sees service_chaos_test.cc's own Trial.
using resume_test::ActiveMembers;
using resume_test::Door;
using resume_test::EndTrial;
using resume_test::ExpectedIds;
using resume_test::kBatch;
using resume_test::kProducerBatch;
using resume_test::kSamples;
using resume_test::kSlots;
using resume_test::Line;
using resume_test::NextLine;
using resume_test::Pacer;
using resume_test::ResumedManyTimes;
using resume_test::SpawnTrial;
using resume_test::Trial;
using resume_test::TrialArgs;

// One kill and resume. The trial's first life starts with the stream (epoch 0) and is killed
// after a random batch; the pacer then reads `extra` more batches (the stream moves on
// without the trial) and holds still until the resumed trial is admitted, so the stream's
// position at the resume is known; then the resumed trial runs two epochs from its saved
// position. Returns whether the stream was past the position when the trial came back;
// *same_epoch: whether it was still in the trial's epoch then.
bool KillAndResume(uint32_t world, uint64_t seed, bool* same_epoch) {
  const uint32_t rank = world - 1;
  const uint64_t per_epoch = kSamples / (kBatch * world);  // the trial's batches per epoch
  std::mt19937_64 rng(seed);
  const uint64_t kill_after = 1 + rng() % (2 * per_epoch);
  const int64_t extra = static_cast<int64_t>(rng() % (2 * kSamples / kBatch));
  SCOPED_TRACE(::testing::Message() << "seed " << seed << ": world " << world << ", killed after "
                                    << kill_after << " batches, stream moved on by " << extra
                                    << " batches of the pacer");
  const std::string sock = service_test::UniqueSocket("resume" + std::to_string(seed % 1000));
  // The first batch waits for both joins: started one after the other, the trial could join
  // past the late-join window (seen under TSan) and begin with a catch-up, not epoch 0.
  service_test::Child server = service_test::StartServer(sock, kSamples, kProducerBatch, kBatch,
                                                         1000, 0.02, 0, kSlots, 5000, false, -1,
                                                         "", 2);
  EXPECT_GT(server.pid, 0);
  bool behind = false;
  {
    Pacer pacer(sock);
    Trial trial = SpawnTrial(TrialArgs(sock, kEpochsUntilStreamEnds, 0, 0, rank, world));
    // Both admitted before the pacer reads: the trial gets epoch 0 from its start.
    EXPECT_TRUE(service_test::WaitStatus(sock, [](const shm::StatusReply& r) {
      return ActiveMembers(r) == 2;
    }));
    pacer.Allow(INT64_MAX);
    Line line, saved;
    std::string end;
    for (uint64_t i = 0; i < kill_after; ++i) {  // its first life, from the stream's start
      const bool last = i + 1 == kill_after;
      if (!NextLine(trial, !last, &line, &end)) {
        ADD_FAILURE() << "the trial ended early: " << end;
        break;
      }
      EXPECT_EQ(line.epoch * per_epoch + line.index, i) << "batch " << i;
      EXPECT_EQ(line.ids, ExpectedIds(line.epoch, line.index, rank, world)) << "batch " << i;
      EXPECT_EQ(line.bad, 0);
      saved = line;
    }
    // The stream goes on without the trial (killed while it waits for the test's ack, so
    // nothing after its saved position was taken), by exactly `extra` batches of the pacer.
    const int64_t target = pacer.read() + extra;
    pacer.Allow(target);
    EndTrial(trial, true);
    EXPECT_TRUE(pacer.WaitRead(target));
    const uint64_t e = saved.next_epoch, b = saved.next_batch;
    const int64_t first = static_cast<int64_t>(b * kBatch * world / kProducerBatch);
    auto before = shm::QueryStatus(sock, 2000);
    EXPECT_TRUE(before.ok()) << before.status().ToString();
    if (before.ok())
      behind = before->stream.epoch > e ||
               (before->stream.epoch == e && int64_t(before->stream.batch_in_epoch) > first);
    Trial resumed = SpawnTrial(TrialArgs(sock, e + 2, e, b, rank, world));
    // Admitted (with its replay settled) while the pacer holds still: the stream's epoch then
    // is the one it was admitted in.
    EXPECT_TRUE(service_test::WaitStatus(sock, [](const shm::StatusReply& r) {
      return ActiveMembers(r) == 2;
    }));
    auto admitted = shm::QueryStatus(sock, 2000);
    EXPECT_TRUE(admitted.ok());
    const uint64_t stream_epoch = admitted.ok() ? admitted->stream.epoch : 0;
    *same_epoch = stream_epoch == e;
    pacer.Allow(INT64_MAX);
    std::vector<Line> got;
    while (NextLine(resumed, true, &line, &end)) got.push_back(line);
    EXPECT_EQ(end.rfind("end ok 2", 0), 0u) << end;
    EndTrial(resumed, false);
    // The rest of epoch e, batch by batch, then one whole epoch of the stream: e + 1 when the
    // stream was still in epoch e (byte for byte the uninterrupted run), else the stream's
    // next epoch (every sample exactly once, as the stream defines it).
    const uint64_t expected = (per_epoch - b) + per_epoch;
    EXPECT_EQ(got.size(), expected) << "resumed at epoch " << e << " batch " << b;
    for (size_t i = 0; i < got.size(); ++i) {
      const Line& l = got[i];
      const bool first_epoch = i < per_epoch - b;
      if (first_epoch) {
        EXPECT_EQ(l.epoch, e) << "batch " << i;
        EXPECT_EQ(l.index, b + i) << "batch " << i;
      } else {
        EXPECT_GT(l.epoch, e) << "batch " << i;
        if (stream_epoch <= e) {
          EXPECT_EQ(l.epoch, e + 1) << "batch " << i;
        }
        EXPECT_EQ(l.index, i - (per_epoch - b)) << "batch " << i;
      }
      EXPECT_EQ(l.ids, ExpectedIds(l.epoch, l.index, rank, world))
          << "batch " << i << " (epoch " << l.epoch << " batch " << l.index << ")";
      EXPECT_EQ(l.bad, 0) << "batch " << i;
    }
    if (behind) {
      auto after = shm::QueryStatus(sock, 2000);
      EXPECT_TRUE(after.ok());
      if (after.ok()) {
        EXPECT_EQ(after->stream.resume_replays, 1u);
        EXPECT_GT(after->stream.resume_replayed_batches, 0u);
      }
    }
  }
  kill(server.pid, SIGTERM);
  const std::string stats = service_test::ReadLineWith(server, "stats");
  service_test::Wait(server);
  EXPECT_NE(stats.find("\"resume_replays\":" + std::string(behind ? "1" : "")), std::string::npos)
      << stats;
  return behind;
}

void RandomKillsAndResumes(uint32_t world, uint64_t base_seed) {
  int behind = 0, same = 0;
  for (int run = 0; run < 2; ++run) {
    bool same_epoch = false;
    behind += KillAndResume(world, base_seed + run, &same_epoch) ? 1 : 0;
    same += same_epoch ? 1 : 0;
  }
  std::printf("service resume (world %u, seeds %llu..+1): %d of 2 resumed behind the stream, %d "
              "of them in the stream's epoch\n", world, (unsigned long long)base_seed, behind,
              same);
}

TEST(ServiceResumeTest, KilledTrialResumesBehindTheStreamByteForByte) {
  RandomKillsAndResumes(1, 0x1600 + std::random_device()() % 10000 * 8);
}

TEST(ServiceResumeTest, KilledShardTrialResumesBehindTheStreamByteForByte) {
  RandomKillsAndResumes(2, 0x2600 + std::random_device()() % 10000 * 8);
}

// `batchcast serve`'s stream (service_server: a synthetic source, every pixel checked).
Door ServeDoor() {
  Door d;
  d.name = "batchcast serve";
  d.start = [](const std::string& tag, std::string* socket) {
    *socket = service_test::UniqueSocket(tag);
    // The pacer and the trial start the stream together (see KillAndResume).
    service_test::Child c = service_test::StartServer(*socket, kSamples, kProducerBatch, kBatch,
                                                      1000, 0.02, 0, kSlots, 5000, false, -1,
                                                      "", 2);
    return Trial{c.pid, c.out, -1};
  };
  d.finish = [](Trial& server) {
    kill(server.pid, SIGTERM);
    service_test::Child c{server.pid, server.out};
    service_test::ReadLineWith(c, "stats");
    service_test::Wait(c);
    server = Trial();
  };
  return d;
}

TEST(ServiceResumeTest, TrialResumedUpToFourTimesTrainsExactlyItsEpochs) {
  const uint64_t base = 0x3600 + std::random_device()() % 10000 * 8;
  for (uint64_t run = 0; run < 4; ++run) ResumedManyTimes(ServeDoor(), base + run);
}

// A moved position (its own epoch behind the stream's) needs more stream epochs than
// epochs - start_epoch: a stream that ends sooner refuses it at attach, naming the epochs it
// would need, instead of ending the trial early.
TEST(ServiceResumeTest, MovedPositionAgainstAStreamThatEndsTooSoonIsRefused) {
  const std::string sock = service_test::UniqueSocket("moved-finite");
  service_test::Child server = service_test::StartServer(sock, kSamples, kProducerBatch, kBatch,
                                                         1000, 0.02, 3, kSlots);
  ASSERT_GT(server.pid, 0);
  // Epoch 2 of 3, but only 1 of its 3 epochs done: it needs stream epochs 2..3.
  Trial t = SpawnTrial(TrialArgs(sock, 3, 2, 0, 0, 1, 1));
  Line line;
  std::string end;
  EXPECT_FALSE(NextLine(t, true, &line, &end));
  EndTrial(t, false);
  for (const char* part : {"with 1 of its 3 epochs done", "needs 2 more epochs of the stream",
                           "ends after epoch 2", "epochs >= 4"})
    EXPECT_NE(end.find(part), std::string::npos) << part << " in " << end;
  // Its own epoch after the stream's: refused as a position no consumer saves.
  Trial ahead = SpawnTrial(TrialArgs(sock, 3, 1, 0, 0, 1, 2));
  EXPECT_FALSE(NextLine(ahead, true, &line, &end));
  EndTrial(ahead, false);
  EXPECT_NE(end.find("never run ahead of the stream's"), std::string::npos) << end;
  kill(server.pid, SIGTERM);
  service_test::Wait(server);
}

}  // namespace batchcast::service_resume
