// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The shared-memory ring on its own: targeted publishing, carving arithmetic.
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "transport/shm/carving.h"
#include "transport/shm/ring_consumer.h"
#include "transport/shm/ring_leader.h"

namespace batchcast::shm {
namespace {

TEST(RingTest, TargetedPublishReachesOnlyItsConsumers) {
  RingConfig rc;
  rc.num_slots = 3;
  rc.slot_bytes = 4096;
  rc.max_consumer_batch = 4;
  rc.socket_name = "batchcast-test-ring-" + std::to_string(getpid());
  rc.job = "test";
  auto leader = RingLeader::Create(rc);
  ASSERT_TRUE(leader.ok()) << leader.status().ToString();
  ConsumerConfig cc;
  cc.batch_size = 4;
  cc.buffer_depth = 1;
  auto a = RingConsumer::Attach(rc.socket_name, cc);
  auto b = RingConsumer::Attach(rc.socket_name, cc);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*leader)->WaitForJoined(2, 5000).ok());
  ASSERT_EQ((*leader)->AdmitJoining(0), 2);
  ASSERT_TRUE((*a)->WaitAdmitted(5000).ok() && (*b)->WaitAdmitted(5000).ok());
  const uint64_t bit_a = RingLeader::MemberBit((*a)->id());
  const uint64_t bit_b = RingLeader::MemberBit((*b)->id());
  const int kPositions = 12;
  // Positions 0, 3, 6, ... go to both; the others alternate between a and b.
  auto target = [&](int p) { return p % 3 == 0 ? bit_a | bit_b : (p % 3 == 1 ? bit_a : bit_b); };
  std::thread producer([&] {
    for (int p = 0; p < kPositions; ++p) {
      auto w = (*leader)->AcquireSlot(10000);
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      w->desc->epoch = static_cast<uint64_t>(p);
      EXPECT_EQ((*leader)->Publish(*w, target(p)), target(p));
    }
    (*leader)->End();
  });
  auto drain = [&](RingConsumer* c, uint64_t bit, std::vector<uint64_t>* got) {
    for (;;) {
      auto d = c->Acquire(nullptr);
      if (!d.ok()) {
        EXPECT_EQ(d.status().code(), StatusCode::kEndOfStream) << d.status().ToString();
        return;
      }
      got->push_back(d->desc->epoch);
      c->Release(*d);
    }
  };
  std::vector<uint64_t> got_a, got_b;
  std::thread ta([&] { drain(a->get(), bit_a, &got_a); });
  drain(b->get(), bit_b, &got_b);
  ta.join();
  producer.join();
  std::vector<uint64_t> want_a, want_b;
  for (int p = 0; p < kPositions; ++p) {
    if (target(p) & bit_a) want_a.push_back(p);
    if (target(p) & bit_b) want_b.push_back(p);
  }
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(got_b, want_b);
}

TEST(CarvingTest, EveryPlanCoversEachSampleOnceWithBoundedRepeats) {
  for (uint32_t n : {1u, 5u, 16u, 17u, 63u, 64u}) {
    for (uint32_t b : {1u, 3u, 8u, 16u}) {
      for (uint32_t flags : {0u, uint32_t(kCarveOffset), uint32_t(kCarveOffset | kCarveShuffle)}) {
        uint32_t tail = TailNeeded(n, b, flags);
        for (uint64_t seq = 0; seq < 5; ++seq) {
          CarvePlan plan = PlanCarves(seq, n, tail, b, flags, 99);
          std::vector<int> seen(n, 0);
          for (uint32_t i = 0; i < plan.count; ++i) {
            uint64_t start = plan.offset + uint64_t(plan.order[i]) * b;
            ASSERT_LE(start + b, uint64_t(n) + tail) << "carve runs past the tail";
            for (uint64_t p = start; p < start + b; ++p) seen[p % n] += 1;
          }
          int repeats = 0;
          for (int k : seen) {
            ASSERT_GE(k, 1);
            repeats += k - 1;
          }
          EXPECT_EQ(repeats, static_cast<int>(plan.repeats));
          EXPECT_LE(plan.repeats, b - 1);
        }
      }
    }
  }
}

}  // namespace
}  // namespace batchcast::shm
