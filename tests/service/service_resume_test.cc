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
#include <mutex>
#include <random>
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
  std::string ids;
  long long bad = 0;
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
        line->next_batch;
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
      cv_.notify_all();
    }
  }

  std::unique_ptr<Consumer> consumer_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t read_ = 0, allowed_ = 0;
  bool stop_ = false, failed_ = false;
};

int ActiveMembers(const shm::StatusReply& r) {
  int active = 0;
  for (uint32_t i = 0; i < r.count; ++i)
    active += r.members[i].state == uint32_t(shm::MemberState::kActive) ? 1 : 0;
  return active;
}

std::vector<std::string> TrialArgs(const std::string& socket, uint64_t epochs, uint64_t start_epoch,
                                   uint64_t start_batch, uint32_t rank, uint32_t world) {
  std::vector<std::string> a = {SERVICE_CONSUMER, socket, std::to_string(kBatch),
                                std::to_string(epochs), std::to_string(kSamples), "-", "0", "1000",
                                std::to_string(start_epoch), std::to_string(start_batch)};
  if (world > 1) {
    a.push_back(std::to_string(rank));
    a.push_back(std::to_string(world));
  }
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

}  // namespace batchcast::service_resume
