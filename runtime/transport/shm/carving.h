// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Carving consumer batches out of a producer batch, as contiguous views.
//
// A producer batch holds n distinct samples at positions [0, n) and `tail` copies after
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

// Tail copies this consumer needs for a producer batch of n samples.
uint32_t TailNeeded(uint32_t n, uint32_t batch_size, uint32_t flags);
CarvePlan PlanCarves(uint64_t seq, uint32_t n, uint32_t tail, uint32_t batch_size,
                     uint32_t flags, uint64_t order_seed);

}  // namespace batchcast::shm
