// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Who receives which positions: the second small policy a front door gives
// producer::Producer (the first, where batches come from, is feed.h). All of them run in the
// Producer's one epoch loop (epoch_loop.h):
//
//   Local      every admitted consumer of this node receives every position; joiners are
//              admitted by producer::Admission (late join with a replay, resume replays);
//   Shard      the MPI Runtime's mode=shard: position k is global batch k of T x b samples,
//              cut once by the one shard planner (shm::ShardTailPart, docs/data-plane.md
//              "Sharding") into the parts of this node's trainers, each published as its
//              own slot to that trainer alone; every trainer attaches before the stream;
//   Replicate  across nodes (exchange_feed.h): every node publishes every position, decoded
//              in shares and exchanged; joiners start at the next epoch, and the node
//              leaders agree, on the exchange, when the stream ends.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "batchcast/options.h"
#include "batchcast/status.h"
#include "producer/admission.h"
#include "producer/feed.h"
#include "producer/slot_writer.h"
#include "transport/shm/ring_leader.h"

namespace batchcast::producer {

// What a distribution works with (owned by the Producer).
struct ProducerParts {
  shm::RingLeader* ring = nullptr;
  SlotWriter* writer = nullptr;
  Admission* admission = nullptr;
  Feed* feed = nullptr;
  std::string who;
};

class Distribution {
 public:
  virtual ~Distribution() = default;
  virtual const char* name() const = 0;  // "local", "shard", "replicate"
  // Options the feed plans with (shard: the plan's producer batch is the global batch).
  virtual void PlanOptions(uint32_t max_consumer_batch, Options* options) const {}
  // Samples one slot holds (the feed plan's producer batch, or one trainer's part).
  virtual int64_t SlotSamples(const FeedPlan& plan) const { return plan.producer_batch; }
  // Slots published per position (one per local trainer in shard mode): multiplies the
  // ring's prefetch window (RingSlots).
  virtual int PartsPerPosition() const { return 1; }
  // Samples per epoch as consumers are told (they derive their batches per epoch from it).
  virtual uint64_t EpochSamples(const FeedPlan& plan) const {
    return static_cast<uint64_t>(plan.num_samples);
  }
  // Whether late joiners can be caught up by a replay (else they start at the next epoch).
  virtual bool late_join() const { return true; }
  // The first position of a resumed stream (options start_epoch / start_batch).
  virtual int64_t FirstPosition(const Options& options, int64_t producer_batch) const;

  virtual void Attach(const ProducerParts& parts) { parts_ = parts; }
  // Before the first position: `joined` is this node's start (the expected consumers joined,
  // or why not; or the stop asked for meanwhile). An error fails the stream.
  virtual Status Start(const Status& joined) { return joined; }
  // Membership before position k of an epoch of bpe positions starting at `first`.
  virtual Result<Settled> Settle(int64_t k, int64_t bpe, int64_t first) = 0;
  // A stop or abort asked for (`stop`, not ok) before a position: returned, it ends the
  // loop at once; a distribution that must stop together with other nodes records it and
  // returns Ok (Settle ends the stream when they agree).
  virtual Status CheckStop(const Status& stop) { return stop; }
  // Produces position p for the consumers in `only` (nullopt: the wait was interrupted).
  virtual Result<std::optional<uint64_t>> Produce(const Position& p, uint64_t only,
                                                  const AcquireWait& wait, int64_t next_k) = 0;
  virtual Status EndEpoch(uint64_t epoch) { return parts_.feed->EndEpoch(epoch); }

 protected:
  ProducerParts parts_;
};

// Every admitted consumer receives every position (one node).
std::unique_ptr<Distribution> MakeLocalDistribution();

// The MPI Runtime's shard mode. total_trainers: the job's trainers (the trainers-only
// communicator's size); trainer_index: this node's trainers, world rank -> trainer index.
struct ShardConfig {
  int total_trainers = 0;
  std::map<int, int> trainer_index;
  int node_index = 0;
};
std::unique_ptr<Distribution> MakeShardDistribution(const ShardConfig& config);

// Trainer t's part of global batch `global` under the one shard rule (docs/data-plane.md
// "Sharding"; the consumer-side planner shm::PlanShard cuts the same): a full global batch of
// T x b gives trainer t positions [t*b, (t+1)*b); the epoch's tail of R < T x b samples gives
// every trainer ceil(R/T), trainer t from tail position t*ceil(R/T) on, wrapping to the tail's
// start (shm::ShardTailPart); the wrapped ones, at the part's end, are repeats.
struct ShardPart {
  std::vector<int64_t> ids;
  uint32_t repeats = 0;
};
ShardPart ShardPartOf(std::span<const int64_t> global, uint32_t batch_size, int trainers, int t);

}  // namespace batchcast::producer
