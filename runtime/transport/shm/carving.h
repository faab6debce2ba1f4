// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Carving consumer batches out of producer batches.
//
// Exact carving (the default, like a DataLoader): a consumer's batches run through the
// epoch's samples in order, across producer batches. Most batches are contiguous views of
// one slot; a batch that spans two producer batches is joined by the consumer (the samples
// of the first are copied when it is done with it, at most b-1 per producer batch), and the
// epoch ends with one partial batch of N mod b samples, dropped with drop_last or padded to b
// with repeats of its own samples with pad_last (counted). PlanExact is that arithmetic. The
// leader writes no tail for these consumers.
//
// Per-producer-batch carving (carve_offset / carve_shuffle, and progressive resizing, whose
// batch size changes with each producer batch's image size): a producer batch holds n distinct samples at positions [0, n) and `tail` copies after
// them (position n + j holds sample j mod n). A consumer with batch size b and offset o
// takes k = ceil(n / b) carves [o + i*b, o + (i+1)*b): it sees every sample once
// (samples [0, o) through their tail copies) plus r = k*b - n <= b-1 fill repeats.
// Both sides compute the same plan from (seq, n, tail, b, flags, order_seed), so the
// leader only writes the tail and the consumer needs no message.
#pragma once

#include <cstdint>
#include <vector>

namespace batchcast::shm {

struct CarvePlan {
  uint32_t offset = 0;           // o
  uint32_t count = 0;            // k carves
  uint32_t repeats = 0;          // r fill repeats in this producer batch
  std::vector<uint32_t> order;   // carve indices in the order they are handed out
};

// Progressive resizing: a consumer's batch size for a producer batch whose images are
// scaled by num/den in pixel count (W_full^2 / W^2): max(b, floor(b x num / den)), capped
// at max(cap, b) when cap > 0. den == 0 means no scaling. Same arithmetic as
// schedule::ResizeSchedule::ScaledBatchSize, so leader and consumers agree.
uint32_t ScaledConsumerBatch(uint32_t b, uint32_t num, uint32_t den, uint32_t cap);

// How a consumer's LR factor follows its scaled batch (SlotDesc::lr_rule).
enum LrRuleCode : uint32_t { kLrGiven = 0, kLrLinear = 1, kLrSqrt = 2, kLrNone = 3 };
// The LR factor for a consumer that carves `scaled` samples where it asked for `b`;
// kLrGiven returns `given` (the leader's factor for the producer batch).
float ConsumerLrFactor(uint32_t b, uint32_t scaled, uint32_t rule, float given);

// Whether a consumer with these ConsumerFlags carves each producer batch on its own (with
// fill repeats), given the batch's scaling (scale_den != 0: progressive resizing).
bool CarvesPerProducerBatch(uint32_t flags, uint32_t scale_den);
// Tail copies this consumer needs for a producer batch of n samples (0 for exact carving).
uint32_t TailNeeded(uint32_t n, uint32_t batch_size, uint32_t flags, uint32_t scale_den);

// Exact carving of one producer batch of n samples for a consumer of batch size b that
// carries `carried` (< b) samples of the epoch from the producer batches before it.
// The consumer, in this order: appends slot samples [0, join) to its carried ones; hands
// out the joined batch when joined_batch; hands out `count` in-place batches of b starting
// at `first`; then, unless final_in_place, appends [rest_begin, rest_begin + rest) to its
// carried samples. When `last` (the epoch's last producer batch) what remains is the
// epoch's partial batch: final_size samples (0: none), in place at rest_begin or from the
// carried samples padded with final_repeats repeats; `dropped` with drop_last.
struct ExactCarve {
  uint32_t join = 0;
  bool joined_batch = false;
  uint32_t first = 0, count = 0;
  uint32_t rest_begin = 0, rest = 0;
  uint32_t final_size = 0;
  bool final_in_place = false;
  uint32_t final_repeats = 0;
  uint32_t carry_out = 0;  // samples carried into the next producer batch (0 when last)
  uint32_t dropped = 0;
};
ExactCarve PlanExact(uint32_t carried, uint32_t n, uint32_t b, bool last, bool drop_last,
                     bool pad_last);
// A consumer's batches in an epoch of n samples under exact carving.
uint64_t ExactBatchesPerEpoch(uint64_t n, uint32_t b, bool drop_last);

// Sharding (mode=shard, world size W > 1; docs/data-plane.md "Sharding"): rank r of W takes
// a disjoint part of the epoch's order, cut like a DataLoader over a DistributedSampler.
// The epoch's N samples form global batches of W x b; rank r's batch j is epoch positions
// [j*W*b + r*b, +b). The tail after the last full global batch (R < W x b samples) gives
// every rank the same count, ceil(R/W) (rank r from tail position r*ceil(R/W) on; positions
// past R wrap to the tail's start and are reported repeats), so every rank takes the same
// number of steps; drop_last drops the tail, pad_last pads each rank's part to b with
// repeats of its own samples.
//
// One contiguous piece of a producer batch that covers epoch positions [first, first + n),
// in slot positions: a whole batch of this rank (in place), part of a batch that spans
// producer batches (joined; ends_batch when it completes it), or part of the tail.
struct ShardSegment {
  uint32_t begin = 0, count = 0;
  bool whole = false, ends_batch = false, tail = false;
};
std::vector<ShardSegment> PlanShard(uint64_t first, uint32_t n, uint64_t epoch_n, uint32_t b,
                                    uint32_t world, uint32_t rank);
// Rank r's part of a tail of R samples: tail positions begin + i (mod R) for i < per,
// then (pad_last) its own samples again up to b. size 0: nothing (R == 0 or drop_last).
struct ShardTail {
  uint32_t begin = 0, per = 0, size = 0, repeats = 0;
};
ShardTail ShardTailPart(uint32_t tail_n, uint32_t b, uint32_t world, uint32_t rank,
                        bool drop_last, bool pad_last);
uint64_t ShardBatchesPerEpoch(uint64_t n, uint32_t b, uint32_t world, bool drop_last);
CarvePlan PlanCarves(uint64_t seq, uint32_t n, uint32_t tail, uint32_t batch_size,
                     uint32_t flags, uint64_t order_seed);

}  // namespace batchcast::shm
