// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "schedule/resize_schedule.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>

#include "core/errors.h"
#include "core/log.h"
#include "schedule/internal/seeded_rng.h"

namespace batchcast::schedule {
namespace {

using internal::DeriveSeed;
using internal::SeededRng;

// The samples of each bucket in ascending order, as one array plus offsets (counting sort).
struct BucketLists {
  std::vector<int64_t> order;
  std::vector<int64_t> begin;  // num_buckets + 1 offsets into order

  std::span<const int64_t> Of(int bucket) const {
    return {order.data() + begin[bucket], static_cast<size_t>(begin[bucket + 1] - begin[bucket])};
  }
};

std::vector<int64_t> CountBuckets(const std::vector<uint8_t>& buckets, int num_buckets) {
  std::vector<int64_t> count(num_buckets, 0);
  for (uint8_t b : buckets) ++count[b];
  return count;
}

BucketLists ListByBucket(const std::vector<uint8_t>& buckets, int num_buckets) {
  std::vector<int64_t> count = CountBuckets(buckets, num_buckets);
  BucketLists lists;
  lists.begin.assign(num_buckets + 1, 0);
  for (int b = 0; b < num_buckets; ++b) lists.begin[b + 1] = lists.begin[b] + count[b];
  lists.order.resize(buckets.size());
  std::vector<int64_t> next(lists.begin.begin(), lists.begin.end() - 1);
  for (size_t i = 0; i < buckets.size(); ++i)
    lists.order[next[buckets[i]]++] = static_cast<int64_t>(i);
  return lists;
}

}  // namespace

const char* EpochPhaseName(EpochPhase phase) {
  return phase == EpochPhase::kRamp ? "ramp" : "final";
}

ResizeSchedule::ResizeSchedule(const ResizeScheduleParams& params)
    : params_(params), sizes_(BucketSizes(params.spec)) {
  double u = std::floor(params.spec.upgrade * static_cast<double>(params.num_samples) + 0.5);
  upgrades_per_epoch_ = std::max<int64_t>(1, static_cast<int64_t>(u));
  cached_.assign(static_cast<size_t>(params.num_samples), 0);
}

Result<std::unique_ptr<ResizeSchedule>> ResizeSchedule::Create(const ResizeScheduleParams& params) {
  BC_RETURN_IF_ERROR(ValidateResizeSpec(params.spec));
  constexpr int64_t kMaxSamples = int64_t{1} << 40;
  if (params.num_samples <= 0 || params.num_samples > kMaxSamples)
    return InvalidArgumentError("resize schedule: num_samples must be in [1, 2^40], got {}",
                                params.num_samples);
  if (params.total_epochs <= 0)
    return InvalidArgumentError("resize schedule: total_epochs must be positive, got {}",
                                params.total_epochs);
  if (params.base_batch_size <= 0)
    return InvalidArgumentError("resize schedule: base batch size must be positive, got {}",
                                params.base_batch_size);
  if (params.carve_unit < 0 || params.carve_unit > params.base_batch_size)
    return InvalidArgumentError("resize schedule: carve unit must be in [0, base batch size {}], "
                                "got {}", params.base_batch_size, params.carve_unit);
  if (params.spec.final_epochs > params.total_epochs)
    return InvalidArgumentError("resize schedule: final_epochs ({}) exceeds the run's epochs ({})",
                                params.spec.final_epochs, params.total_epochs);
  ResizeScheduleParams p = params;
  if (p.policy == nullptr) {
    BC_ASSIGN_OR_RETURN(p.policy, MakeUpgradePolicy(p.spec.policy));
  }
  std::unique_ptr<ResizeSchedule> s(new ResizeSchedule(p));
  BC_LOG(Info, Sched,
         "progressive resizing: {} buckets {}..{} px, {} samples, {} upgrade after each epoch, "
         "mode {}, lr {}, final phase from epoch {} of {}",
         s->num_buckets(), s->sizes_.front(), s->full_size(), p.num_samples, s->upgrades_per_epoch_,
         ResizeModeName(p.spec.mode), LrRuleName(p.spec.lr), s->final_phase_begin(),
         p.total_epochs);
  return s;
}

int ResizeSchedule::final_phase_begin() const {
  return std::max(0, params_.total_epochs - params_.spec.final_epochs);
}

EpochPhase ResizeSchedule::Phase(int epoch) const {
  return epoch >= final_phase_begin() ? EpochPhase::kFinal : EpochPhase::kRamp;
}

double ResizeSchedule::BatchScale(int bucket) const {
  bucket = std::clamp(bucket, 0, num_buckets() - 1);
  double ratio = static_cast<double>(full_size()) / sizes_[bucket];
  return ratio * ratio;
}

BucketScaling ResizeSchedule::Scaling(int64_t base, int bucket) const {
  bucket = std::clamp(bucket, 0, num_buckets() - 1);
  BucketScaling s;
  s.bucket = bucket;
  s.image_size = sizes_[bucket];
  s.batch_scale = BatchScale(bucket);
  base = std::max<int64_t>(base, 1);
  // floor(base x full^2 / size^2) in integers, so exact ratios (2x → 4x) never round down.
  const auto full = static_cast<unsigned __int128>(full_size());
  const auto size = static_cast<unsigned __int128>(s.image_size);
  auto scaled =
      static_cast<int64_t>(static_cast<unsigned __int128>(base) * full * full / (size * size));
  s.batch_size = std::max(scaled, base);
  if (params_.spec.max_batch > 0) {
    int64_t cap = std::max(params_.spec.max_batch, base);  // the cap never shrinks full size
    if (s.batch_size > cap) {
      s.batch_size = cap;
      s.capped = true;
    }
  }
  double r = static_cast<double>(s.batch_size) / static_cast<double>(base);
  switch (params_.spec.lr) {
    case LrRule::kLinear:
      s.lr_factor = r;
      break;
    case LrRule::kSqrt:
      s.lr_factor = std::sqrt(r);
      break;
    case LrRule::kNone:
      s.lr_factor = 1.0;
      break;
  }
  return s;
}

int64_t ResizeSchedule::ScaledBatchSize(int64_t base, int bucket) const {
  return Scaling(base, bucket).batch_size;
}

double ResizeSchedule::LrFactor(int64_t base, int bucket) const {
  return Scaling(base, bucket).lr_factor;
}

std::vector<int64_t> ResizeSchedule::UpgradeQuotas(const std::vector<int64_t>& occupancy) const {
  const int top = num_buckets() - 1;
  std::vector<int64_t> quota(num_buckets(), 0);
  if (params_.spec.mode == ResizeMode::kExhaustive) {
    for (int b = 0; b < top; ++b) {
      if (occupancy[b] == 0) continue;
      quota[b] = std::min(upgrades_per_epoch_, occupancy[b]);
      break;
    }
    return quota;
  }
  int64_t eligible = 0;
  for (int b = 0; b < top; ++b) eligible += occupancy[b];
  if (eligible == 0) return quota;
  const int64_t total = std::min(upgrades_per_epoch_, eligible);
  // Largest remainder: floor(total x n_b / eligible) each, then one more to the largest
  // remainders; ties go to the smaller bucket (stable sort over ascending buckets).
  std::vector<std::pair<int64_t, int>> remainder;
  int64_t given = 0;
  for (int b = 0; b < top; ++b) {
    auto product = static_cast<__int128>(total) * occupancy[b];
    quota[b] = static_cast<int64_t>(product / eligible);
    remainder.emplace_back(static_cast<int64_t>(product % eligible), b);
    given += quota[b];
  }
  std::stable_sort(remainder.begin(), remainder.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  for (int64_t i = 0; i < total - given; ++i) ++quota[remainder[i].second];
  return quota;
}

Status ResizeSchedule::Advance(int epoch, std::vector<uint8_t>* buckets, bool* moved) const {
  const std::vector<int64_t> quota = UpgradeQuotas(CountBuckets(*buckets, num_buckets()));
  *moved = std::any_of(quota.begin(), quota.end(), [](int64_t q) { return q > 0; });
  if (!*moved) return Status::Ok();
  const BucketLists lists = ListByBucket(*buckets, num_buckets());
  std::vector<int64_t> chosen;
  // Top down, so a sample moved into bucket b + 1 is never a candidate of b + 1 as well.
  for (int b = num_buckets() - 2; b >= 0; --b) {
    if (quota[b] == 0) continue;
    chosen.clear();
    UpgradeContext ctx{
        DeriveSeed(params_.seed, {internal::kUpgradeStream, static_cast<uint64_t>(epoch),
                                  static_cast<uint64_t>(b)}),
        epoch, b};
    params_.policy->SelectUpgrades(ctx, lists.Of(b), static_cast<size_t>(quota[b]), &chosen);
    if (chosen.size() != static_cast<size_t>(quota[b]))
      return InternalError(
          "resize schedule: upgrade policy '{}' chose {} samples of bucket {} "
          "after epoch {}, expected {}",
          params_.policy->Name(), chosen.size(), b, epoch, quota[b]);
    for (int64_t s : chosen) {
      if (s < 0 || s >= params_.num_samples || (*buckets)[s] != b)
        return InternalError(
            "resize schedule: upgrade policy '{}' chose sample {} after epoch "
            "{}, which is not (or twice) in bucket {}",
            params_.policy->Name(), s, epoch, b);
      (*buckets)[s] = static_cast<uint8_t>(b + 1);
    }
  }
  return Status::Ok();
}

Result<std::vector<uint8_t>> ResizeSchedule::BucketsAt(int epoch) const {
  if (epoch < 0 || epoch >= params_.total_epochs)
    return OutOfRangeError("resize schedule: epoch {} is outside the run's epochs [0, {})", epoch,
                           params_.total_epochs);
  std::lock_guard<std::mutex> lock(mu_);
  if (epoch < cached_epoch_) {  // going back: replay from the start
    cached_.assign(cached_.size(), 0);
    cached_epoch_ = 0;
    cached_settled_ = false;
  }
  while (cached_epoch_ < epoch) {
    if (cached_settled_) {
      cached_epoch_ = epoch;
      break;
    }
    bool moved = false;
    Status s = Advance(cached_epoch_, &cached_, &moved);
    if (!s.ok()) {
      cached_.assign(cached_.size(), 0);
      cached_epoch_ = 0;
      cached_settled_ = false;
      BC_LOG(Error, Sched, "{}", s.message());
      return s;
    }
    cached_settled_ = !moved;
    ++cached_epoch_;
  }
  return cached_;
}

EpochSummary ResizeSchedule::Summarize(int epoch, const std::vector<uint8_t>& buckets) const {
  const int k = num_buckets();
  EpochSummary s;
  s.epoch = epoch;
  s.phase = Phase(epoch);
  s.occupancy = CountBuckets(buckets, k);
  s.trained.assign(k, 0);
  if (s.phase == EpochPhase::kFinal) {
    s.trained[k - 1] = params_.num_samples;
  } else if (params_.spec.mode == ResizeMode::kMixed) {
    s.trained = s.occupancy;
  } else {
    for (int b = 0; b < k; ++b)
      if (s.occupancy[b] > 0) {
        s.trained[b] = s.occupancy[b];
        break;
      }
  }
  double pixels = 0.0;
  const double full = full_size();
  for (int b = 0; b < k; ++b) {
    if (s.trained[b] == 0) continue;
    s.samples_covered += s.trained[b];
    int64_t batch = ScaledBatchSize(params_.base_batch_size, b);
    s.steps += (s.trained[b] + batch - 1) / batch;
    double side = sizes_[b] / full;
    pixels += static_cast<double>(s.trained[b]) * side * side;
  }
  s.relative_work = pixels / static_cast<double>(params_.num_samples);
  return s;
}

Result<EpochPlan> ResizeSchedule::PlanEpoch(int epoch) const {
  BC_ASSIGN_OR_RETURN(std::vector<uint8_t> buckets, BucketsAt(epoch));
  EpochPlan plan;
  plan.summary = Summarize(epoch, buckets);
  const BucketLists lists = ListByBucket(buckets, num_buckets());
  const bool final_phase = plan.summary.phase == EpochPhase::kFinal;
  plan.buckets.resize(num_buckets());
  for (int b = 0; b < num_buckets(); ++b) {
    BucketEpoch& be = plan.buckets[b];
    be.scaling = Scaling(params_.base_batch_size, b);
    be.occupancy = plan.summary.occupancy[b];
    if (plan.summary.trained[b] == 0) continue;
    if (final_phase) {
      be.samples.resize(static_cast<size_t>(params_.num_samples));
      std::iota(be.samples.begin(), be.samples.end(), int64_t{0});
    } else {
      auto of = lists.Of(b);
      be.samples.assign(of.begin(), of.end());
    }
    SeededRng rng(DeriveSeed(params_.seed, {internal::kShuffleStream, static_cast<uint64_t>(epoch),
                                            static_cast<uint64_t>(b)}));
    rng.Shuffle(std::span<int64_t>(be.samples));
  }
  return plan;
}

Result<std::vector<ProducerBatch>> ResizeSchedule::ProducerBatches(int epoch,
                                                                   int64_t producer_base) const {
  if (producer_base < 0)
    return InvalidArgumentError("resize schedule: producer batch size must be >= 0, got {}",
                                producer_base);
  if (producer_base == 0) producer_base = params_.base_batch_size;
  BC_ASSIGN_OR_RETURN(EpochPlan plan, PlanEpoch(epoch));
  // One label per producer batch; the k-th label of bucket b takes b's k-th chunk.
  std::vector<int> labels;
  std::vector<int64_t> chunk(num_buckets(), 0);
  for (int b = 0; b < num_buckets(); ++b) {
    chunk[b] = ProducerChunk(producer_base, b);
    int64_t n = static_cast<int64_t>(plan.buckets[b].samples.size());
    labels.insert(labels.end(), static_cast<size_t>((n + chunk[b] - 1) / chunk[b]), b);
  }
  if (params_.spec.mode == ResizeMode::kMixed) {
    SeededRng rng(
        DeriveSeed(params_.seed, {internal::kInterleaveStream, static_cast<uint64_t>(epoch)}));
    rng.Shuffle(std::span<int>(labels));
  }
  std::vector<ProducerBatch> out;
  out.reserve(labels.size());
  std::vector<size_t> next(num_buckets(), 0);
  for (int b : labels) {
    const auto& samples = plan.buckets[b].samples;
    size_t begin = next[b];
    size_t end = std::min(samples.size(), begin + static_cast<size_t>(chunk[b]));
    next[b] = end;
    ProducerBatch pb;
    pb.bucket = b;
    pb.image_size = sizes_[b];
    pb.batch_scale = plan.buckets[b].scaling.batch_scale;
    pb.lr_factor = plan.buckets[b].scaling.lr_factor;
    pb.samples.assign(samples.begin() + static_cast<ptrdiff_t>(begin),
                      samples.begin() + static_cast<ptrdiff_t>(end));
    out.push_back(std::move(pb));
  }
  return out;
}

int64_t ResizeSchedule::ProducerChunk(int64_t producer_base, int bucket) const {
  const auto full = static_cast<unsigned __int128>(full_size());
  const auto side = static_cast<unsigned __int128>(sizes_[static_cast<size_t>(bucket)]);
  const auto chunk = static_cast<int64_t>(static_cast<unsigned __int128>(producer_base) * full *
                                          full / (side * side));
  if (params_.carve_unit <= 0) return chunk;
  const int64_t unit = ScaledBatchSize(params_.carve_unit, bucket);
  return chunk >= unit ? chunk - chunk % unit : chunk;
}

int64_t ResizeSchedule::ConsumerBatches(const EpochSummary& summary, int64_t producer_base,
                                        int64_t consumer_base, bool scaled_batches) const {
  if (producer_base <= 0) producer_base = params_.base_batch_size;
  int64_t batches = 0;
  for (int b = 0; b < num_buckets() && b < static_cast<int>(summary.trained.size()); ++b) {
    const int64_t n = summary.trained[static_cast<size_t>(b)];
    if (n == 0) continue;
    const int64_t chunk = ProducerChunk(producer_base, b);
    const int64_t scaled = scaled_batches ? ScaledBatchSize(consumer_base, b) : consumer_base;
    const int64_t full = n / chunk, rest = n % chunk;
    batches += full * ((chunk + scaled - 1) / scaled) + (rest + scaled - 1) / scaled;
  }
  return batches;
}

Result<std::vector<EpochSummary>> ResizeSchedule::Summaries() const {
  std::vector<uint8_t> buckets(static_cast<size_t>(params_.num_samples), 0);
  std::vector<EpochSummary> out;
  bool moved = true;
  for (int e = 0; e < params_.total_epochs; ++e) {
    out.push_back(Summarize(e, buckets));
    if (moved && e + 1 < params_.total_epochs) BC_RETURN_IF_ERROR(Advance(e, &buckets, &moved));
  }
  return out;
}

}  // namespace batchcast::schedule
