// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The progressive-resizing schedule (docs/progressive-resizing.md): a pure,
// deterministic function of (spec, seed, num_samples, total_epochs, epoch).
//
// Every sample has a current bucket (an image size) that persists across epochs; all
// start in the smallest. After each epoch U = max(1, round_half_up(upgrade x N))
// samples move up one bucket:
//   mixed       U is split over the buckets below the top in proportion to their
//               occupancy (largest remainder; ties go to the smaller bucket);
//   exhaustive  U samples leave the bucket that was trained (the smallest non-empty).
// The policy picks which samples of a bucket move. The last `final_epochs` epochs of
// the run train every sample at full size.
//
// Batch scaling: B_S = (W_full / W)^2; a consumer's batch at bucket S is
// floor(base x B_S), capped at max(max_batch, base) when max_batch > 0. The LR factor
// is computed from the batch actually used: r = batch / base, eta = r (linear),
// sqrt(r) (sqrt) or 1 (none).
//
// Thread safety: all const methods may be called concurrently (an internal mutex
// guards the cached bucket state, advanced epoch by epoch).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "batchcast/status.h"
#include "schedule/resize_spec.h"
#include "schedule/upgrade_policy.h"

namespace batchcast::schedule {

enum class EpochPhase { kRamp, kFinal };
const char* EpochPhaseName(EpochPhase phase);

// How a bucket scales a batch of `base` samples taken at full size.
struct BucketScaling {
  int bucket = 0;
  int image_size = 0;
  double batch_scale = 1.0;  // B_S = (W_full / W)^2, before the cap
  int64_t batch_size = 0;    // floor(base x B_S), capped
  bool capped = false;       // the cap made batch_size smaller than floor(base x B_S)
  double lr_factor = 1.0;    // from batch_size / base (after the cap)
};

struct BucketEpoch {
  BucketScaling scaling;         // for the schedule's base batch size
  int64_t occupancy = 0;         // samples whose current bucket this is (before the final phase)
  std::vector<int64_t> samples;  // trained this epoch at this size, in seeded shuffled order
};

// Counts for one epoch, without the sample lists (what the printed plan needs).
struct EpochSummary {
  int epoch = 0;
  EpochPhase phase = EpochPhase::kRamp;
  std::vector<int64_t> occupancy;  // per bucket
  std::vector<int64_t> trained;    // per bucket: samples trained this epoch at that size
  int64_t samples_covered = 0;     // sum of trained; N in mixed mode and the final phase
  int64_t steps = 0;               // sum over buckets of ceil(trained / batch_size)
  double relative_work = 0.0;      // pixels this epoch / pixels of one full-size epoch of N
};

struct EpochPlan {
  EpochSummary summary;
  std::vector<BucketEpoch> buckets;  // one per bucket, smallest first; untrained ones empty
};

// One producer batch: a single image size, its LR factor, its samples.
struct ProducerBatch {
  int bucket = 0;
  int image_size = 0;
  double batch_scale = 1.0;  // B_S of the bucket
  double lr_factor = 1.0;    // for the schedule's base batch size; others: LrFactor(base, bucket)
  std::vector<int64_t> samples;
};

struct ResizeScheduleParams {
  ResizeSpec spec;
  uint64_t seed = 0;
  int64_t num_samples = 0;
  int total_epochs = 1;          // epochs in the run; the final phase is the last spec.final_epochs
  int64_t base_batch_size = 64;  // a consumer's batch size at full size
  // The largest consumer batch at full size (0: none). Producer batches are then cut to a
  // whole number of its scaled batches, so a consumer of that size carves them without fill
  // repeats (floor(P x B_S) is often 2 floor(b x B_S) + 1, which costs b_S - 1 repeats).
  int64_t carve_unit = 0;
  // Overrides spec.policy (a custom UpgradePolicy); null = the built-in named in the spec.
  std::shared_ptr<const UpgradePolicy> policy;
};

class ResizeSchedule {
 public:
  [[nodiscard]] static Result<std::unique_ptr<ResizeSchedule>> Create(
      const ResizeScheduleParams& params);

  const ResizeSpec& spec() const { return params_.spec; }
  uint64_t seed() const { return params_.seed; }
  int64_t num_samples() const { return params_.num_samples; }
  int total_epochs() const { return params_.total_epochs; }
  int64_t base_batch_size() const { return params_.base_batch_size; }
  const std::vector<int>& bucket_sizes() const { return sizes_; }
  int num_buckets() const { return static_cast<int>(sizes_.size()); }
  int full_size() const { return sizes_.back(); }
  // Samples that move up after each epoch: max(1, floor(upgrade x N + 0.5)).
  int64_t upgrades_per_epoch() const { return upgrades_per_epoch_; }
  // First epoch of the final phase (total_epochs - final_epochs, at least 0).
  int final_phase_begin() const;

  // Scaling of any consumer's base batch size (flexible per-consumer sizes).
  double BatchScale(int bucket) const;
  int64_t ScaledBatchSize(int64_t base, int bucket) const;
  double LrFactor(int64_t base, int bucket) const;
  BucketScaling Scaling(int64_t base, int bucket) const;

  EpochPhase Phase(int epoch) const;

  // Bucket of every sample during `epoch` (persistent state; the final phase overrides
  // what is trained, not this). O(N) per epoch advanced; sequential calls are cheap.
  [[nodiscard]] Result<std::vector<uint8_t>> BucketsAt(int epoch) const;

  // Everything trained in `epoch`: per bucket the shuffled samples and their scaling.
  [[nodiscard]] Result<EpochPlan> PlanEpoch(int epoch) const;

  // The epoch as producer batches of one size each. A bucket's producer batch holds
  // ProducerChunk samples, about floor(producer_base x B_S) (not capped: its bytes stay
  // within a full-size slot; max_batch caps what consumers carve out); the last one of a
  // bucket may be short. Mixed mode interleaves the buckets' batches in a seeded uniformly random
  // order. Every sample of the epoch appears exactly once. producer_base 0 = base.
  [[nodiscard]] Result<std::vector<ProducerBatch>> ProducerBatches(int epoch,
                                                                   int64_t producer_base = 0) const;

  // Counts for every epoch of the run, for the printed plan.
  [[nodiscard]] Result<std::vector<EpochSummary>> Summaries() const;

  // Samples per producer batch of `bucket`: floor(producer_base x B_S), not capped, cut
  // down to a multiple of ScaledBatchSize(carve_unit, bucket) when carve_unit is set.
  int64_t ProducerChunk(int64_t producer_base, int bucket) const;
  // Batches a consumer whose full-size batch is `consumer_base` receives in the epoch of
  // `summary` when the leader's producer batch is `producer_base`: per bucket, the trained
  // samples in producer batches of ProducerChunk (the last short), each carved into
  // ceil(n / ScaledBatchSize(consumer_base, bucket)) consumer batches. Exact for a stream
  // without skipped samples (Consumer::BatchesPerEpoch). `scaled` false: a consumer of
  // another view group, whose batch keeps its size (docs/progressive-resizing.md "A schedule
  // per view"): ceil(n / consumer_base) per producer batch.
  int64_t ConsumerBatches(const EpochSummary& summary, int64_t producer_base,
                          int64_t consumer_base, bool scaled = true) const;

 private:
  explicit ResizeSchedule(const ResizeScheduleParams& params);
  // State of epoch `epoch` -> state of epoch + 1; *moved is false once nothing can move.
  [[nodiscard]] Status Advance(int epoch, std::vector<uint8_t>* buckets, bool* moved) const;
  EpochSummary Summarize(int epoch, const std::vector<uint8_t>& buckets) const;
  std::vector<int64_t> UpgradeQuotas(const std::vector<int64_t>& occupancy) const;

  ResizeScheduleParams params_;
  std::vector<int> sizes_;
  int64_t upgrades_per_epoch_ = 0;

  mutable std::mutex mu_;
  mutable int cached_epoch_ = 0;         // guarded by mu_
  mutable std::vector<uint8_t> cached_;  // bucket of each sample during cached_epoch_
  mutable bool cached_settled_ = false;  // no sample can move any more
};

}  // namespace batchcast::schedule
