// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "schedule/resize_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/sanitizers.h"
#include "schedule/plan_format.h"

namespace batchcast::schedule {
namespace {

ResizeSpec Spec(const std::string& text) {
  auto r = ParseResizeSpec(text);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ResizeSpec{};
}

std::unique_ptr<ResizeSchedule> Make(const std::string& spec, int64_t n, int epochs,
                                     uint64_t seed = 1, int64_t base = 64) {
  ResizeScheduleParams p;
  p.spec = Spec(spec);
  p.seed = seed;
  p.num_samples = n;
  p.total_epochs = epochs;
  p.base_batch_size = base;
  auto r = ResizeSchedule::Create(p);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(*r) : nullptr;
}

std::vector<int64_t> Occupancy(const ResizeSchedule& s, int epoch) {
  auto b = s.BucketsAt(epoch);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  std::vector<int64_t> count(s.num_buckets(), 0);
  if (b.ok())
    for (uint8_t v : *b) ++count[v];
  return count;
}

constexpr const char* kImageNet = "resize(min=96,max=224,step=32,upgrade=0.25)";

TEST(ResizeScheduleTest, UpgradeCountRoundsHalfUpAndIsAtLeastOne) {
  EXPECT_EQ(Make(kImageNet, 1000, 20)->upgrades_per_epoch(), 250);
  EXPECT_EQ(Make(kImageNet, 10, 20)->upgrades_per_epoch(), 3);  // 2.5 rounds up
  EXPECT_EQ(Make(kImageNet, 9, 20)->upgrades_per_epoch(), 2);   // 2.25 rounds down
  EXPECT_EQ(Make("resize(min=96,max=224,upgrade=0.1)", 3, 20)->upgrades_per_epoch(), 1);  // 0.3
}

// Mixed mode, 1000 samples, 5 buckets, U = 250 per epoch, split over the non-top buckets
// in proportion to occupancy by largest remainder (ties to the smaller bucket):
//   after epoch 0: bucket 0 gives 250                          -> 750 250   0   0 0
//   after epoch 1: 187.5 + 62.5 -> 187 + 62, spare 1 -> b0     -> 562 376  62   0 0
//   after epoch 2: 140.5 + 94 + 15.5 -> 140 + 94 + 15, +1 -> b0 -> 421 423 141  15 0
TEST(ResizeScheduleTest, MixedOccupancyMatchesHandCounts) {
  auto s = Make(kImageNet, 1000, 30);
  EXPECT_EQ(Occupancy(*s, 0), (std::vector<int64_t>{1000, 0, 0, 0, 0}));
  EXPECT_EQ(Occupancy(*s, 1), (std::vector<int64_t>{750, 250, 0, 0, 0}));
  EXPECT_EQ(Occupancy(*s, 2), (std::vector<int64_t>{562, 376, 62, 0, 0}));
  EXPECT_EQ(Occupancy(*s, 3), (std::vector<int64_t>{421, 423, 141, 15, 0}));
}

TEST(ResizeScheduleTest, SamplesOnlyMoveUpOneBucketAndAllReachFullSize) {
  auto s = Make(kImageNet, 1000, 40);
  auto prev = s->BucketsAt(0);
  ASSERT_TRUE(prev.ok());
  for (int e = 1; e < 39; ++e) {
    auto cur = s->BucketsAt(e);
    ASSERT_TRUE(cur.ok());
    int64_t moved = 0;
    for (size_t i = 0; i < cur->size(); ++i) {
      int d = (*cur)[i] - (*prev)[i];
      ASSERT_TRUE(d == 0 || d == 1) << "sample " << i << " epoch " << e;
      moved += d;
    }
    int64_t eligible = 0;
    for (uint8_t b : *prev) eligible += b < 4;
    EXPECT_EQ(moved, std::min<int64_t>(250, eligible)) << "epoch " << e;
    prev = cur;
  }
  // 4 steps x 1000 samples at 250 per epoch, while at least 250 are eligible.
  EXPECT_EQ(Occupancy(*s, 38), (std::vector<int64_t>{0, 0, 0, 0, 1000}));
}

// Exhaustive: 250 samples leave the trained (smallest non-empty) bucket after each epoch,
// so bucket 0 trains 1000, 750, 500, 250 samples, then bucket 1 trains all 1000, ...
TEST(ResizeScheduleTest, ExhaustiveTrainsSmallestNonEmptyBucket) {
  auto s = Make("resize(min=96,max=224,step=32,upgrade=0.25,mode=exhaustive)", 1000, 20);
  auto sums = s->Summaries();
  ASSERT_TRUE(sums.ok());
  const std::vector<int64_t> covered = {1000, 750, 500,  250, 1000, 750, 500,  250,  1000, 750,
                                        500,  250, 1000, 750, 500,  250, 1000, 1000, 1000, 1000};
  for (int e = 0; e < 20; ++e) {
    const EpochSummary& es = (*sums)[e];
    EXPECT_EQ(es.samples_covered, covered[e]) << "epoch " << e;
    int trained_bucket = e < 16 ? e / 4 : 4;
    for (int b = 0; b < 5; ++b)
      EXPECT_EQ(es.trained[b], b == trained_bucket ? covered[e] : 0) << "epoch " << e;
  }
  EXPECT_EQ(Occupancy(*s, 5), (std::vector<int64_t>{0, 750, 250, 0, 0}));
  auto plan = s->PlanEpoch(5);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->buckets[1].samples.size(), 750u);
  EXPECT_TRUE(plan->buckets[2].samples.empty());
  EXPECT_EQ(plan->buckets[2].occupancy, 250);
}

TEST(ResizeScheduleTest, BatchScaleAndLrRules) {
  // 112 -> 224 is exactly 2x: B_S = 4.
  for (auto [rule, lr] :
       std::vector<std::pair<std::string, double>>{{"linear", 4.0}, {"sqrt", 2.0}, {"none", 1.0}}) {
    auto s = Make("resize(sizes=112:224,lr=" + rule + ")", 100, 5);
    BucketScaling sc = s->Scaling(64, 0);
    EXPECT_DOUBLE_EQ(sc.batch_scale, 4.0);
    EXPECT_EQ(sc.batch_size, 256);
    EXPECT_FALSE(sc.capped);
    EXPECT_DOUBLE_EQ(sc.lr_factor, lr) << rule;
    BucketScaling full = s->Scaling(64, 1);
    EXPECT_EQ(full.batch_size, 64);
    EXPECT_DOUBLE_EQ(full.lr_factor, 1.0);
  }
  // 96 px: B_S = (224/96)^2 = 5.444..., floor(64 x 5.444) = 348, eta = 348/64 = 5.4375.
  auto s = Make(kImageNet, 100, 5);
  EXPECT_NEAR(s->BatchScale(0), 5.4444444, 1e-6);
  EXPECT_EQ(s->ScaledBatchSize(64, 0), 348);
  EXPECT_DOUBLE_EQ(s->LrFactor(64, 0), 5.4375);
  EXPECT_EQ(s->ScaledBatchSize(64, 2), 125);  // 64 x (224/160)^2 = 125.44
  // Another consumer's base scales the same way.
  EXPECT_EQ(s->ScaledBatchSize(10, 0), 54);  // 54.44
  EXPECT_DOUBLE_EQ(s->LrFactor(10, 0), 5.4);
}

TEST(ResizeScheduleTest, CapLimitsBatchAndLrFollowsCappedSize) {
  auto s = Make("resize(sizes=112:224,max_batch=200)", 100, 5);
  BucketScaling sc = s->Scaling(64, 0);
  EXPECT_EQ(sc.batch_size, 200);
  EXPECT_TRUE(sc.capped);
  EXPECT_DOUBLE_EQ(sc.batch_scale, 4.0);  // nominal B_S is unchanged
  EXPECT_DOUBLE_EQ(sc.lr_factor, 200.0 / 64.0);
  EXPECT_EQ(s->ScaledBatchSize(40, 0), 160);  // under the cap
  auto sq = Make("resize(sizes=112:224,max_batch=200,lr=sqrt)", 100, 5);
  EXPECT_DOUBLE_EQ(sq->LrFactor(64, 0), std::sqrt(200.0 / 64.0));
  // A cap below the base never shrinks a batch below its full-size base.
  auto low = Make("resize(sizes=112:224,max_batch=32)", 100, 5);
  EXPECT_EQ(low->ScaledBatchSize(64, 0), 64);
  EXPECT_EQ(low->ScaledBatchSize(64, 1), 64);
  EXPECT_DOUBLE_EQ(low->LrFactor(64, 0), 1.0);
}

TEST(ResizeScheduleTest, MixedEpochCoversEverySampleExactlyOnce) {
  auto s = Make(kImageNet, 5000, 12, 7);
  for (int e : {0, 3, 6, 11}) {
    auto batches = s->ProducerBatches(e, 100);
    ASSERT_TRUE(batches.ok()) << batches.status().ToString();
    std::vector<int> seen(5000, 0);
    for (const ProducerBatch& pb : *batches) {
      ASSERT_FALSE(pb.samples.empty());
      EXPECT_EQ(pb.image_size, s->bucket_sizes()[pb.bucket]);
      EXPECT_LE(static_cast<int64_t>(pb.samples.size()), s->ScaledBatchSize(100, pb.bucket));
      EXPECT_DOUBLE_EQ(pb.lr_factor, s->LrFactor(64, pb.bucket));
      auto buckets = s->BucketsAt(e);
      ASSERT_TRUE(buckets.ok());
      for (int64_t i : pb.samples) {
        ++seen[i];
        int expect = e == 11 ? 4 : (*buckets)[i];  // epoch 11 is the final phase
        EXPECT_EQ(pb.bucket, expect) << "sample " << i;
      }
    }
    for (int i = 0; i < 5000; ++i) ASSERT_EQ(seen[i], 1) << "sample " << i << " epoch " << e;
  }
}

TEST(ResizeScheduleTest, MixedInterleavesSizesThroughTheEpoch) {
  auto s = Make(kImageNet, 5000, 12, 7);
  auto batches = s->ProducerBatches(3, 64);
  ASSERT_TRUE(batches.ok());
  std::vector<int> order;
  for (const auto& pb : *batches) order.push_back(pb.bucket);
  EXPECT_FALSE(std::is_sorted(order.begin(), order.end()));
  // Every bucket with several batches has some in each half of the epoch (a sorted,
  // small-first order would put bucket 0 only in the first half and bucket 2 in the second).
  const size_t half = order.size() / 2;
  for (int b = 0; b < 4; ++b) {
    auto n = std::count(order.begin(), order.end(), b);
    if (n < 4) continue;
    EXPECT_GT(std::count(order.begin(), order.begin() + half, b), 0) << "bucket " << b;
    EXPECT_GT(std::count(order.begin() + half, order.end(), b), 0) << "bucket " << b;
  }
  // A bucket's batches are full except its last one.
  for (int b = 0; b < 4; ++b) {
    std::vector<size_t> sizes;
    for (const auto& pb : *batches)
      if (pb.bucket == b) sizes.push_back(pb.samples.size());
    for (size_t i = 0; i + 1 < sizes.size(); ++i)
      EXPECT_EQ(static_cast<int64_t>(sizes[i]), s->ScaledBatchSize(64, b));
  }
}

TEST(ResizeScheduleTest, ExhaustiveProducerBatchesHoldOnlyTheTrainedBucket) {
  auto s = Make("resize(min=96,max=224,step=32,upgrade=0.25,mode=exhaustive)", 1000, 20, 3);
  auto batches = s->ProducerBatches(2, 64);
  ASSERT_TRUE(batches.ok());
  std::vector<int> seen(1000, 0);
  int64_t total = 0;
  for (const auto& pb : *batches) {
    EXPECT_EQ(pb.bucket, 0);
    EXPECT_EQ(pb.image_size, 96);
    for (int64_t i : pb.samples) ++seen[i];
    total += static_cast<int64_t>(pb.samples.size());
  }
  EXPECT_EQ(total, 500);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 500);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 0), 500);
}

std::vector<std::vector<int64_t>> Sequence(const ResizeSchedule& s, int epoch) {
  auto batches = s.ProducerBatches(epoch);
  EXPECT_TRUE(batches.ok());
  std::vector<std::vector<int64_t>> out;
  if (batches.ok())
    for (const auto& pb : *batches) out.push_back(pb.samples);
  return out;
}

TEST(ResizeScheduleTest, DeterministicFromTheSeed) {
  auto a = Make(kImageNet, 3000, 10, 42);
  auto b = Make(kImageNet, 3000, 10, 42);
  auto c = Make(kImageNet, 3000, 10, 43);
  for (int e : {0, 4, 9}) {
    EXPECT_EQ(Sequence(*a, e), Sequence(*b, e)) << "epoch " << e;
    EXPECT_NE(Sequence(*a, e), Sequence(*c, e)) << "epoch " << e;
  }
  EXPECT_NE(*a->BucketsAt(4), *c->BucketsAt(4));
  // Going back replays from epoch 0 and gives the same state as a fresh schedule.
  auto late = a->BucketsAt(8);
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(*a->BucketsAt(2), *b->BucketsAt(2));
  EXPECT_EQ(Sequence(*a, 5), Sequence(*Make(kImageNet, 3000, 10, 42), 5));
  // Different epochs shuffle differently.
  EXPECT_NE(Sequence(*a, 9), Sequence(*a, 8));
}

TEST(ResizeScheduleTest, FinalPhaseTrainsEverythingAtFullSize) {
  auto s = Make("resize(min=96,max=224,step=32,upgrade=0.1,final_epochs=2)", 1000, 6);
  EXPECT_EQ(s->final_phase_begin(), 4);
  EXPECT_EQ(s->Phase(3), EpochPhase::kRamp);
  EXPECT_EQ(s->Phase(4), EpochPhase::kFinal);
  for (int e : {4, 5}) {
    auto plan = s->PlanEpoch(e);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->summary.phase, EpochPhase::kFinal);
    EXPECT_EQ(plan->summary.trained, (std::vector<int64_t>{0, 0, 0, 0, 1000}));
    EXPECT_EQ(plan->buckets[4].samples.size(), 1000u);
    EXPECT_EQ(plan->buckets[4].scaling.batch_size, 64);
    EXPECT_DOUBLE_EQ(plan->buckets[4].scaling.lr_factor, 1.0);
    EXPECT_DOUBLE_EQ(plan->summary.relative_work, 1.0);
    EXPECT_EQ(plan->summary.steps, 16);  // ceil(1000 / 64)
  }
  // Before it, most samples are still small (0.1 upgrade over 4 epochs).
  EXPECT_EQ(Occupancy(*s, 3)[4], 0);
}

TEST(ResizeScheduleTest, ExplicitSizeListSchedule) {
  auto s = Make("resize(sizes=64:160:224,upgrade=0.5,final_epochs=0)", 10, 5);
  EXPECT_EQ(s->bucket_sizes(), (std::vector<int>{64, 160, 224}));
  EXPECT_EQ(Occupancy(*s, 1), (std::vector<int64_t>{5, 5, 0}));
  // U = 5 over 5 + 5 eligible: 2.5 + 2.5 -> 2 + 2, spare 1 -> bucket 0, so 3 leave
  // bucket 0 and 2 leave bucket 1: 5-3, 5-2+3, 0+2.
  EXPECT_EQ(Occupancy(*s, 2), (std::vector<int64_t>{2, 6, 2}));
  EXPECT_EQ(s->ScaledBatchSize(64, 0), 784);  // 64 x (224/64)^2 = 784 exactly
  EXPECT_EQ(s->Phase(4), EpochPhase::kRamp);  // final_epochs=0: no forced final phase
}

TEST(ResizeScheduleTest, SummaryStepsAndWork) {
  auto s = Make("resize(sizes=112:224)", 1000, 3);
  auto sums = s->Summaries();
  ASSERT_TRUE(sums.ok());
  // Epoch 0: 1000 at 112 px, batch 256 -> 4 steps, work 0.25.
  EXPECT_EQ((*sums)[0].steps, 4);
  EXPECT_DOUBLE_EQ((*sums)[0].relative_work, 0.25);
  // Epoch 1: 750 at 112 (batch 256 -> 3 steps) + 250 at 224 (batch 64 -> 4 steps).
  EXPECT_EQ((*sums)[1].steps, 7);
  EXPECT_DOUBLE_EQ((*sums)[1].relative_work, (750 * 0.25 + 250) / 1000.0);
  auto plan = s->PlanEpoch(1);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->summary.trained, (*sums)[1].trained);
  EXPECT_EQ(plan->summary.steps, (*sums)[1].steps);
}

// Moves the lowest-numbered candidates: a deterministic policy plugged in from outside.
class LowestFirstPolicy final : public UpgradePolicy {
 public:
  std::string_view Name() const override { return "lowest_first"; }
  void SelectUpgrades(const UpgradeContext&, std::span<const int64_t> candidates, size_t count,
                      std::vector<int64_t>* chosen) const override {
    chosen->insert(chosen->end(), candidates.begin(), candidates.begin() + count);
  }
};

// Returns one sample twice: the schedule must refuse it.
class DuplicatingPolicy final : public UpgradePolicy {
 public:
  std::string_view Name() const override { return "duplicating"; }
  void SelectUpgrades(const UpgradeContext&, std::span<const int64_t> candidates, size_t count,
                      std::vector<int64_t>* chosen) const override {
    chosen->assign(count, candidates.front());
  }
};

TEST(ResizeScheduleTest, PluggablePolicy) {
  ResizeScheduleParams p;
  p.spec = Spec("resize(sizes=64:128,upgrade=0.3)");
  p.num_samples = 10;
  p.total_epochs = 4;
  p.policy = std::make_shared<LowestFirstPolicy>();
  auto s = ResizeSchedule::Create(p);
  ASSERT_TRUE(s.ok());
  auto b = (*s)->BucketsAt(1);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, (std::vector<uint8_t>{1, 1, 1, 0, 0, 0, 0, 0, 0, 0}));

  p.policy = std::make_shared<DuplicatingPolicy>();
  auto bad = ResizeSchedule::Create(p);
  ASSERT_TRUE(bad.ok());
  auto r = (*bad)->PlanEpoch(1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("policy 'duplicating' chose sample 0"), std::string::npos)
      << r.status().message();
}

TEST(ResizeScheduleTest, CreateAndEpochArgumentsAreChecked) {
  ResizeScheduleParams p;
  p.spec = Spec(kImageNet);
  p.num_samples = 0;
  EXPECT_FALSE(ResizeSchedule::Create(p).ok());
  p.num_samples = 10;
  p.total_epochs = 0;
  EXPECT_FALSE(ResizeSchedule::Create(p).ok());
  p.total_epochs = 3;
  p.spec.final_epochs = 4;
  auto r = ResizeSchedule::Create(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("final_epochs (4) exceeds the run's epochs (3)"),
            std::string::npos);
  p.spec.final_epochs = 1;
  p.base_batch_size = 0;
  EXPECT_FALSE(ResizeSchedule::Create(p).ok());
  auto s = Make(kImageNet, 10, 3);
  EXPECT_EQ(s->BucketsAt(3).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s->BucketsAt(-1).status().code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(s->ProducerBatches(0, -1).ok());
}

TEST(ResizeScheduleTest, FormatPlanShowsBucketsEpochsAndTotals) {
  auto s = Make(kImageNet, 1000, 24);
  auto text = FormatPlan(*s);
  ASSERT_TRUE(text.ok());
  const std::string& t = *text;
  EXPECT_NE(t.find("progressive resizing plan: resize(min=96,max=224,step=32"), std::string::npos);
  EXPECT_NE(t.find("250 samples move up after each epoch"), std::string::npos);
  // Bucket table row for 96 px: B_S 5.444, batch 348, lr 5.438.
  EXPECT_NE(t.find("     0     96    5.444     348     5.438     no"), std::string::npos) << t;
  // Epoch 0 row: all 1000 at 96 px, ceil(1000/348) = 3 steps, work (96/224)^2 = 0.184.
  EXPECT_NE(
      t.find(
          "        0  ramp      1000     1000        0        0        0        0       3  0.184"),
      std::string::npos)
      << t;
  // Identical epochs fold into one row: every sample at full size from epoch 19 on; the
  // final phase (the last epoch) is its own row.
  EXPECT_NE(
      t.find(
          "    19-22  ramp      1000        0        0        0        0     1000      16  1.000"),
      std::string::npos)
      << t;
  EXPECT_NE(t.find("       23 final      1000"), std::string::npos) << t;
  EXPECT_NE(t.find("total:"), std::string::npos);
}

// 1.3M samples (ImageNet-1k train) for a few epochs: sanity of the O(N) per-epoch path.
// No timing assertion; the run itself is the check that it stays practical. Under a sanitizer
// a tenth of it (the same code; the whole run took 9 s of the two sanitizer trees' CPU).
TEST(ResizeScheduleTest, ImageNetSizedRun) {
  constexpr int64_t kN = BC_SANITIZED ? 128117 : 1281167;
  auto s = Make(kImageNet, kN, 5, 9, 256);
  for (int e = 0; e < 5; ++e) {
    auto batches = s->ProducerBatches(e, 512);
    ASSERT_TRUE(batches.ok());
    int64_t total = 0;
    for (const auto& pb : *batches) total += static_cast<int64_t>(pb.samples.size());
    EXPECT_EQ(total, kN) << "epoch " << e;
  }
  std::vector<int64_t> occ = Occupancy(*s, 3);
  int64_t sum = 0;
  for (int64_t c : occ) sum += c;
  EXPECT_EQ(sum, kN);
  EXPECT_EQ(occ[0] + occ[1] + occ[2] + occ[3] + occ[4], kN);
  EXPECT_EQ(kN - occ[0], 3 * s->upgrades_per_epoch() - (occ[2] + 2 * occ[3]));
}

// ConsumerBatches (what Consumer::BatchesPerEpoch reports) equals carving the epoch's real
// producer batches: ceil(n / scaled batch) per producer batch, for several consumer bases,
// both modes, a cap and a producer batch that is not the schedule's base.
TEST(ResizeScheduleTest, ConsumerBatchesMatchCarvingTheProducerBatches) {
  for (const char* spec : {"resize(min=8,max=24,step=8,upgrade=0.3,mode=mixed)",
                           "resize(sizes=8:12:24,upgrade=0.4,mode=exhaustive,max_batch=40)"}) {
    SCOPED_TRACE(spec);
    auto s = Make(spec, 397, 7, 3, 16);
    ASSERT_NE(s, nullptr);
    auto summaries = s->Summaries();
    ASSERT_TRUE(summaries.ok());
    for (int64_t producer : {int64_t{0}, int64_t{20}}) {
      for (int64_t b : {1, 3, 7, 16}) {
        int64_t total = 0;
        for (int e = 0; e < 7; ++e) {
          auto batches = s->ProducerBatches(e, producer);
          ASSERT_TRUE(batches.ok());
          int64_t carved = 0;
          for (const ProducerBatch& pb : *batches) {
            const int64_t scaled = s->ScaledBatchSize(b, pb.bucket);
            carved += (static_cast<int64_t>(pb.samples.size()) + scaled - 1) / scaled;
          }
          EXPECT_EQ(s->ConsumerBatches((*summaries)[e], producer, b), carved)
              << "epoch " << e << " producer " << producer << " b " << b;
          total += carved;
        }
        EXPECT_GT(total, 0);
      }
    }
    // Small sizes give bigger batches, so fewer of them than at full size.
    const int64_t full_epoch = (397 + 16 - 1) / 16;
    EXPECT_LT(s->ConsumerBatches((*summaries)[0], 0, 16), full_epoch);
    EXPECT_EQ(s->ConsumerBatches((*summaries)[6], 0, 16), full_epoch) << "final phase: full size";
  }
}

// With a carve unit (the largest consumer batch) every producer batch but a bucket's last
// holds a whole number of that consumer's scaled batches: no fill repeats for it. Without
// one, floor(P x B_S) = 2 floor(b x B_S) + 1 costs b_S - 1 repeats per producer batch.
TEST(ResizeScheduleTest, CarveUnitCutsProducerBatchesToWholeConsumerBatches) {
  for (int64_t unit : {int64_t{0}, int64_t{32}}) {
    ResizeScheduleParams p;
    p.spec = Spec("resize(sizes=16:22:28,upgrade=0.5,mode=mixed)");
    p.seed = 5;
    p.num_samples = 1200;
    p.total_epochs = 3;
    p.base_batch_size = 64;
    p.carve_unit = unit;
    auto s = ResizeSchedule::Create(p);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const int bucket22 = 1;
    EXPECT_EQ((*s)->ScaledBatchSize(32, bucket22), 51);  // floor(32 x 784 / 484)
    EXPECT_EQ((*s)->ProducerChunk(64, bucket22), unit ? 102 : 103);
    auto batches = (*s)->ProducerBatches(1, 64);
    ASSERT_TRUE(batches.ok());
    int64_t repeats = 0, samples = 0;
    for (const ProducerBatch& pb : *batches) {
      const int64_t n = static_cast<int64_t>(pb.samples.size());
      const int64_t b = (*s)->ScaledBatchSize(32, pb.bucket);
      repeats += (n + b - 1) / b * b - n;
      samples += n;
    }
    EXPECT_EQ(samples, 1200);
    if (unit > 0) {
      EXPECT_LE(repeats, 51 + 98) << "at most one short batch per bucket";
    } else {
      EXPECT_GT(repeats, 200) << "the off-by-one chunk at 22 px repeats ~50 per producer batch";
    }
    auto summaries = (*s)->Summaries();
    ASSERT_TRUE(summaries.ok());
    int64_t carved = 0;
    for (const ProducerBatch& pb : *batches) {
      const int64_t b = (*s)->ScaledBatchSize(32, pb.bucket);
      carved += (static_cast<int64_t>(pb.samples.size()) + b - 1) / b;
    }
    EXPECT_EQ((*s)->ConsumerBatches((*summaries)[1], 64, 32), carved);
  }
  ResizeScheduleParams bad;
  bad.spec = Spec("resize(sizes=16:28)");
  bad.num_samples = 10;
  bad.base_batch_size = 8;
  bad.carve_unit = 9;
  EXPECT_FALSE(ResizeSchedule::Create(bad).ok()) << "a carve unit above the base is refused";
}

}  // namespace
}  // namespace batchcast::schedule
