// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Progressive resizing executed by the leader (docs/progressive-resizing.md): a Leader
// with options.resize and real Consumers over shared memory. The source writes pixels
// that are a function of (sample, image size), so every byte a consumer sees proves the
// sample was produced at the size the schedule gave it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <map>
#include <set>
#include <thread>

#include "batchcast/consumer.h"
#include "producer/producer.h"
#include "schedule/resize_schedule.h"
#include "schedule/resize_spec.h"
#include "tests/unit/node/resize_checks.h"
#include "tests/unit/node/synthetic_source.h"

namespace batchcast::node {
namespace {

using testing::ExpectFollowsSchedule;
using testing::ResizeSeen;
using testing::SeenBatch;

std::string UniqueSocket() {
  static std::atomic<int> n{0};
  return "batchcast-test-" + std::to_string(getpid()) + "-resize-" + std::to_string(n++);
}

struct RunningLeader {
  std::unique_ptr<producer::Producer> leader;
  std::thread thread;
  Status status;
  ~RunningLeader() {
    if (thread.joinable()) thread.join();
  }
};

Options ResizeOptions(const std::string& spec, int epochs, int producer_batch) {
  Options o;
  o.epochs = epochs;
  o.seed = 7;
  o.producer_batch = producer_batch;
  o.buffer_depth = 2;
  o.ring_slots = 4;
  o.heartbeat_ms = 5000;
  o.resize = spec;
  return o;
}

std::unique_ptr<RunningLeader> StartLeader(const Options& o, int consumers, uint32_t max_b,
                                           int64_t n, int full) {
  producer::ProducerConfig cfg;
  cfg.options = o;
  cfg.expected_consumers = consumers;
  cfg.max_consumer_batch = max_b;
  cfg.socket_name = UniqueSocket();
  cfg.job = "test";
  cfg.join_timeout_ms = 30000;
  cfg.print_plan = false;
  auto r = std::make_unique<RunningLeader>();
  auto l = producer::Producer::Create(cfg, std::make_unique<SizedSource>(n, full, 3));
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  if (!l.ok()) return nullptr;
  r->leader = std::move(l).value();
  r->thread = std::thread([p = r.get()] { p->status = p->leader->Run(); });
  return r;
}

// The pixels and label SizedSource gives sample `id` at `size`.
bool SizedSample(int64_t id, int size, const uint8_t* px, size_t bytes, int64_t label,
                 bool* label_ok) {
  *label_ok = label == id % 10;
  for (size_t b = 0; b < bytes; ++b)
    if (px[b] != SizedPixel(id, size, b)) return false;
  return true;
}

void ConsumeResized(Consumer* c, int epochs, ResizeSeen* seen) {
  testing::ConsumeResized(c, epochs, 3, SizedSample, seen);
}

// Runs a leader and one consumer per batch size to the end of the stream.
std::vector<ResizeSeen> RunStream(const Options& o, const std::vector<int>& sizes, int64_t n, int full,
                            bool offset, bool shuffle) {
  uint32_t max_b = 0;
  for (int b : sizes) max_b = std::max<uint32_t>(max_b, uint32_t(b));
  auto leader = StartLeader(o, static_cast<int>(sizes.size()), max_b, n, full);
  std::vector<ResizeSeen> seen(sizes.size());
  if (leader == nullptr) return seen;
  std::vector<std::unique_ptr<Consumer>> consumers;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Options co = o;
    co.batch_size = sizes[i];
    co.carve_offset = offset;
    co.carve_shuffle = shuffle;
    auto c = Consumer::Attach(leader->leader->address(), co, static_cast<int>(i));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (!c.ok()) return seen;
    consumers.push_back(std::move(c).value());
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < sizes.size(); ++i)
    threads.emplace_back(ConsumeResized, consumers[i].get(), o.epochs, &seen[i]);
  for (auto& t : threads) t.join();
  leader->thread.join();
  EXPECT_TRUE(leader->status.ok()) << leader->status.ToString();
  return seen;
}

std::unique_ptr<schedule::ResizeSchedule> Expected(const Options& o, int64_t n) {
  return testing::ExpectedSchedule(o, n);
}

TEST(ResizeLeaderTest, MixedModeTrainsEverySampleOncePerEpochAtItsSize) {
  const int64_t n = 401;  // prime: short last batches in every bucket
  const int epochs = 5;
  Options o = ResizeOptions("resize(sizes=8:12:16,upgrade=0.3,mode=mixed,final_epochs=1)",
                            epochs, 24);
  const std::vector<int> sizes = {8, 5, 3};
  for (bool offset : {false, true}) {
    SCOPED_TRACE(offset ? "carve offset + shuffle" : "plain carving");
    std::vector<ResizeSeen> seen = RunStream(o, sizes, n, 16, offset, offset);
    auto s = Expected(o, n);
    for (size_t i = 0; i < sizes.size(); ++i) {
      SCOPED_TRACE("consumer b=" + std::to_string(sizes[i]));
      ExpectFollowsSchedule(seen[i], *s, sizes[i], epochs);
    }
    // Mixed: every epoch covers all N; the ramp uses more than one size in one epoch.
    std::set<int> epoch2_sizes;
    for (const SeenBatch& b : seen[0].batches)
      if (b.epoch == 2) epoch2_sizes.insert(b.image_size);
    EXPECT_GE(epoch2_sizes.size(), 2u);
  }
}

TEST(ResizeLeaderTest, ExhaustiveModeCoversTheSmallestBucketOnly) {
  const int64_t n = 200;
  const int epochs = 6;
  Options o = ResizeOptions("resize(sizes=8:16,upgrade=0.5,mode=exhaustive,final_epochs=1)",
                            epochs, 16);
  std::vector<ResizeSeen> seen = RunStream(o, {4, 6}, n, 16, true, true);
  auto s = Expected(o, n);
  ExpectFollowsSchedule(seen[0], *s, 4, epochs);
  ExpectFollowsSchedule(seen[1], *s, 6, epochs);
  // Epoch 1 trains only the 100 samples still in bucket 0.
  std::set<int64_t> epoch1;
  for (const SeenBatch& b : seen[0].batches)
    if (b.epoch == 1) epoch1.insert(b.ids.begin(), b.ids.end());
  EXPECT_EQ(epoch1.size(), 100u);
}

TEST(ResizeLeaderTest, MaxBatchCapsConsumerBatchesAndLrFactors) {
  const int64_t n = 150;
  Options o = ResizeOptions("resize(sizes=4:8,upgrade=1,max_batch=10,lr=sqrt,final_epochs=1)",
                            2, 16);
  std::vector<ResizeSeen> seen = RunStream(o, {4, 16}, n, 8, false, false);
  auto s = Expected(o, n);
  ExpectFollowsSchedule(seen[0], *s, 4, 2);
  ExpectFollowsSchedule(seen[1], *s, 16, 2);
  for (const SeenBatch& b : seen[0].batches) {
    if (b.epoch != 0) continue;
    EXPECT_EQ(b.image_size, 4);
    EXPECT_EQ(b.size, 10);  // 4 x (8/4)^2 = 16, capped at 10
    EXPECT_NEAR(b.lr_factor, std::sqrt(10.0 / 4.0), 1e-5);
  }
  for (const SeenBatch& b : seen[1].batches) {
    if (b.epoch == 0) {
      EXPECT_EQ(b.size, 16);  // the cap never shrinks the full-size batch
    }
  }
}

TEST(ResizeLeaderTest, SameSeedGivesTheSameSizedStream) {
  const int64_t n = 123;
  Options o = ResizeOptions("resize(sizes=6:9:12,upgrade=0.4)", 3, 12);
  auto run = [&]() {
    std::vector<ResizeSeen> seen = RunStream(o, {5}, n, 12, true, true);
    std::vector<std::tuple<uint64_t, int, int64_t, float, std::vector<int64_t>>> out;
    for (const SeenBatch& b : seen[0].batches)
      out.emplace_back(b.epoch, b.image_size, b.size, b.lr_factor, b.ids);
    return out;
  };
  auto a = run();
  auto b = run();
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  o.seed = 8;
  auto c = run();
  EXPECT_NE(a, c) << "another seed must give another stream";
}

// A consumer that joins during epoch 0, while the leader waits for the first consumer at
// batch 4 (4 ring slots ahead of it; inside the late-join window of 4 ring slots), is
// admitted at once and gets epoch 0's start replayed (producer/admission.h):
// BatchesPerEpoch(e) of every stream epoch it gets equals what it receives, and its batches
// carry the stream's epoch numbers.
TEST(ResizeLeaderTest, LateJoinerGetsExactBatchesPerStreamEpoch) {
  const int64_t n = 401;
  const int epochs = 4;
  // Epoch 0 is all at 8 px: 5 producer batches of 96, more than the 4 ring slots, so the
  // leader cannot leave epoch 0 before the first consumer takes a batch.
  Options o = ResizeOptions("resize(sizes=8:12:16,upgrade=0.3,mode=mixed,final_epochs=1)",
                            epochs, 24);
  auto leader = StartLeader(o, 1, 8, n, 16);
  ASSERT_NE(leader, nullptr);
  Options first = o;
  first.batch_size = 8;
  auto a = Consumer::Attach(leader->leader->address(), first, 0);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  // The leader fills its window ahead of A (a condition, not a delay).
  const shm::StreamHeader* h = leader->leader->ring().header();
  while (h->published.load() < 4 && h->stream_state.load() == 0) std::this_thread::yield();
  ASSERT_EQ(h->published.load(), 4u);
  Options late = o;
  late.batch_size = 5;
  auto b = Consumer::Attach(leader->leader->address(), late, 1);  // joins during epoch 0
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  // The leader settles the joiner while it waits for A.
  while (leader->leader->ring().CountMembers(shm::MemberState::kJoining) > 0)
    std::this_thread::yield();
  ResizeSeen seen_a, seen_b;
  std::thread ta(ConsumeResized, a->get(), epochs, &seen_a);
  std::thread tb(ConsumeResized, b->get(), epochs, &seen_b);
  ta.join();
  tb.join();
  leader->thread.join();
  ASSERT_TRUE(leader->status.ok()) << leader->status.ToString();
  ASSERT_TRUE(seen_b.status.ok()) << seen_b.status.ToString();
  std::map<uint64_t, int64_t> got;
  for (const SeenBatch& sb : seen_b.batches) got[sb.epoch] += 1;
  ASSERT_EQ(got.count(0), 1u) << "the late consumer is caught up in epoch 0";
  ASSERT_EQ(got.size(), size_t(epochs));
  EXPECT_EQ(leader->leader->stats().late_joins, 1);
  for (const auto& [epoch, count] : got) {
    EXPECT_EQ(seen_b.announced[epoch], count) << "BatchesPerEpoch(" << epoch << ")";
    EXPECT_EQ(seen_b.current.at(epoch), count) << "BatchesPerEpoch() during epoch " << epoch;
  }
  EXPECT_NE(seen_b.announced[1], seen_a.announced[1]) << "batch sizes 5 and 8 differ in count";
}

TEST(ResizeLeaderTest, BadSpecFailsLeaderCreationNamingTheOption) {
  Options o = ResizeOptions("resize(min=8,max=16,upgarde=0.3)", 2, 16);
  o.batch_size = 4;
  producer::ProducerConfig cfg;
  cfg.options = o;
  cfg.socket_name = UniqueSocket();
  cfg.print_plan = false;
  auto l = producer::Producer::Create(cfg, std::make_unique<SizedSource>(10, 16, 3));
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("resize"), std::string::npos) << l.status().message();
  EXPECT_NE(l.status().message().find("upgarde"), std::string::npos) << l.status().message();
}

}  // namespace
}  // namespace batchcast::node
