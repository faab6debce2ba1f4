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

// Tail copies this consumer needs for a producer batch of n samples.
uint32_t TailNeeded(uint32_t n, uint32_t batch_size, uint32_t flags);
CarvePlan PlanCarves(uint64_t seq, uint32_t n, uint32_t tail, uint32_t batch_size,
                     uint32_t flags, uint64_t order_seed);

}  // namespace batchcast::shm
