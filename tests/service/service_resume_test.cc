// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Resume behind the stream (docs/service.md, "Resuming a trial"): a trial is SIGKILLed at a
// random batch while another trial keeps the service's stream going, and comes back with its
// saved position after the stream has moved on. The service replays the rest of its epoch
// to it alone; then it joins the stream at the stream's next epoch. Every batch it receives
// is checked, sample id by sample id and pixel by pixel, against the stream definition
// (producer::StreamPlan: what an uninterrupted trial receives for that epoch and batch).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "batchcast/consumer.h"
#include "producer/stream_plan.h"
#include "tests/service/service_test_util.h"
#include "transport/shm/segment.h"

namespace batchcast::service_resume {

constexpr int kSamples = 192, kProducerBatch = 16, kBatch = 8, kSlots = 4;
constexpr uint64_t kServerSeed = 7;  // service_server's seed (shuffled)

// A trial process with its stdin (one ack byte per batch line) and stdout on pipes.
struct Trial {
  pid_t pid = -1;
  FILE* out = nullptr;
  int ack = -1;
};

Trial SpawnTrial(const std::vector<std::string>& args) {
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[0]), close(in[1]), close(out[0]), close(out[1]);
    std::vector<char*> av;
    for (const auto& a : args) av.push_back(const_cast<char*>(a.c_str()));
    av.push_back(nullptr);
    execv(av[0], av.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  return {pid, fdopen(out[0], "r"), in[1]};
}

void EndTrial(Trial& t, bool kill_it) {
  if (kill_it) kill(t.pid, SIGKILL);
  if (t.ack >= 0) close(t.ack);
  int status = 0;
  waitpid(t.pid, &status, 0);
  if (t.out != nullptr) fclose(t.out);
  t = Trial();
}

struct Line {
  uint64_t epoch = 0, index = 0, next_epoch = 0, next_batch = 0;
  std::string ids, checksum;
  long long bad = 0;
  int64_t next_run_epoch = -1;
};

// The next batch line of the trial (acknowledged unless `ack` is false); false at its end,
// with *end the line that ended it ("end ok ..." or "error ...").
bool NextLine(Trial& t, bool ack, Line* line, std::string* end) {
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), t.out) != nullptr) {
    const std::string s(buf);
    if (s.rfind("end ", 0) == 0 || s.rfind("error ", 0) == 0) {
      *end = s;
      return false;
    }
    if (s.rfind("batch ", 0) != 0) continue;
    std::istringstream in(s.substr(6));
    in >> line->epoch >> line->index >> line->ids >> line->bad >> line->next_epoch >>
        line->next_batch >> line->checksum >> line->next_run_epoch;
    if (ack && write(t.ack, "a", 1) != 1) return false;
    return true;
  }
  *end = "(output closed)";
  return false;
}

// What batch `index` of `epoch` holds for rank/world (world 1: replicate): the stream
// definition a trial receives whenever it is attached (exact carving; the epoch divides into
// global batches of world x kBatch, so there is no tail).
std::string ExpectedIds(uint64_t epoch, uint64_t index, uint32_t rank, uint32_t world) {
  producer::StreamPlan plan(kSamples, kProducerBatch, kServerSeed, true);
  const std::vector<int64_t>& order = plan.EpochOrder(epoch);
  const uint64_t begin = index * world * kBatch + rank * kBatch;
  std::string ids;
  for (uint64_t i = begin; i < begin + kBatch && i < order.size(); ++i)
    ids += (i == begin ? "" : ",") + std::to_string(order[i]);
  return ids;
}

// The pacing trial: reads batches in a thread, at most `allowed` of them (the test moves the
// stream on by allowing more), until stopped.
class Pacer {
 public:
  explicit Pacer(const std::string& socket) {
    Options o;
    o.batch_size = kBatch;
    o.epochs = kEpochsUntilStreamEnds;
    o.buffer_depth = 2;
    o.heartbeat_ms = 1000;
    auto c = Consumer::Attach(socket, o, -1, "pacer");
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (!c.ok()) return;
    consumer_ = std::move(c).value();
    thread_ = std::thread([this] { Run(); });
  }
  ~Pacer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      allowed_ = INT64_MAX;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    consumer_.reset();
  }
  int64_t read() {
    std::lock_guard<std::mutex> lock(mu_);
    return read_;
  }
  void Allow(int64_t total) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      allowed_ = total;
    }
    cv_.notify_all();
  }
  // What the pacer (an uninterrupted consumer of the stream) read as batch `index` of stream
  // epoch `epoch`: "ids checksum" as a trial's line has them ("": not read).
  std::string Read(uint64_t epoch, uint64_t index) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = seen_.find({epoch, index});
    return it == seen_.end() ? std::string() : it->second;
  }
  // Blocks until it has read `total` batches (false: it failed first).
  bool WaitRead(int64_t total) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return read_ >= total || failed_; });
    return !failed_;
  }

 private:
  void Run() {
    Batch b;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || read_ < allowed_; });
        if (stop_) return;
      }
      Status st = consumer_->Next(&b);
      std::lock_guard<std::mutex> lock(mu_);
      if (!st.ok()) {
        failed_ = true;
        cv_.notify_all();
        EXPECT_TRUE(stop_) << st.ToString();
        return;
      }
      read_ += 1;
      seen_[{b.info().epoch, b.info().index}] = Describe(b);
      cv_.notify_all();
    }
  }

  std::unique_ptr<Consumer> consumer_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t read_ = 0, allowed_ = 0;
  bool stop_ = false, failed_ = false;
  std::map<std::pair<uint64_t, uint64_t>, std::string> seen_;

  // "ids checksum" of batch `b`, as service_consumer prints them (FNV-1a of the image bytes).
  static std::string Describe(const Batch& b) {
    std::string ids;
    for (int64_t i = 0; i < b.images().shape[0]; ++i)
      ids += (i ? "," : "") + std::to_string(b.sample_ids()[i]);
    const auto* img = static_cast<const uint8_t*>(b.images().data);
    uint64_t sum = 1469598103934665603ULL;
    for (size_t k = 0; k < b.images().nbytes; ++k) sum = (sum ^ img[k]) * 1099511628211ULL;
    char hex[32];
    std::snprintf(hex, sizeof(hex), "%llx", (unsigned long long)sum);
    return ids + " " + hex;
  }
};

int ActiveMembers(const shm::StatusReply& r) {
  int active = 0;
  for (uint32_t i = 0; i < r.count; ++i)
    active += r.members[i].state == uint32_t(shm::MemberState::kActive) ? 1 : 0;
  return active;
}

std::vector<std::string> TrialArgs(const std::string& socket, uint64_t epochs, uint64_t start_epoch,
                                   uint64_t start_batch, uint32_t rank, uint32_t world,
                                   int64_t start_run_epoch = -1) {
  std::vector<std::string> a = {SERVICE_CONSUMER, socket, std::to_string(kBatch),
                                std::to_string(epochs), std::to_string(kSamples), "-", "0", "1000",
                                std::to_string(start_epoch), std::to_string(start_batch)};
  if (world > 1 || start_run_epoch >= 0) {
    a.push_back(std::to_string(rank));
    a.push_back(std::to_string(world));
  }
  if (start_run_epoch >= 0) a.push_back(std::to_string(start_run_epoch));
  return a;
}

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
  service_test::Child server = service_test::StartServer(sock, kSamples, kProducerBatch, kBatch,
                                                         1000, 0.02, 0, kSlots);
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

// One trial of `epochs` epochs, killed at random batches and resumed 1-4 times with the
// position it saved (Consumer::Position(): stream epoch, batch and its own run epoch) while
// the pacer moves the stream on by a random number of batches before each resume, often
// into a later epoch (the service then replays the rest of the trial's epoch and the trial
// goes on with the stream's next epoch). Whatever the kills, the trial trains exactly the
// epochs it asked for: its batches, all lives together, are `epochs` whole epochs, each one
// stream epoch batch 0..B-1 in order, byte for byte what the pacer (an uninterrupted consumer
// of the stream) read for that epoch and batch, and the plan's sample order (every sample
// exactly once per epoch).
void ResumedManyTimes(uint64_t seed) {
  const uint64_t per_epoch = kSamples / kBatch;
  std::mt19937_64 rng(seed);
  const uint64_t epochs = 3 + rng() % 3;
  const int resumes = 1 + static_cast<int>(rng() % 4);
  std::ostringstream plan;
  plan << "seed " << seed << ": a trial of " << epochs << " epochs (" << per_epoch
       << " batches each), " << resumes << " resumes:";
  const std::string sock = service_test::UniqueSocket("multi" + std::to_string(seed % 1000));
  service_test::Child server = service_test::StartServer(sock, kSamples, kProducerBatch, kBatch,
                                                         1000, 0.02, 0, kSlots);
  ASSERT_GT(server.pid, 0);
  std::vector<Line> got;  // every batch the trial trained on, all lives in order
  std::string end;
  // The kill points: `resumes` distinct batches of the run, before its last, in order.
  const uint64_t total = epochs * per_epoch;
  std::set<uint64_t> kills;
  while (kills.size() < static_cast<size_t>(resumes)) kills.insert(1 + rng() % (total - 1));
  std::vector<uint64_t> kill_at(kills.begin(), kills.end());
  {
    Pacer pacer(sock);
    Trial trial = SpawnTrial(TrialArgs(sock, epochs, 0, 0, 0, 1));
    EXPECT_TRUE(service_test::WaitStatus(sock, [](const shm::StatusReply& r) {
      return ActiveMembers(r) == 2;
    }));
    pacer.Allow(INT64_MAX);
    for (int life = 0; life <= resumes; ++life) {
      const bool last_life = life == resumes;
      const uint64_t kill_after = last_life ? UINT64_MAX : kill_at[life] - got.size();
      const int64_t extra = last_life ? 0 : static_cast<int64_t>(rng() % (3 * per_epoch));
      if (!last_life)
        plan << " [life " << life << ": killed after " << kill_after << " batches, stream "
             << "moved on by " << extra << "]";
      SCOPED_TRACE(plan.str());
      Line line;
      uint64_t read = 0;
      bool ended = false;
      while (read < kill_after) {
        if (!NextLine(trial, read + 1 < kill_after, &line, &end)) {
          ended = true;
          break;
        }
        got.push_back(line);
        read += 1;
      }
      if (ended) {
        EndTrial(trial, false);
        EXPECT_TRUE(last_life) << "life " << life << " ended early: " << end;
        break;
      }
      // Killed while it waits for the ack of its last batch: its saved position (the line's
      // next position) is exactly after the batches it trained on.
      const int64_t target = pacer.read() + extra;
      pacer.Allow(target);
      EndTrial(trial, true);
      EXPECT_TRUE(pacer.WaitRead(target));
      trial = SpawnTrial(TrialArgs(sock, epochs, line.next_epoch, line.next_batch, 0, 1,
                                   line.next_run_epoch));
      // Admitted (its replay settled) while the pacer holds still, then all go on.
      EXPECT_TRUE(service_test::WaitStatus(sock, [](const shm::StatusReply& r) {
        return ActiveMembers(r) == 2;
      }));
      pacer.Allow(INT64_MAX);
    }
    SCOPED_TRACE(plan.str());
    EXPECT_EQ(end.rfind("end ok", 0), 0u) << end;
    // Its epochs: consecutive runs of batches 0..B-1 of one stream epoch each, later and later.
    EXPECT_EQ(got.size(), total) << "the trial trained " << got.size() << " batches, asked for "
                                 << epochs << " epochs of " << per_epoch;
    std::vector<uint64_t> stream_epochs;
    for (size_t i = 0; i < got.size(); ++i) {
      const Line& l = got[i];
      const uint64_t own = i / per_epoch, index = i % per_epoch;
      if (index == 0) {
        EXPECT_TRUE(stream_epochs.empty() || l.epoch > stream_epochs.back()) << "batch " << i;
        stream_epochs.push_back(l.epoch);
      }
      EXPECT_EQ(l.epoch, stream_epochs.back()) << "batch " << i << " (own epoch " << own << ")";
      EXPECT_EQ(l.index, index) << "batch " << i << " (own epoch " << own << ")";
      EXPECT_EQ(l.ids, ExpectedIds(l.epoch, l.index, 0, 1)) << "batch " << i;
      EXPECT_EQ(l.bad, 0) << "batch " << i;
      // Its position after the batch counts its own epochs, whatever stream epoch it is in.
      EXPECT_EQ(l.next_run_epoch, int64_t(own + (index + 1 == per_epoch ? 1 : 0)))
          << "batch " << i;
    }
    // Byte for byte what the uninterrupted pacer read at the same stream epoch and batch.
    if (!stream_epochs.empty()) {
      pacer.Allow(INT64_MAX);
      EXPECT_TRUE(pacer.WaitRead(int64_t((stream_epochs.back() + 1) * per_epoch)));
    }
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i].ids + " " + got[i].checksum, pacer.Read(got[i].epoch, got[i].index))
          << "batch " << i << " (stream epoch " << got[i].epoch << " batch " << got[i].index
          << ")";
    std::printf("service resume x%d: %s -> stream epochs", resumes, plan.str().c_str());
    for (uint64_t e : stream_epochs) std::printf(" %llu", (unsigned long long)e);
    std::printf("\n");
  }
  kill(server.pid, SIGTERM);
  service_test::ReadLineWith(server, "stats");
  service_test::Wait(server);
}

TEST(ServiceResumeTest, TrialResumedUpToFourTimesTrainsExactlyItsEpochs) {
  const uint64_t base = 0x3600 + std::random_device()() % 10000 * 8;
  for (uint64_t run = 0; run < 4; ++run) ResumedManyTimes(base + run);
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
