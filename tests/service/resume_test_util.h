// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The resume tests' parts (docs/service.md "Resuming a trial"): trial processes
// (service_consumer, one acknowledged line per batch, so a kill point is exact), the pacer (an
// uninterrupted in-process consumer that moves the stream on by as many batches as the test
// allows and keeps what it read), and the randomized run of one trial resumed 1-4 times,
// over any front door's stream (Door).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "batchcast/consumer.h"
#include "producer/stream_plan.h"
#include "tests/service/service_test_util.h"
#include "transport/shm/segment.h"

namespace batchcast::resume_test {

constexpr int kSamples = 192, kProducerBatch = 16, kBatch = 8, kSlots = 4;
constexpr uint64_t kServerSeed = 7;  // service_server's seed (shuffled)
constexpr int kStreamEpochs = 24;    // a finite stream's epochs: more than any run here moves

// A trial process with its stdin (one ack byte per batch line) and stdout on pipes.
struct Trial {
  pid_t pid = -1;
  FILE* out = nullptr;
  int ack = -1;
};

inline Trial SpawnTrial(const std::vector<std::string>& args) {
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

// Ends the trial: SIGKILLed (kill_it), stopped cleanly while it waits for its acknowledgement
// (stop: it detaches and exits, as a trial does that saved its checkpoint), or waited for.
inline void EndTrial(Trial& t, bool kill_it, bool stop = false) {
  if (kill_it && !stop) kill(t.pid, SIGKILL);
  if (stop && t.ack >= 0 && write(t.ack, "q", 1) != 1) kill(t.pid, SIGKILL);
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
inline bool NextLine(Trial& t, bool ack, Line* line, std::string* end) {
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
inline std::string ExpectedIds(uint64_t epoch, uint64_t index, uint32_t rank, uint32_t world) {
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
  // Blocks until it has read `total` batches (false: it failed, or the stream ended, first).
  bool WaitRead(int64_t total) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return read_ >= total || failed_ || ended_; });
    return read_ >= total;
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
      if (st.code() == StatusCode::kEndOfStream) {  // a finite stream's end
        ended_ = true;
        cv_.notify_all();
        return;
      }
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
  bool stop_ = false, failed_ = false, ended_ = false;
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

// The members as the leader sees them ("name state start position; ..."), for a failure.
inline std::string DescribeMembers(const std::string& socket) {
  auto r = shm::QueryStatus(socket, 2000);
  if (!r.ok()) return r.status().ToString();
  std::ostringstream out;
  out << "stream epoch " << r->stream.epoch << " batch " << r->stream.batch_in_epoch
      << ", published " << r->published << ":";
  for (uint32_t i = 0; i < r->count; ++i)
    out << " [" << r->members[i].name << " state " << r->members[i].state << " start "
        << int64_t(r->members[i].start_seq) << " position " << int64_t(r->members[i].position)
        << "]";
  return out.str();
}

inline int ActiveMembers(const shm::StatusReply& r) {
  int active = 0;
  for (uint32_t i = 0; i < r.count; ++i)
    active += r.members[i].state == uint32_t(shm::MemberState::kActive) ? 1 : 0;
  return active;
}

inline std::vector<std::string> TrialArgs(const std::string& socket, uint64_t epochs, uint64_t start_epoch,
                                   uint64_t start_batch, uint32_t rank, uint32_t world,
                                   int64_t start_run_epoch = -1,
                                   const std::string& samples = std::to_string(kSamples)) {
  std::vector<std::string> a = {SERVICE_CONSUMER, socket, std::to_string(kBatch),
                                std::to_string(epochs), samples, "-", "0", "1000",
                                std::to_string(start_epoch), std::to_string(start_batch)};
  if (world > 1 || start_run_epoch >= 0 || samples != std::to_string(kSamples)) {
    a.push_back(std::to_string(rank));
    a.push_back(std::to_string(world));
  }
  if (start_run_epoch >= 0 || samples != std::to_string(kSamples))
    a.push_back(std::to_string(start_run_epoch));
  return a;
}

// A front door's stream as the resume tests run it (kSamples samples, producer batches of
// kProducerBatch, seed kServerSeed shuffled, kSlots ring slots, consumer batches of kBatch):
// `batchcast serve`, the MPI Runtime, batchcast.Leader, batchcast-run.
struct Door {
  std::string name;
  std::string samples = std::to_string(kSamples);  // the trials' SAMPLES (service_consumer)
  // A trial "killed" stops cleanly instead (the MPI Runtime fails the job on a lost consumer:
  // a trial there is stopped with its checkpoint saved, as on a preemption's SIGTERM).
  bool stop_cleanly = false;
  // Consumers of the stream besides the pacer and the trial: already active when the pacer
  // and the first trial are, and once go() let them start.
  int others_at_start = 0, others = 0;
  // Starts the stream: its process (stdin and stdout on pipes) and its socket name.
  std::function<Trial(const std::string& tag, std::string* socket)> start;
  // Once the pacer and the first trial are admitted: the others may start reading.
  std::function<void(Trial&)> go;
  // After the pacer and the trial have left: ends the stream and checks how it ended.
  std::function<void(Trial&)> finish;
};

// One trial of `epochs` epochs, killed at random batches and resumed 1-4 times with the
// position it saved (Consumer::Position(): stream epoch, batch and its own run epoch) while
// the pacer moves the stream on by a random number of batches before each resume, often
// into a later epoch (the service then replays the rest of the trial's epoch and the trial
// goes on with the stream's next epoch). Whatever the kills, the trial trains exactly the
// epochs it asked for: its batches, all lives together, are `epochs` whole epochs, each one
// stream epoch batch 0..B-1 in order, byte for byte what the pacer (an uninterrupted consumer
// of the stream) read for that epoch and batch, and the plan's sample order (every sample
// exactly once per epoch).
inline void ResumedManyTimes(const Door& door, uint64_t seed) {
  const uint64_t per_epoch = kSamples / kBatch;
  std::mt19937_64 rng(seed);
  const uint64_t epochs = 3 + rng() % 3;
  const int resumes = 1 + static_cast<int>(rng() % 4);
  std::ostringstream plan;
  plan << door.name << ", seed " << seed << ": a trial of " << epochs << " epochs (" << per_epoch
       << " batches each), " << resumes << " resumes:";
  std::string sock;
  Trial leader = door.start("multi" + std::to_string(seed % 1000), &sock);
  ASSERT_GT(leader.pid, 0);
  const int members = 2 + door.others;
  std::vector<Line> got;  // every batch the trial trained on, all lives in order
  std::string end;
  // The kill points: `resumes` distinct batches of the run, before its last, in order.
  const uint64_t total = epochs * per_epoch;
  std::set<uint64_t> kills;
  while (kills.size() < static_cast<size_t>(resumes)) kills.insert(1 + rng() % (total - 1));
  std::vector<uint64_t> kill_at(kills.begin(), kills.end());
  {
    Pacer pacer(sock);
    Trial trial = SpawnTrial(TrialArgs(sock, epochs, 0, 0, 0, 1, -1, door.samples));
    // Admitted before the pacer reads: the trial gets epoch 0 from its start. Where others
    // read too (go), a join may settle only once they or the pacer read (a replay in the
    // window waits for the ring's slowest reader): attached is enough then.
    const int first = 2 + door.others_at_start;
    EXPECT_TRUE(service_test::WaitStatus(sock, [first, &door](const shm::StatusReply& r) {
      return (door.go ? int(r.count) : ActiveMembers(r)) == first;
    }));
    if (door.go) {
      door.go(leader);
      EXPECT_TRUE(service_test::WaitStatus(
          sock, [members](const shm::StatusReply& r) { return int(r.count) == members; }));
    }
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
      EndTrial(trial, true, door.stop_cleanly);
      EXPECT_TRUE(pacer.WaitRead(target));
      trial = SpawnTrial(TrialArgs(sock, epochs, line.next_epoch, line.next_batch, 0, 1,
                                   line.next_run_epoch, door.samples));
      // Attached (the killed life gone) while the pacer holds still, then all go on. Its join
      // settles at the leader's next position, or once the others read where the leader
      // waits for the ring's slowest reader (a replay to another late joiner).
      const pid_t pid = trial.pid;
      EXPECT_TRUE(service_test::WaitStatus(sock, [members, pid](const shm::StatusReply& r) {
        bool here = false;
        for (uint32_t i = 0; i < r.count; ++i) here |= r.members[i].pid == pid;
        return here && int(r.count) == members;
      })) << DescribeMembers(sock);
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
    std::printf("resume x%d: %s -> stream epochs", resumes, plan.str().c_str());
    for (uint64_t e : stream_epochs) std::printf(" %llu", (unsigned long long)e);
    std::printf("\n");
  }
  door.finish(leader);
}


}  // namespace batchcast::resume_test
