// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "producer/distribution.h"

#include <algorithm>

#include "core/errors.h"
#include "core/log.h"
#include "producer/stream_plan.h"
#include "transport/shm/carving.h"

namespace batchcast::producer {

int64_t Distribution::FirstPosition(const Options& options, int64_t producer_batch) const {
  return ResumeFirstBatch(options, producer_batch);
}

namespace {

class LocalDistribution final : public Distribution {
 public:
  const char* name() const override { return "local"; }
  Result<Settled> Settle(int64_t k, int64_t bpe, int64_t first) override {
    // A stream that starts mid-epoch (resume) admits its first joiners at its first position.
    return parts_.admission->Settle(k - first, bpe < 0 ? bpe : bpe - first);
  }
  Result<std::optional<uint64_t>> Produce(const Position& p, uint64_t only,
                                          const AcquireWait& wait, int64_t next_k) override {
    return parts_.feed->Produce(p, {}, only, wait, next_k);
  }
};

class ShardDistribution final : public Distribution {
 public:
  explicit ShardDistribution(const ShardConfig& config) : config_(config) {}
  const char* name() const override { return "shard"; }
  bool late_join() const override { return false; }
  void PlanOptions(uint32_t max_b, Options* o) const override {
    // The stream plan's producer batch is the global batch T x b; a slot holds one part.
    o->producer_batch = config_.total_trainers * static_cast<int>(max_b);
  }
  int64_t SlotSamples(const FeedPlan& plan) const override { return plan.max_consumer_batch; }
  int PartsPerPosition() const override {
    return std::max<int>(1, static_cast<int>(config_.trainer_index.size()));
  }
  // Consumers derive their batches per epoch from it: one part per global batch.
  uint64_t EpochSamples(const FeedPlan& plan) const override {
    const int64_t g = int64_t(config_.total_trainers) * plan.max_consumer_batch;
    return uint64_t((plan.num_samples + g - 1) / g) * plan.max_consumer_batch;
  }
  // Batch k of every trainer is its part of global batch k.
  int64_t FirstPosition(const Options& o, int64_t) const override {
    return std::max<int64_t>(0, o.start_batch);
  }

  Status Start(const Status& joined) override {
    BC_RETURN_IF_ERROR(joined);
    if (config_.total_trainers <= 0)
      return InvalidArgumentError("{}: shard mode needs the number of trainers", parts_.who);
    // Everyone attached now is admitted at once: the parts are fixed from here on.
    parts_.admission->AdmitJoiners(parts_.ring->next_seq(), 0, 1);
    for (const shm::MemberInfo& m : parts_.ring->Members()) {
      auto it = config_.trainer_index.find(m.rank);
      if (it == config_.trainer_index.end()) {
        BC_LOG(Warn, Node, "{}: {} is not one of this node's trainers; it gets nothing in shard "
               "mode", parts_.who, m.Describe());
        continue;
      }
      bits_[it->second] = shm::RingLeader::MemberBit(m.id);
    }
    for (const auto& [rank, t] : config_.trainer_index)
      if (!bits_.count(t))
        return FailedPreconditionError(
            "{}: trainer {} (rank {}) did not attach to its node leader; every trainer must "
            "attach before the stream starts in shard mode", parts_.who, t, rank);
    return Status::Ok();
  }

  // No late join: the parts of a global batch are fixed when the stream starts. A consumer
  // joining later is told so in the leader's log once and receives nothing.
  Result<Settled> Settle(int64_t k, int64_t, int64_t) override {
    if (parts_.ring->CountMembers(shm::MemberState::kActive) == 0) return Settled{Step::kIdle, 0};
    for (const shm::MemberInfo& m : parts_.ring->Members()) {
      const uint64_t bit = shm::RingLeader::MemberBit(m.id);
      if (m.state != shm::MemberState::kJoining || (warned_ & bit) != 0) continue;
      warned_ |= bit;
      BC_LOG(Warn, Node, "{} (shard): {} joined after the stream started; shard mode has no "
             "late join (every trainer attaches before the first batch), so it receives "
             "nothing; use mode=replicate or one node for late joiners", parts_.who,
             m.Describe());
    }
    return Settled{Step::kProduce, 0};
  }

  Result<std::optional<uint64_t>> Produce(const Position& p, uint64_t, const AcquireWait&,
                                          int64_t) override {
    const std::span<const int64_t> global = parts_.feed->Samples(p);
    const uint32_t b = parts_.ring->config().max_consumer_batch;
    uint64_t receivers = 0;
    for (const auto& [t, bit] : bits_) {
      const ShardPart part = ShardPartOf(global, b, config_.total_trainers, t);
      if (part.ids.empty()) continue;
      Position at = p;
      at.part_repeats = part.repeats;
      // Every part of a position or none: a wait is never interrupted half-way.
      BC_ASSIGN_OR_RETURN(std::optional<uint64_t> got,
                          parts_.feed->Produce(at, part.ids, bit, AcquireWait{}, -1));
      receivers |= got.value_or(0);
    }
    return std::optional<uint64_t>(receivers);
  }

  // This node reads only its trainers' shard: an epoch whose shard held no good sample ends
  // the stream with an error naming the epoch and the shard (its trainers would have nothing
  // to train on while the others train, or every trainer waits forever).
  Status EndEpoch(uint64_t epoch) override {
    std::string ranks;
    for (const auto& [rank, t] : config_.trainer_index)
      ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", rank);
    return parts_.feed->EndEpoch(epoch).WithContext(fmt::format(
        "node {}'s shard (trainers at world ranks {})", config_.node_index, ranks));
  }

 private:
  ShardConfig config_;
  std::map<int, uint64_t> bits_;  // local trainer index -> member bit
  uint64_t warned_ = 0;           // late joiners already warned about
};

}  // namespace

ShardPart ShardPartOf(std::span<const int64_t> global, uint32_t b, int trainers, int t) {
  ShardPart part;
  const uint64_t r = global.size();
  if (b == 0 || trainers <= 0 || r == 0) return part;
  if (r == uint64_t(trainers) * b) {
    part.ids.assign(global.begin() + int64_t(t) * b, global.begin() + int64_t(t + 1) * b);
    return part;
  }
  const shm::ShardTail tail = shm::ShardTailPart(static_cast<uint32_t>(r), b,
                                                 static_cast<uint32_t>(trainers),
                                                 static_cast<uint32_t>(t), false, false);
  for (uint32_t i = 0; i < tail.per; ++i) part.ids.push_back(global[(tail.begin + i) % r]);
  part.repeats = tail.repeats;
  return part;
}

std::unique_ptr<Distribution> MakeLocalDistribution() {
  return std::make_unique<LocalDistribution>();
}

std::unique_ptr<Distribution> MakeShardDistribution(const ShardConfig& config) {
  return std::make_unique<ShardDistribution>(config);
}

}  // namespace batchcast::producer
