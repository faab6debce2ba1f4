// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The node data plane end to end without MPI: a leader thread, consumers as threads
// and as forked processes, real shared memory and the real control socket.
#include <dirent.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "batchcast/consumer.h"
#include "core/option_scope.h"
#include "core/random.h"
#include "node/task_telemetry.h"
#include "producer/feed.h"
#include "producer/producer.h"
#include "producer/stream_plan.h"
#include "tests/unit/node/synthetic_source.h"

namespace batchcast::node {
namespace {

std::string UniqueSocket(const char* tag) {
  static std::atomic<int> n{0};
  return "batchcast-test-" + std::to_string(getpid()) + "-" + tag + "-" + std::to_string(n++);
}

struct LeaderHarness {
  std::unique_ptr<producer::Producer> leader;
  std::thread thread;
  Status status;
  ~LeaderHarness() {
    if (thread.joinable()) thread.join();
  }
  void Start() {
    thread = std::thread([this] { status = leader->Run(); });
  }
};

std::unique_ptr<LeaderHarness> MakeLeader(const Options& o, int expected, uint32_t max_b,
                                          int64_t n, bool end_when_empty = true,
                                          std::unique_ptr<producer::BatchSource> source = {},
                                          const std::string& socket = "") {
  producer::ProducerConfig cfg;
  cfg.options = o;
  cfg.expected_consumers = expected;
  cfg.max_consumer_batch = max_b;
  cfg.socket_name = socket.empty() ? UniqueSocket("dp") : socket;
  cfg.job = "test";
  cfg.join_timeout_ms = 30000;
  cfg.end_when_empty = end_when_empty;
  auto h = std::make_unique<LeaderHarness>();
  if (!source) source = std::make_unique<SyntheticSource>(n);
  auto l = producer::Producer::Create(cfg, std::move(source));
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  h->leader = std::move(l).value();
  return h;
}

// What one consumer saw: per epoch, how often each sample id arrived.
struct Seen {
  std::map<uint64_t, std::map<int64_t, int>> counts;
  int64_t repeats = 0;
  int64_t bad_pixels = 0;
  int64_t bad_labels = 0;
  ConsumerStats stats;
  Status status;
};

void Consume(Consumer* c, Seen* seen, int max_delay_us, uint64_t seed) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  Batch batch;
  for (;;) {
    Status st = c->Next(&batch);
    if (!st.ok()) {
      if (st.code() != StatusCode::kEndOfStream) seen->status = st;
      break;
    }
    const auto& img = batch.images();
    size_t sb = img.nbytes / static_cast<size_t>(batch.size());
    const auto* px = static_cast<const uint8_t*>(img.data);
    const auto* labels = static_cast<const int64_t*>(batch.labels().data);
    for (int64_t i = 0; i < batch.size(); ++i) {
      int64_t id = batch.sample_ids()[i];
      seen->counts[batch.info().epoch][id] += 1;
      for (size_t b = 0; b < sb; ++b)
        if (px[i * sb + b] != SyntheticPixel(id, b)) ++seen->bad_pixels;
      if (labels[i] != id % 10) ++seen->bad_labels;
    }
    seen->repeats += batch.info().repeats;
    if (max_delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % max_delay_us));
  }
  seen->stats = c->stats();
}

// Every sample exactly once per epoch, plus exactly the reported fill repeats.
void ExpectExactlyOnce(const Seen& s, int64_t n, int epochs, int b) {
  ASSERT_TRUE(s.status.ok()) << s.status.ToString();
  EXPECT_EQ(s.bad_pixels, 0);
  EXPECT_EQ(s.bad_labels, 0);
  ASSERT_EQ(static_cast<int>(s.counts.size()), epochs);
  int64_t extra_total = 0;
  for (const auto& [epoch, counts] : s.counts) {
    ASSERT_EQ(static_cast<int64_t>(counts.size()), n) << "epoch " << epoch << " missed samples";
    int64_t extra = 0;
    for (const auto& [id, k] : counts) {
      ASSERT_GE(k, 1);
      extra += k - 1;
    }
    extra_total += extra;
  }
  EXPECT_EQ(extra_total, s.repeats) << "repeats must be exactly the reported fill repeats";
  int64_t total_repeats = 0;
  for (int64_t r : s.stats.repeats_per_epoch) total_repeats += r;
  EXPECT_EQ(total_repeats, s.repeats);
  EXPECT_EQ(s.stats.epochs_completed, epochs);
}

Options BaseOptions(int epochs, int producer_batch) {
  Options o;
  o.epochs = epochs;
  o.seed = 42;
  o.producer_batch = producer_batch;
  o.buffer_depth = 2;
  o.ring_slots = 4;
  o.heartbeat_ms = 5000;
  return o;
}

struct ExactlyOnceCase {
  int consumers;
  bool carve_offset;
  bool carve_shuffle;
};

class ExactlyOnceTest : public ::testing::TestWithParam<ExactlyOnceCase> {};

TEST_P(ExactlyOnceTest, EveryConsumerSeesEverySampleOncePerEpoch) {
  const ExactlyOnceCase& tc = GetParam();
  const int64_t n = 997;  // prime: partial last producer batch, uneven carves
  const int epochs = 3;
  const int sizes[] = {16, 7, 32, 5, 13, 32, 1, 24};
  Options o = BaseOptions(epochs, 64);
  auto h = MakeLeader(o, tc.consumers, 32, n);
  h->Start();
  std::vector<std::unique_ptr<Consumer>> consumers;
  std::vector<Seen> seen(tc.consumers);
  for (int i = 0; i < tc.consumers; ++i) {
    Options co = o;
    co.batch_size = sizes[i];
    co.carve_offset = tc.carve_offset;
    co.carve_shuffle = tc.carve_shuffle;
    auto c = Consumer::Attach(h->leader->address(), co, i);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    consumers.push_back(std::move(c).value());
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < tc.consumers; ++i)
    threads.emplace_back(Consume, consumers[i].get(), &seen[i], i % 2 ? 300 : 0, 7 + i);
  for (auto& t : threads) t.join();
  h->thread.join();
  EXPECT_TRUE(h->status.ok()) << h->status.ToString();
  for (int i = 0; i < tc.consumers; ++i) {
    SCOPED_TRACE("consumer " + std::to_string(i));
    ExpectExactlyOnce(seen[i], n, epochs, sizes[i]);
    // At most b-1 repeats per producer batch: 16 producer batches per epoch.
    EXPECT_LE(seen[i].repeats, int64_t(epochs) * 16 * (sizes[i] - 1));
    EXPECT_EQ(consumers[i]->BatchesPerEpoch() * epochs, seen[i].stats.batches);
  }
}

INSTANTIATE_TEST_SUITE_P(Consumers, ExactlyOnceTest,
                         ::testing::Values(ExactlyOnceCase{1, false, false},
                                           ExactlyOnceCase{2, true, false},
                                           ExactlyOnceCase{4, false, true},
                                           ExactlyOnceCase{8, true, true}));

// What one consumer received, batch by batch.
struct Received {
  struct One {
    uint64_t epoch = 0;
    std::vector<int64_t> ids;
    int32_t repeats = 0;
    bool last = false;
  };
  std::vector<One> batches;
  int64_t bad = 0;  // pixels or labels that do not belong to the sample id
  Status status;
  ConsumerStats stats;
};

void ConsumeAll(Consumer* c, Received* r) {
  Batch batch;
  for (;;) {
    Status st = c->Next(&batch);
    if (!st.ok()) {
      if (st.code() != StatusCode::kEndOfStream) r->status = st;
      break;
    }
    Received::One one;
    one.epoch = batch.info().epoch;
    one.repeats = batch.info().repeats;
    one.last = batch.info().last_in_epoch;
    const size_t sb = batch.images().nbytes / static_cast<size_t>(batch.size());
    const auto* px = static_cast<const uint8_t*>(batch.images().data);
    const auto* labels = static_cast<const int64_t*>(batch.labels().data);
    for (int64_t i = 0; i < batch.size(); ++i) {
      const int64_t id = batch.sample_ids()[i];
      one.ids.push_back(id);
      for (size_t k = 0; k < sb; ++k) r->bad += px[i * sb + k] != SyntheticPixel(id, k);
      r->bad += labels[i] != id % 10;
    }
    r->batches.push_back(std::move(one));
  }
  r->stats = c->stats();
}

// Exact batches, like DataLoader(batch_size=b, drop_last) over the stream's sampler: random
// dataset sizes, producer batches and consumer batch sizes from 1 to the largest; every
// batch's ids, pixels and labels are checked against the epoch's permutation cut in b.
TEST(ExactBatchesTest, EveryBatchSizeGivesTheDataLoaderBatches) {
  const uint64_t seed = 0x16a0;
  for (int round = 0; round < 10; ++round) {
    CounterRng rng(HashCombine(seed, uint64_t(round), 2));
    const int64_t n = 1 + int64_t(rng.Below(260));
    const uint32_t max_b = 1 + uint32_t(rng.Below(24));
    const int p = int(max_b * (1 + rng.Below(3)) + rng.Below(max_b));
    const int epochs = 2, consumers = 1 + int(rng.Below(3));
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " round " << round << ": n " << n
                                    << " producer batch " << p << " max_b " << max_b);
    Options o = BaseOptions(epochs, p);
    o.seed = rng.Next();
    auto h = MakeLeader(o, consumers, max_b, n);
    h->Start();
    std::vector<std::unique_ptr<Consumer>> cs;
    std::vector<Options> cos;
    for (int i = 0; i < consumers; ++i) {
      Options co = o;
      co.batch_size = i == 0 ? int(max_b) : 1 + int(rng.Below(max_b));
      const int mode = int(rng.Below(3));
      co.drop_last = mode == 1;
      co.pad_last = mode == 2;
      auto c = Consumer::Attach(h->leader->address(), co, i);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      cs.push_back(std::move(c).value());
      cos.push_back(co);
    }
    std::vector<Received> got(static_cast<size_t>(consumers));
    std::vector<std::thread> threads;
    for (int i = 0; i < consumers; ++i) threads.emplace_back(ConsumeAll, cs[i].get(), &got[i]);
    for (auto& t : threads) t.join();
    h->thread.join();
    ASSERT_TRUE(h->status.ok()) << h->status.ToString();
    producer::StreamPlan plan(n, p, o.seed, o.shuffle);
    for (int i = 0; i < consumers; ++i) {
      const Options& co = cos[i];
      const int64_t b = co.batch_size;
      SCOPED_TRACE(::testing::Message() << "consumer b " << b << " drop_last " << co.drop_last
                                      << " pad_last " << co.pad_last);
      ASSERT_TRUE(got[i].status.ok()) << got[i].status.ToString();
      EXPECT_EQ(got[i].bad, 0);
      std::vector<Received::One> want;  // what a DataLoader over the same order gives
      for (int e = 0; e < epochs; ++e) {
        const auto& order = plan.EpochOrder(uint64_t(e));
        for (int64_t s = 0; s < n; s += b) {
          Received::One one;
          one.epoch = uint64_t(e);
          one.ids.assign(order.begin() + s, order.begin() + std::min(n, s + b));
          const int64_t k = static_cast<int64_t>(one.ids.size());
          if (k < b && co.drop_last) break;
          for (int64_t j = k; co.pad_last && j < b; ++j) one.ids.push_back(one.ids[j % k]);
          one.repeats = static_cast<int32_t>(one.ids.size() - k);
          one.last = s + b >= n;
          want.push_back(std::move(one));
        }
        if (!want.empty() && want.back().epoch == uint64_t(e)) want.back().last = true;
      }
      ASSERT_EQ(got[i].batches.size(), want.size());
      for (size_t j = 0; j < want.size(); ++j) {
        EXPECT_EQ(got[i].batches[j].epoch, want[j].epoch) << "batch " << j;
        EXPECT_EQ(got[i].batches[j].ids, want[j].ids) << "batch " << j;
        EXPECT_EQ(got[i].batches[j].repeats, want[j].repeats) << "batch " << j;
        EXPECT_EQ(got[i].batches[j].last, want[j].last) << "batch " << j;
      }
      EXPECT_EQ(cs[i]->BatchesPerEpoch() * epochs, int64_t(want.size()));
      EXPECT_EQ(got[i].stats.epochs_completed, epochs);
    }
  }
}

// Sharding (mode=shard) like DistributedSampler + DataLoader: W ranks on one node stream
// take disjoint parts of each epoch's order, the same number of batches each; over the
// ranks every sample arrives exactly once per epoch plus the repeats they report.
TEST(ShardTest, RanksTakeDisjointEqualPartsOfEveryEpoch) {
  const uint64_t seed = 0x16a1;
  for (int round = 0; round < 8; ++round) {
    CounterRng rng(HashCombine(seed, uint64_t(round), 3));
    const int world = 2 + int(rng.Below(3));
    const int b = 1 + int(rng.Below(12));
    const int64_t n = 1 + int64_t(rng.Below(300));
    const int p = b * (1 + int(rng.Below(4))) + int(rng.Below(uint64_t(b)));
    const int mode = int(rng.Below(3));
    const int epochs = 2;
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " round " << round << ": n " << n
                                    << " world " << world << " b " << b << " producer batch "
                                    << p << " mode " << mode);
    Options o = BaseOptions(epochs, p);
    o.seed = rng.Next();
    o.batch_size = b;
    auto h = MakeLeader(o, world, uint32_t(b), n);
    h->Start();
    std::vector<std::unique_ptr<Consumer>> cs;
    for (int r = 0; r < world; ++r) {
      Options co = o;
      co.mode = "shard";
      co.rank = r;
      co.world_size = world;
      co.drop_last = mode == 1;
      co.pad_last = mode == 2;
      auto c = Consumer::Attach(h->leader->address(), co, r);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      cs.push_back(std::move(c).value());
    }
    std::vector<Received> got(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) threads.emplace_back(ConsumeAll, cs[r].get(), &got[r]);
    for (auto& t : threads) t.join();
    h->thread.join();
    ASSERT_TRUE(h->status.ok()) << h->status.ToString();
    producer::StreamPlan plan(n, p, o.seed, o.shuffle);
    const int64_t g = int64_t(world) * b, full = n / g, tail = n % g;
    for (int e = 0; e < epochs; ++e) {
      const auto& order = plan.EpochOrder(uint64_t(e));
      std::map<int64_t, int> count;
      int64_t repeats = 0;
      for (int r = 0; r < world; ++r) {
        SCOPED_TRACE(::testing::Message() << "epoch " << e << " rank " << r);
        ASSERT_TRUE(got[r].status.ok()) << got[r].status.ToString();
        EXPECT_EQ(got[r].bad, 0);
        std::vector<const Received::One*> mine;
        for (const auto& one : got[r].batches)
          if (one.epoch == uint64_t(e)) mine.push_back(&one);
        const int64_t want_batches = full + (tail > 0 && mode != 1 ? 1 : 0);
        ASSERT_EQ(int64_t(mine.size()), want_batches) << "every rank takes the same steps";
        EXPECT_EQ(cs[r]->BatchesPerEpoch(), want_batches);
        for (int64_t j = 0; j < full; ++j) {  // rank r's part of global batch j
          std::vector<int64_t> want(order.begin() + j * g + r * b,
                                    order.begin() + j * g + (r + 1) * b);
          EXPECT_EQ(mine[j]->ids, want) << "batch " << j;
        }
        for (const auto* one : mine) {
          for (int64_t id : one->ids) count[id] += 1;
          repeats += one->repeats;
        }
        if (want_batches > full) {
          const int64_t per = (tail + world - 1) / world;
          EXPECT_EQ(int64_t(mine.back()->ids.size()), mode == 2 ? std::max<int64_t>(b, per) : per);
          EXPECT_TRUE(mine.back()->last);
        }
      }
      const int64_t covered = mode == 1 ? full * g : n;
      ASSERT_EQ(int64_t(count.size()), covered) << "epoch " << e << ": union over ranks";
      int64_t extra = 0;
      for (const auto& [id, k] : count) extra += k - 1;
      EXPECT_EQ(extra, repeats) << "epoch " << e << ": duplicates are the reported repeats";
    }
  }
}

TEST(ShardTest, TheServiceRefusesEachTrialsOwnOptions) {
  producer::ProducerConfig cfg;
  cfg.front_door = FrontDoor::kServe;
  cfg.who = "service";
  cfg.options = BaseOptions(1, 16);
  cfg.options.batch_size = 8;
  ASSERT_TRUE(SetOption(&cfg.options, "mode", "shard").ok());
  cfg.socket_name = UniqueSocket("svc-opts");
  auto s = producer::Producer::Create(cfg, std::make_unique<SyntheticSource>(64));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("each consumer's own"), std::string::npos)
      << s.status().message();
}

TEST(ShardTest, ShardNeedsRankAndWorldSizeAndReplicateRefusesThem) {
  Options o = BaseOptions(1000, 16);  // a stream that outlives the refused attaches
  o.batch_size = 8;
  auto h = MakeLeader(o, 0, 8, 64, /*end_when_empty=*/false);
  h->Start();
  Options co = o;
  co.mode = "shard";
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  auto c = Consumer::Attach(h->leader->address(), co, 0);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("RANK and WORLD_SIZE"), std::string::npos)
      << c.status().message();
  co.mode = "replicate";
  co.rank = 0;
  co.world_size = 2;
  c = Consumer::Attach(h->leader->address(), co, 0);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("but mode=replicate"), std::string::npos)
      << c.status().message();
  h->leader->Abort("test over");
}

// ---------------------------------------------------------------------------- resume

// A job for the resume tests: a leader (or a service) and `world` consumers as threads,
// each starting at its own position; every batch becomes a line
// "rank epoch index checksum next_epoch next_batch" (next_*: Consumer::Position() after it,
// what a trainer saves with its checkpoint), written to `fd` as it is consumed (one write:
// a killed job leaves whole lines) and returned per rank.
struct ResumeJob {
  int world = 1;
  bool shard = false, service = false;
  int64_t n = 0;
  int p = 0, b = 0, epochs = 0;
  uint64_t seed = 0;
};

uint64_t BatchChecksum(const Batch& batch) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](const void* data, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const uint8_t*>(data)[i]) * 1099511628211ULL;
  };
  mix(batch.images().data, batch.images().nbytes);
  mix(batch.labels().data, batch.labels().nbytes);
  mix(batch.sample_ids(), static_cast<size_t>(batch.size()) * sizeof(int64_t));
  return h;
}

std::vector<std::vector<std::string>> RunResumeJob(const ResumeJob& job,
                                                   const std::vector<StreamPosition>& start,
                                                   int fd, int ack_fd = -1) {
  Options o = BaseOptions(job.epochs, job.p);
  o.seed = job.seed;
  o.batch_size = job.b;
  Options lo = o;  // the leader starts at the earliest position
  const StreamPosition first = *std::min_element(
      start.begin(), start.end(), [](const StreamPosition& x, const StreamPosition& y) {
        return std::tie(x.epoch, x.batch) < std::tie(y.epoch, y.batch);
      });
  int attached = 0;
  for (const auto& pos : start) attached += pos.epoch < uint64_t(job.epochs) ? 1 : 0;
  lo.start_epoch = static_cast<int>(first.epoch);
  lo.start_batch = static_cast<int64_t>(first.batch);
  if (job.shard) {
    lo.mode = "shard";
    lo.world_size = job.world;
  }
  std::unique_ptr<LeaderHarness> leader;
  std::unique_ptr<producer::Producer> service;
  std::thread service_thread;
  std::string address;
  if (job.service) {  // `batchcast serve`'s configuration
    producer::ProducerConfig cfg;
    cfg.who = "service";
    cfg.options = lo;
    cfg.options.epochs = job.epochs;
    cfg.end_when_empty = false;
    cfg.socket_name = UniqueSocket("resume");
    auto created = producer::Producer::Create(cfg, std::make_unique<SyntheticSource>(job.n));
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    service = std::move(created).value();
    address = service->address();
  } else {
    leader = MakeLeader(lo, attached, uint32_t(job.b), job.n);
    address = leader->leader->address();
  }
  std::vector<std::unique_ptr<Consumer>> cs(static_cast<size_t>(job.world));
  for (int r = 0; r < job.world; ++r) {
    if (start[r].epoch >= uint64_t(job.epochs)) continue;  // this rank had finished
    Options co = o;
    co.start_epoch = static_cast<int>(start[r].epoch);
    co.start_batch = static_cast<int64_t>(start[r].batch);
    if (job.shard) {
      co.mode = "shard";
      co.rank = r;
      co.world_size = job.world;
    }
    auto c = Consumer::Attach(address, co, r);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (!c.ok()) return {};
    cs[r] = std::move(c).value();
  }
  if (service) service_thread = std::thread([&] { EXPECT_TRUE(service->Run().ok()); });
  if (leader) leader->Start();
  std::vector<std::vector<std::string>> lines(static_cast<size_t>(job.world));
  std::vector<std::thread> threads;
  for (int r = 0; r < job.world; ++r)
    threads.emplace_back([&, r] {
      if (!cs[r]) return;
      Batch batch;
      while (cs[r]->Next(&batch).ok()) {
        const StreamPosition next = cs[r]->Position();
        std::string line = fmt::format("{} {} {} {:x} {} {}\n", r, batch.info().epoch,
                                       batch.info().index, BatchChecksum(batch), next.epoch,
                                       next.batch);
        if (fd >= 0) {
          EXPECT_EQ(write(fd, line.data(), line.size()), ssize_t(line.size()));
        }
        char ack = 0;  // the test reads each line before the job goes on: the kill is mid-run
        if (ack_fd >= 0) {
          EXPECT_GE(read(ack_fd, &ack, 1), 0);
        }
        lines[r].push_back(line);
      }
      EXPECT_TRUE(cs[r]->status().ok()) << cs[r]->status().ToString();
    });
  for (auto& t : threads) t.join();
  if (service) {
    service->Stop("test over");
    service_thread.join();
  }
  return lines;
}

// SIGKILLs a job at a random batch, resumes every rank from the last position it saved and
// checks, per rank, that the resumed job delivers byte for byte the batches an
// uninterrupted job delivers from there.
void KillAndResume(const ResumeJob& job, uint64_t seed) {
  signal(SIGPIPE, SIG_IGN);  // a child that dies early must fail the test, not kill it
  CounterRng rng(seed);
  const std::vector<StreamPosition> zero(static_cast<size_t>(job.world));
  const auto reference = RunResumeJob(job, zero, -1);
  size_t total = 0;
  for (const auto& r : reference) total += r.size();
  ASSERT_GT(total, 2u);
  const size_t kill_after = 1 + rng.Below(total - 2);
  int fds[2], acks[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(pipe(acks), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    close(acks[1]);
    RunResumeJob(job, zero, fds[1], acks[0]);
    _exit(0);
  }
  close(fds[1]);
  close(acks[0]);
  FILE* in = fdopen(fds[0], "r");
  std::vector<StreamPosition> saved(static_cast<size_t>(job.world));
  std::vector<size_t> done(static_cast<size_t>(job.world), 0);
  char buf[256];
  size_t read_lines = 0;
  while (std::fgets(buf, sizeof(buf), in) != nullptr) {
    if (++read_lines == kill_after) {
      kill(child, SIGKILL);  // the whole job, mid-stream
      close(acks[1]);
      acks[1] = -1;
    } else if (acks[1] >= 0) {
      ASSERT_EQ(write(acks[1], "a", 1), 1);
    }
    int r = 0;
    unsigned long long e = 0, i = 0, ne = 0, nb = 0;
    char sum[32];
    ASSERT_EQ(std::sscanf(buf, "%d %llu %llu %31s %llu %llu", &r, &e, &i, sum, &ne, &nb), 6);
    ASSERT_EQ(std::string(buf), reference[r][done[r]]) << "the killed run differs before the kill";
    done[r] += 1;
    saved[r] = {ne, nb};
  }
  std::fclose(in);
  if (acks[1] >= 0) close(acks[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  SCOPED_TRACE(::testing::Message() << "seed " << seed << ": killed after " << read_lines
                                  << " of " << total << " batches");
  const auto resumed = RunResumeJob(job, saved, -1);
  for (int r = 0; r < job.world; ++r) {
    const std::vector<std::string> want(reference[r].begin() + done[r], reference[r].end());
    EXPECT_EQ(resumed[r], want) << "rank " << r << " resumed at epoch " << saved[r].epoch
                                << " batch " << saved[r].batch;
  }
}

TEST(ResumeTest, KilledReplicateJobResumesByteForByte) {
  KillAndResume({1, false, false, 203, 24, 10, 3, 77}, 0x16a2);
}

TEST(ResumeTest, KilledShardJobResumesByteForByte) {
  KillAndResume({2, true, false, 157, 20, 8, 3, 78}, 0x16a3);
}

TEST(ResumeTest, KilledJobResumesByteForByteFromAService) {
  KillAndResume({1, false, true, 181, 16, 12, 3, 79}, 0x16a4);
}

// A native stream that stays up for its consumers (end_when_empty false, as a service)
// replays a resume point it has passed (Replay::kAny): the rest of the consumer's epoch,
// spread between the stream's positions, then the stream's next epoch (epochs are counted,
// not numbered: Admission::SettleResumers), each sample once.
TEST(ResumeTest, AStreamPastThePositionReplaysItToTheResumer) {
  Options o = BaseOptions(4, 16);
  o.batch_size = 8;
  o.start_epoch = 2;
  auto h = MakeLeader(o, 1, 8, 64, /*end_when_empty=*/false);
  Options co = o;
  co.start_epoch = 1;
  co.start_batch = 3;
  co.epochs = 3;  // epochs 1 and 2 of its run
  auto c = Consumer::Attach(h->leader->address(), co, 0);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  h->Start();
  Seen seen;
  Consume(c->get(), &seen, 0, 1);
  h->thread.join();
  ASSERT_TRUE(seen.status.ok()) << seen.status.ToString();
  EXPECT_EQ(seen.bad_pixels + seen.bad_labels, 0);
  ASSERT_EQ(seen.counts.size(), 2u);  // epoch 1 from batch 3, then the stream's next: 3
  producer::StreamPlan plan(64, 16, o.seed, true);
  const std::vector<int64_t> order1 = plan.EpochOrder(1);
  EXPECT_EQ(seen.counts[1].size(), 64u - 24u);
  for (size_t i = 24; i < order1.size(); ++i) EXPECT_EQ(seen.counts[1][order1[i]], 1) << i;
  EXPECT_EQ(seen.counts[3].size(), 64u);
  EXPECT_EQ(h->leader->stats().resume_replays, 1);
}

// A producer that cannot make a passed position again (batches from an iterable) refuses a
// resume point behind its stream, naming the fix.
TEST(ResumeTest, AStreamThatCannotReplayRefusesAPassedPosition) {
  producer::ExternalFeedConfig feed;
  feed.layout.channels = 3;
  feed.layout.height = feed.layout.width = 8;
  feed.producer_batch = 16;
  feed.epoch_samples = 64;
  feed.max_consumer_batch = 8;
  producer::ProducerConfig cfg;
  cfg.who = "producer";
  cfg.options = BaseOptions(4, 16);
  cfg.options.start_epoch = 2;
  cfg.expected_consumers = 1;
  cfg.socket_name = UniqueSocket("resume-ext");
  producer::StreamPlan plan(64, 16, 1, true);
  auto batches = [&plan](uint64_t e) {
    std::vector<std::vector<int64_t>> out;
    for (int64_t k = 0; k < 4; ++k) out.emplace_back(plan.Batch(e, k).begin(), plan.Batch(e, k).end());
    return out;
  };
  auto p = producer::Producer::Create(
      cfg, producer::MakeExternalFeed(feed, std::make_unique<ListMaker>(batches, SyntheticWrite(192))),
      producer::MakeLocalDistribution());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Options co = cfg.options;
  co.batch_size = 8;
  co.start_epoch = 1;
  co.start_batch = 3;
  auto c = Consumer::Attach((*p)->address(), co, 0);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::thread t([&] { (*p)->Run().IgnoreError(); });
  Batch batch;
  Status st = (*c)->Next(&batch);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("resumes at epoch 1 batch 3"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("start_epoch / start_batch"), std::string::npos) << st.message();
  c->reset();
  t.join();
}

TEST(ExactBatchesTest, DropLastAndPadLastExcludeEachOther) {
  Options o;
  o.drop_last = o.pad_last = true;
  Status st = ValidateOptions(o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'drop_last' and 'pad_last'"), std::string::npos) << st.message();
}

TEST(ExactBatchesTest, DropLastIsRefusedWithPerProducerBatchCarving) {
  Options o = BaseOptions(1, 16);
  o.batch_size = 8;
  auto h = MakeLeader(o, 0, 8, 64, /*end_when_empty=*/false);
  h->Start();
  Options co = o;
  co.drop_last = true;
  co.carve_shuffle = true;
  auto c = Consumer::Attach(h->leader->address(), co, 0);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("'drop_last' needs exact carving"), std::string::npos)
      << c.status().message();
  h->leader->Abort("test over");
}

// The one telemetry file-naming rule (telemetry/run_outputs.h), through which every front
// door's ProcessTelemetry names its files: a plain path gets the process's tag.
TEST(ProcessTelemetryTest, EveryProcessWritesItsOwnTaggedFiles) {
  EXPECT_EQ(telemetry::TaggedPath("run.h5", "rank3"), "run.rank3.h5");
  EXPECT_EQ(telemetry::TaggedPath("out/run.trace.json", "node0-leader"),
            "out/run.node0-leader.trace.json");
  EXPECT_EQ(telemetry::TaggedPath("out.d/run", "rank1"), "out.d/run.rank1");
  EXPECT_EQ(telemetry::TaggedPath("", "rank1"), "");
  EXPECT_EQ(telemetry::TaggedPath("run.json", ""), "run.json");
  Options off;  // telemetry off: no collector, nothing to finish
  auto t = producer::ProcessTelemetry::Start(off, telemetry::ProcessKind::kLeader, 0, 0,
                                             telemetry::Role::kLeader, "x");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t.value(), nullptr);
}

// A C++ trainer's telemetry (AttachFromEnvironment) is written at Detach(), which returns a
// failure to write it: the caller sees it, not only a log line (issue 32).
TEST(ProcessTelemetryTest, DetachReturnsAFailureToWriteTheFiles) {
  Options o = BaseOptions(1, 16);
  o.batch_size = 8;
  const std::string dir = ::testing::TempDir() + "/bc_task_telemetry_" + std::to_string(getpid());
  ASSERT_EQ(std::system(("rm -rf " + dir).c_str()), 0);
  Options mine = o;
  mine.telemetry = "hdf5=" + dir + "/t.h5";
  auto t = producer::ProcessTelemetry::Start(mine, telemetry::ProcessKind::kTrainer, 0, 0,
                                             telemetry::Role::kConsumer, "rank0");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_NE(t.value(), nullptr);
  auto h = MakeLeader(o, 1, 8, 16);
  h->Start();
  auto c = Consumer::Attach(h->leader->address(), o, 0);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  OwnTelemetry(**c, std::move(t).value());
  Batch b;
  while ((*c)->Next(&b).ok()) b.Release();
  // The directory checked at the start is gone, and a file stands in its place.
  ASSERT_EQ(std::system(("rm -rf " + dir + " && touch " + dir).c_str()), 0);
  Status st = (*c)->Detach();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(dir + "/t.rank0.h5"), std::string::npos) << st.ToString();
  EXPECT_TRUE((*c)->Detach().ok()) << "written (or failed) once";
  std::remove(dir.c_str());
}

TEST(ConnectTimeoutTest, NoLeaderFailsAfterTheTimeoutNamingWhatItWaitedFor) {
  Options o = BaseOptions(1, 16);
  o.batch_size = 8;
  o.connect_timeout = 150;
  const std::string name = UniqueSocket("nobody");
  auto c = Consumer::Attach(name, o, 0);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  const std::string& m = c.status().message();
  EXPECT_NE(m.find("connect_timeout=150ms"), std::string::npos) << m;
  EXPECT_NE(m.find("for a Batchcast leader at"), std::string::npos) << m;
  EXPECT_NE(m.find(name), std::string::npos) << m;
}

TEST(ConnectTimeoutTest, ConsumerStartedBeforeItsLeaderAttachesWhenItListens) {
  Options o = BaseOptions(1, 16);
  o.batch_size = 8;
  o.connect_timeout = 120000;
  const std::string name = UniqueSocket("early");
  Result<std::unique_ptr<Consumer>> c(Status(StatusCode::kInternal, "not attached"));
  std::thread early([&] { c = Consumer::Attach(name, o, 0); });  // no leader yet
  auto h = MakeLeader(o, 1, 8, 64, true, nullptr, name);
  h->Start();
  early.join();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  int64_t batches = 0;
  for ([[maybe_unused]] Batch& b : **c) ++batches;
  EXPECT_EQ(batches, 8);
}

// Which samples of each producer batch a SkippingSource drops, drawn from a seed: scattered
// samples, runs of 3 to 5 entirely bad producer batches, an epoch's last 1 to 3 batches
// entirely bad, or all of these. Every epoch keeps at least its first batch good.
SkippingSource::BadFn RandomSkipPattern(uint64_t seed, int epochs, int64_t batches) {
  std::mt19937_64 rng(seed);
  const int kind = static_cast<int>(seed % 4);
  auto whole = std::make_shared<std::set<std::pair<uint64_t, int64_t>>>();
  for (int e = 0; e < epochs; ++e) {
    if (kind == 1 || kind == 3) {
      const int64_t start = 1 + static_cast<int64_t>(rng() % uint64_t(batches - 5));
      for (int64_t k = start; k < start + 3 + int64_t(rng() % 3); ++k) whole->insert({e, k});
    }
    if (kind == 2 || kind == 3)
      for (int64_t k = batches - 1 - int64_t(rng() % 3); k < batches; ++k) whole->insert({e, k});
  }
  const double p = kind == 1 || kind == 2 ? 0.0 : 0.3;
  return [whole, p, seed](uint64_t e, int64_t fill, size_t pos) {
    if (whole->count({e, fill})) return true;
    return fill > 0 && double(Mix64(HashCombine(seed, e * 1000003 + uint64_t(fill) * 1009 + pos)) %
                              1000) < p * 1000;
  };
}

// A bad sample costs only itself, in any pattern: every consumer gets every good sample of
// every epoch exactly once (plus the fill repeats it is told of), none of the bad ones,
// every epoch completes and the stream ends. Three or more entirely bad producer batches
// in a row, and an epoch whose last producer batches are entirely bad, included.
TEST(SkipPolicyTest, GoodSamplesExactlyOnceUnderRandomSkipPatterns) {
  const int64_t n = 150, producer_batch = 10, batches = 15;
  const int epochs = 3;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE("skip pattern seed " + std::to_string(seed));
    Options o = BaseOptions(epochs, producer_batch);
    o.batch_size = 8;
    auto source = std::make_unique<SkippingSource>(n, RandomSkipPattern(seed, epochs, batches));
    SkippingSource* src = source.get();
    auto h = MakeLeader(o, 2, 8, n, true, std::move(source));
    h->Start();
    const int sizes[] = {4, 7};
    std::vector<std::unique_ptr<Consumer>> consumers;
    for (int i = 0; i < 2; ++i) {
      Options co = o;
      co.batch_size = sizes[i];
      co.carve_offset = i == 1;
      auto c = Consumer::Attach(h->leader->address(), co, i);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      consumers.push_back(std::move(c).value());
    }
    std::vector<Seen> seen(2);
    std::thread other(Consume, consumers[1].get(), &seen[1], 0, 3);
    Consume(consumers[0].get(), &seen[0], 0, 2);
    other.join();
    h->thread.join();
    ASSERT_TRUE(h->status.ok()) << h->status.ToString();
    int64_t skipped_total = 0;
    for (const auto& [e, ids] : src->skipped()) skipped_total += int64_t(ids.size());
    EXPECT_EQ(h->leader->stats().samples_skipped, skipped_total);
    for (int i = 0; i < 2; ++i) {
      SCOPED_TRACE("consumer " + std::to_string(i));
      const Seen& s = seen[i];
      ASSERT_TRUE(s.status.ok()) << s.status.ToString();
      EXPECT_EQ(s.bad_pixels, 0);
      EXPECT_EQ(s.bad_labels, 0);
      EXPECT_EQ(s.stats.epochs_completed, epochs);
      ASSERT_EQ(int(s.counts.size()), epochs);
      int64_t extra = 0;
      for (const auto& [e, counts] : s.counts) {
        const auto it = src->skipped().find(e);
        const std::set<int64_t> none;
        const std::set<int64_t>& bad = it == src->skipped().end() ? none : it->second;
        EXPECT_EQ(int64_t(counts.size()) + int64_t(bad.size()), n) << "epoch " << e;
        for (const auto& [id, k] : counts) {
          EXPECT_EQ(bad.count(id), 0u) << "skipped sample " << id << " served in epoch " << e;
          extra += k - 1;
        }
      }
      EXPECT_EQ(extra, s.repeats) << "repeats must be exactly the reported fill repeats";
    }
  }
}

// An epoch with no good sample at all ends the stream with an error naming the epoch, for
// the leader and every consumer, instead of a wait.
TEST(SkipPolicyTest, AnEpochWithoutAGoodSampleIsAnErrorNotAWait) {
  Options o = BaseOptions(3, 10);
  o.batch_size = 8;
  auto source = std::make_unique<SkippingSource>(
      60, [](uint64_t e, int64_t, size_t) { return e == 1; });
  auto h = MakeLeader(o, 1, 8, 60, true, std::move(source));
  h->Start();
  Options co = o;
  co.batch_size = 8;
  auto c = Consumer::Attach(h->leader->address(), co, 0);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Seen seen;
  Consume(c->get(), &seen, 0, 1);
  h->thread.join();
  ASSERT_FALSE(h->status.ok());
  EXPECT_NE(h->status.message().find("epoch 1 has no good sample"), std::string::npos)
      << h->status.message();
  EXPECT_NE(seen.status.message().find("epoch 1 has no good sample"), std::string::npos)
      << seen.status.ToString();
  EXPECT_EQ(seen.counts.size(), 1u);  // epoch 0 was delivered whole
  EXPECT_EQ(seen.counts[0].size(), 60u);
}

TEST(DataPlaneTest, SameOptionsGiveTheSameStream) {
  auto run = [](std::vector<int64_t>* ids) {
    Options o = BaseOptions(2, 40);
    o.batch_size = 10;
    o.carve_offset = o.carve_shuffle = true;
    auto h = MakeLeader(o, 1, 10, 333);
    h->Start();
    auto c = Consumer::Attach(h->leader->address(), o, 3);
    ASSERT_TRUE(c.ok());
    for (Batch& b : **c)
      for (int64_t i = 0; i < b.size(); ++i) ids->push_back(b.sample_ids()[i]);
  };
  std::vector<int64_t> a, b;
  run(&a);
  run(&b);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
}

TEST(DataPlaneTest, SlowConsumerBoundsTheLeader) {
  // One consumer 10x slower: the leader may run ahead of it by at most the ring size,
  // and the fast consumer is paced to it (one stream, bounded memory).
  Options o = BaseOptions(1, 16);
  o.batch_size = 16;
  o.ring_slots = 4;
  auto h = MakeLeader(o, 2, 16, 16 * 40);
  h->Start();
  auto fast = Consumer::Attach(h->leader->address(), o, 0);
  auto slow = Consumer::Attach(h->leader->address(), o, 1);
  ASSERT_TRUE(fast.ok() && slow.ok());
  std::atomic<uint64_t> max_lead{0};
  std::thread ft([&] {
    for ([[maybe_unused]] Batch& b : **fast) std::this_thread::sleep_for(std::chrono::microseconds(200));
  });
  const shm::StreamHeader* hdr = h->leader->ring().header();
  for (Batch& b : **slow) {
    uint64_t lead = hdr->published.load() - b.info().producer_seq;
    uint64_t cur = max_lead.load();
    if (lead > cur) max_lead.store(lead);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ft.join();
  h->thread.join();
  EXPECT_GE(max_lead.load(), 2u) << "the leader should prefetch ahead of the slow consumer";
  EXPECT_LE(max_lead.load(), 4u) << "the leader must never be more than ring_slots ahead";
  EXPECT_EQ((*fast)->stats().batches, 40);
  EXPECT_EQ((*slow)->stats().batches, 40);
}

TEST(DataPlaneTest, BufferDepthIsEnforcedWithoutDeadlock) {
  Options o = BaseOptions(1, 8);
  o.batch_size = 4;
  o.buffer_depth = 2;
  auto h = MakeLeader(o, 1, 4, 64);
  h->Start();
  auto c = Consumer::Attach(h->leader->address(), o, 0);
  ASSERT_TRUE(c.ok());
  Batch b1, b2, b3;
  ASSERT_TRUE((*c)->Next(&b1).ok());
  ASSERT_TRUE((*c)->Next(&b2).ok());
  Status st = (*c)->Next(&b3);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("buffer_depth=2"), std::string::npos);
  b1.Release();
  EXPECT_TRUE((*c)->Next(&b3).ok());
  b2.Release();
  b3.Release();
  int rest = 0;
  for ([[maybe_unused]] Batch& b : **c) ++rest;
  EXPECT_EQ(rest, 16 - 3);
}

// Misuse of the C++ objects (issue 34): Next() after Detach() is an error naming Detach()
// (it ended the range silently, as the end of the stream), a batch kept past the detach stays
// readable, Detach() twice is a no-op, and a released Batch views nothing.
TEST(DataPlaneTest, NextAfterDetachIsAnErrorAndHeldBatchesStayValid) {
  Options o = BaseOptions(1, 8);
  o.batch_size = 4;
  auto h = MakeLeader(o, 1, 4, 64);
  h->Start();
  auto c = Consumer::Attach(h->leader->address(), o, 0);
  ASSERT_TRUE(c.ok());
  Batch kept;
  ASSERT_TRUE((*c)->Next(&kept).ok());
  ASSERT_TRUE((*c)->Detach().ok());
  Batch b;
  Status st = (*c)->Next(&b);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("Next() after Detach()"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("Attach a new Consumer"), std::string::npos) << st.message();
  EXPECT_FALSE(b.valid());
  EXPECT_TRUE((*c)->Detach().ok());  // again: nothing to do
  const auto* px = static_cast<const uint8_t*>(kept.images().data);
  const size_t sb = kept.images().nbytes / size_t(kept.size());
  for (int64_t i = 0; i < kept.size(); ++i)
    for (size_t k = 0; k < sb; ++k)
      ASSERT_EQ(px[size_t(i) * sb + k], SyntheticPixel(kept.sample_ids()[i], k));
  kept.Release();
  EXPECT_FALSE(kept.valid());
  EXPECT_EQ(kept.images().data, nullptr);
  EXPECT_EQ(kept.labels().data, nullptr);
  EXPECT_EQ(kept.sample_ids(), nullptr);
  EXPECT_EQ(kept.tensor("labels").data, nullptr);
  EXPECT_EQ(kept.KeepAlive(), nullptr);
  kept.Release();  // twice: nothing to do
  h->leader->Abort("test over");
}

// A consumer asked for a batch after its stream ended (a `for epoch in range(E)` loop with E
// above the stream's epochs) gets an error naming both epoch counts, not a second silent end.
TEST(DataPlaneTest, NextPastTheEndOfTheStreamNamesBothEpochCounts) {
  for (const int epochs : {kEpochsUntilStreamEnds, 1}) {
    Options o = BaseOptions(2, 8);
    o.batch_size = 8;
    auto h = MakeLeader(o, 1, 8, 32);
    h->Start();
    Options co = o;
    co.epochs = epochs;
    auto c = Consumer::Attach(h->leader->address(), co, 0);
    ASSERT_TRUE(c.ok());
    Batch b;
    int batches = 0;
    Status st;
    while ((st = (*c)->Next(&b)).ok()) ++batches;
    ASSERT_EQ(st.code(), StatusCode::kEndOfStream) << st.ToString();
    const int done = epochs == 1 ? 1 : 2;
    EXPECT_EQ(batches, 4 * done);
    for (int again = 0; again < 2; ++again) {
      st = (*c)->Next(&b);
      EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
      EXPECT_NE(st.message().find("after the end of this consumer's stream"), std::string::npos)
          << st.message();
      if (epochs == 1) {  // its own epochs are over: names them and the stream's
        EXPECT_NE(st.message().find("completed the 1 epoch it asked for"), std::string::npos)
            << st.message();
        EXPECT_NE(st.message().find(" has 2 epochs)"), std::string::npos) << st.message();
      } else {  // following the stream: names both counts and the epoch asked for
        EXPECT_NE(st.message().find("completed 2 epochs and the leader's stream at"),
                  std::string::npos) << st.message();
        EXPECT_NE(st.message().find("has 2 epochs: there is no further epoch"), std::string::npos)
            << st.message();
      }
    }
    c->reset();
    h->thread.join();
  }
}

TEST(DataPlaneTest, KeepAliveHoldsTheSlotAfterTheBatchIsGone) {
  Options o = BaseOptions(1, 8);
  o.batch_size = 8;
  auto h = MakeLeader(o, 1, 8, 64);
  h->Start();
  auto c = Consumer::Attach(h->leader->address(), o, 0);
  ASSERT_TRUE(c.ok());
  Batch b;
  ASSERT_TRUE((*c)->Next(&b).ok());
  uint64_t seq = b.info().producer_seq;
  std::shared_ptr<void> keep = b.KeepAlive();
  b.Release();
  const shm::SegmentView& view = h->leader->ring().view();
  const uint32_t index = shm::PositionSlot(view.position(seq).load());
  const shm::SlotInfo& slot = view.slot(index);
  const std::atomic<uint64_t>& pending = view.pending(index);
  EXPECT_NE(pending.load(), 0u) << "slot released while a view still references it";
  EXPECT_EQ(slot.seq.load(), seq);
  keep.reset();
  // Released: the slot is free, or the leader has already refilled it with a later batch.
  EXPECT_TRUE(pending.load() == 0u || slot.seq.load() != seq)
      << "slot not released after the last reference died";
  for (Batch& x : **c) (void)x;
}

TEST(DataPlaneTest, EarlyDetachLetsTheOthersGoOn) {
  Options o = BaseOptions(3, 32);
  o.batch_size = 16;
  auto h = MakeLeader(o, 2, 16, 200);
  h->Start();
  Options short_o = o;
  short_o.epochs = 1;
  auto a = Consumer::Attach(h->leader->address(), o, 0);
  auto b = Consumer::Attach(h->leader->address(), short_o, 1);
  ASSERT_TRUE(a.ok() && b.ok());
  Seen sa, sb;
  std::thread tb([&] { Consume(b->get(), &sb, 0, 1); });
  Consume(a->get(), &sa, 0, 2);
  tb.join();
  h->thread.join();
  ExpectExactlyOnce(sa, 200, 3, 16);
  ExpectExactlyOnce(sb, 200, 1, 16);
}

TEST(DataPlaneTest, LeaderAbortFailsConsumersWithTheReason) {
  Options o = BaseOptions(50, 8);
  o.batch_size = 8;
  auto h = MakeLeader(o, 1, 8, 1000);
  h->Start();
  auto c = Consumer::Attach(h->leader->address(), o, 0);
  ASSERT_TRUE(c.ok());
  Batch b;
  ASSERT_TRUE((*c)->Next(&b).ok());
  b.Release();
  h->leader->Abort("disk on fire");
  Status st;
  while ((st = (*c)->Next(&b)).ok()) b.Release();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("disk on fire"), std::string::npos) << st.message();
}

TEST(DataPlaneTest, RefusesBadRequestsWithClearMessages) {
  Options o = BaseOptions(1, 16);
  o.batch_size = 8;
  auto h = MakeLeader(o, 0, 8, 64, /*end_when_empty=*/false);
  Options big = o;
  big.batch_size = 9;
  auto c = Consumer::Attach(h->leader->address(), big, 0);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("batch size 9"), std::string::npos) << c.status().message();
  Options deep = o;
  deep.buffer_depth = 4;  // ring has 4 slots: depth must stay below
  auto d = Consumer::Attach(h->leader->address(), deep, 0);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("ring_slots"), std::string::npos);
  Options once = o;
  once.connect_timeout = 0;  // one try (the wait is ConnectTimeoutTest's)
  auto none = Consumer::Attach("batchcast-test-nobody-listens", once, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  h->leader->Abort("test over");
}

// No Batchcast segment is ever visible in /dev/shm (memfd + descriptor passing).
int DevShmEntries() {
  int n = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).find("batchcast") != std::string::npos) ++n;
    closedir(d);
  }
  return n;
}

// Counts open file descriptors of this process that refer to a batchcast memfd.
int MemfdsOpen() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      char target[256] = {0};
      std::string p = std::string("/proc/self/fd/") + e->d_name;
      ssize_t len = readlink(p.c_str(), target, sizeof(target) - 1);
      if (len > 0 && std::string(target).find("memfd:batchcast") != std::string::npos) ++n;
    }
    closedir(d);
  }
  return n;
}

TEST(DataPlaneTest, KilledConsumerIsReapedAndOthersContinue) {
  Options o = BaseOptions(4, 16);
  o.batch_size = 8;
  o.ring_slots = 3;
  // Fork while this process has one thread (the leader's control thread starts in Create): a
  // child of a multi-threaded process may find a lock held forever (and TSan refuses it). The
  // child learns the leader's address through a pipe.
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t child = fork();
  if (child == 0) {
    // Child: attach, take two batches, then hang holding them until killed.
    close(pipefd[1]);
    char address[256] = {0};
    if (read(pipefd[0], address, sizeof(address) - 1) <= 0) _exit(2);
    auto c = Consumer::Attach(address, o, 1);
    if (!c.ok()) _exit(3);
    Batch b1, b2;
    if (!(*c)->Next(&b1).ok() || !(*c)->Next(&b2).ok()) _exit(4);
    for (;;) pause();
  }
  close(pipefd[0]);
  auto h = MakeLeader(o, 2, 8, 160, /*end_when_empty=*/true);
  std::atomic<int> lost{0};
  h->leader->ring().SetLossHandler([&](const shm::MemberInfo&, shm::LossKind k) {
    if (k == shm::LossKind::kDisconnected) lost++;
  });
  const std::string address = h->leader->address();
  ASSERT_EQ(write(pipefd[1], address.data(), address.size()),
            static_cast<ssize_t>(address.size()));
  close(pipefd[1]);
  h->Start();
  auto a = Consumer::Attach(h->leader->address(), o, 0);
  ASSERT_TRUE(a.ok());
  Seen sa;
  Batch first;
  ASSERT_TRUE((*a)->Next(&first).ok());
  first.Release();
  // The child holds slots; the leader cannot lap it until it is gone.
  kill(child, SIGKILL);
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  ASSERT_TRUE(WIFSIGNALED(wstatus));
  Consume(a->get(), &sa, 0, 3);
  h->thread.join();
  EXPECT_TRUE(sa.status.ok()) << sa.status.ToString();
  EXPECT_EQ(sa.stats.epochs_completed, 4);
  EXPECT_EQ(lost.load(), 1);
  EXPECT_EQ(DevShmEntries(), 0);
}

TEST(DataPlaneTest, KilledLeaderFailsConsumersPromptly) {
  std::string name = UniqueSocket("kl");
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t child = fork();
  if (child == 0) {
    close(pipefd[0]);
    Options o = BaseOptions(1000, 8);
    o.batch_size = 8;
    producer::ProducerConfig cfg;
    cfg.options = o;
    cfg.expected_consumers = 1;
    cfg.socket_name = name;
    cfg.job = "test";
    auto l = producer::Producer::Create(cfg, std::make_unique<SyntheticSource>(10000));
    if (!l.ok()) _exit(3);
    char ok = 1;
    if (write(pipefd[1], &ok, 1) != 1) _exit(4);
    (void)(*l)->Run();
    _exit(0);
  }
  close(pipefd[1]);
  char ready = 0;
  ASSERT_EQ(read(pipefd[0], &ready, 1), 1);
  Options o = BaseOptions(1000, 8);
  o.batch_size = 8;
  o.heartbeat_ms = 400;
  auto c = Consumer::Attach(name, o, 0);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Batch b;
  ASSERT_TRUE((*c)->Next(&b).ok());
  b.Release();
  EXPECT_EQ(MemfdsOpen(), 0) << "the consumer must not keep the memfd open, only its mapping";
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  Status st;
  while ((st = (*c)->Next(&b)).ok()) b.Release();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("is gone"), std::string::npos) << st.message();
  EXPECT_EQ(DevShmEntries(), 0);
}


// Late join through producer::Producer (producer/admission.h), driven deterministically: the
// source attaches the joiner while the leader fills position `join_at`, so the joiner is
// settled before position join_at + 1 (no sleeps, no timing).
class JoinDuringFill : public SyntheticSource {
 public:
  JoinDuringFill(int64_t n, int join_at, std::function<void()> join)
      : SyntheticSource(n), join_at_(join_at), join_(std::move(join)) {}
  Status Fill(const pipeline::BatchRequest& req, pipeline::BatchResult* result) override {
    if (fills_seen_++ == join_at_) join_();
    return SyntheticSource::Fill(req, result);
  }

 private:
  int join_at_;
  int fills_seen_ = 0;
  std::function<void()> join_;
};

struct LateJoinRun {
  Seen a, b;
  producer::ProducerStats stats;
};

// A (batch 16) attaches first; B (batch 8, `b_epochs` epochs) attaches during position
// join_at. Epochs of n samples in producer batches of 16, 4 ring slots.
// external: the producer's batches come from an iterable (the Python Producer's feed), and B
// attaches while position join_at is written.
void RunLateJoin(int64_t n, int epochs, int join_at, int b_epochs, LateJoinRun* out,
                 bool external = false, int catch_ups = -1) {
  Options o = BaseOptions(epochs, 16);
  o.batch_size = 16;
  if (catch_ups >= 0) o.late_join_catch_ups = catch_ups;
  producer::ProducerConfig cfg;
  cfg.options = o;
  cfg.expected_consumers = 1;
  cfg.max_consumer_batch = 16;
  cfg.socket_name = UniqueSocket("late");
  cfg.job = "test";
  cfg.join_timeout_ms = 30000;
  std::unique_ptr<Consumer> b;
  std::promise<void> b_attached;
  Options ob = o;
  ob.batch_size = 8;
  ob.epochs = b_epochs;
  auto join = [&] {
    auto c = Consumer::Attach(cfg.socket_name, ob, 2);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    b = std::move(c).value();
    b_attached.set_value();
  };
  Result<std::unique_ptr<producer::Producer>> leader = InternalError("unset");
  producer::StreamPlan plan(n, 16, o.seed, true);
  int written = 0;
  if (external) {
    producer::ExternalFeedConfig feed;
    feed.layout.channels = 3;
    feed.layout.height = feed.layout.width = 8;
    feed.producer_batch = 16;
    feed.epoch_samples = n;
    feed.max_consumer_batch = 16;
    auto batches = [&plan](uint64_t e) {
      std::vector<std::vector<int64_t>> out;
      for (int64_t k = 0; k < plan.BatchesPerEpoch(); ++k)
        out.emplace_back(plan.Batch(e, k).begin(), plan.Batch(e, k).end());
      return out;
    };
    auto write = [&, pixels = SyntheticWrite(192)](const producer::ExternalSlot& slot, int64_t pos,
                                                   int64_t id) {
      if (pos == 0 && written++ == join_at) join();
      pixels(slot, pos, id);
    };
    leader = producer::Producer::Create(
        cfg, producer::MakeExternalFeed(feed, std::make_unique<ListMaker>(batches, write)),
        producer::MakeLocalDistribution());
  } else {
    leader = producer::Producer::Create(cfg, std::make_unique<JoinDuringFill>(n, join_at, join));
  }
  ASSERT_TRUE(leader.ok()) << leader.status().ToString();
  Status run;
  std::thread t([&] { run = (*leader)->Run(); });
  auto a = Consumer::Attach(cfg.socket_name, o, 1);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  std::thread ta([&] { Consume(a->get(), &out->a, 0, 1); });
  b_attached.get_future().wait();
  Consume(b.get(), &out->b, 0, 2);
  ta.join();
  t.join();
  ASSERT_TRUE(run.ok()) << run.ToString();
  out->stats = (*leader)->stats();
}

// A late-join case of RunLateJoin (2 stream epochs) and what it must give.
struct LateJoinCase {
  int64_t n;               // samples: n / 16 producer batches per epoch
  int join_at;             // B attaches while this position is filled
  int b_epochs;            // epochs B asks for
  uint64_t b_first_epoch;  // the first epoch B receives
  int64_t replayed;        // batches replayed to B within the late-join window
  int64_t caught_up = 0;   // batches replayed to B as its own epoch (catch-up)
  int catch_ups = -1;      // option late_join_catch_ups (-1: its default)
};

void ExpectLateJoin(const LateJoinCase& c, bool external = false) {
  LateJoinRun r;
  RunLateJoin(c.n, 2, c.join_at, c.b_epochs, &r, external, c.catch_ups);
  ExpectExactlyOnce(r.a, c.n, 2, 16);
  ExpectExactlyOnce(r.b, c.n, c.b_epochs, 8);
  ASSERT_FALSE(r.b.counts.empty());
  EXPECT_EQ(r.b.counts.begin()->first, c.b_first_epoch);
  EXPECT_EQ(r.stats.replayed_batches, c.replayed);
  EXPECT_EQ(r.stats.late_joins, c.replayed > 0 ? 1 : 0);
  EXPECT_EQ(r.stats.catch_up_replayed_batches, c.caught_up);
  EXPECT_EQ(r.stats.catch_ups, c.caught_up > 0 ? 1 : 0);
}

// Joined while position 2 of 10 was being filled: inside the window (>= 4 ring slots), so
// positions 0..2 are replayed to it alone and both see every sample exactly once, from
// epoch 0 on (caught up, not deferred to epoch 1).
TEST(DataPlaneTest, LateJoinerWithinWindowGetsTheEpochStartReplayed) {
  ExpectLateJoin({160, 2, 2, 0, 3});
}

// Joined while position 9 of 20 was being filled: past the window (4 batches), so it is
// caught up at once with an epoch of its own: epoch 0, all 20 positions replayed to it alone
// between the stream's (option late_join_catch_ups, default 2).
TEST(DataPlaneTest, JoinerAfterTheWindowIsCaughtUpWithAnEpochOfItsOwn) {
  ExpectLateJoin({320, 9, 1, 0, 0, 20});
}

// With late_join_catch_ups=0 it starts at epoch 1's first position; nothing is replayed.
TEST(DataPlaneTest, JoinerAfterTheWindowWithoutCatchUpStartsAtTheNextEpoch) {
  ExpectLateJoin({320, 9, 1, 1, 0, 0, 0});
}

// The same through the Python Producer's feed (batches from an iterable, which cannot be made
// again): the Producer keeps copies of the epoch's first ring-depth batches and replays them.
TEST(DataPlaneTest, IterableLateJoinerWithinWindowGetsTheEpochStartReplayed) {
  ExpectLateJoin({160, 2, 2, 0, 3}, /*external=*/true);
}

// Past the window an iterable's joiner waits for the next epoch (its length is not known).
TEST(DataPlaneTest, IterableJoinerAfterTheWindowStartsAtTheNextEpoch) {
  ExpectLateJoin({320, 9, 1, 1, 0}, /*external=*/true);
}

}  // namespace
}  // namespace batchcast::node
