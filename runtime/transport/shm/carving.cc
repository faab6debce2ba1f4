// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/shm/carving.h"

#include <algorithm>

#include "core/random.h"
#include "transport/shm/segment.h"

namespace batchcast::shm {

namespace {
uint32_t FillRepeats(uint32_t n, uint32_t b) {
  uint32_t k = (n + b - 1) / b;
  return k * b - n;
}
}  // namespace

uint32_t TailNeeded(uint32_t n, uint32_t b, uint32_t flags) {
  if (n == 0 || b == 0) return 0;
  uint32_t tail = FillRepeats(n, b);
  if (flags & kCarveOffset) tail += b - 1;
  return tail;
}

CarvePlan PlanCarves(uint64_t seq, uint32_t n, uint32_t tail, uint32_t b, uint32_t flags,
                     uint64_t order_seed) {
  CarvePlan plan;
  if (n == 0 || b == 0) return plan;
  plan.count = (n + b - 1) / b;
  plan.repeats = plan.count * b - n;
  if ((flags & kCarveOffset) && tail > plan.repeats) {
    uint32_t max_offset = std::min(b - 1, tail - plan.repeats);
    plan.offset = static_cast<uint32_t>(Mix64(HashCombine(order_seed, seq, 0x0ff5e7)) %
                                        (uint64_t(max_offset) + 1));
  }
  plan.order.resize(plan.count);
  for (uint32_t i = 0; i < plan.count; ++i) plan.order[i] = i;
  if (flags & kCarveShuffle) {
    CounterRng rng(HashCombine(order_seed, seq, 0x5ef1e));
    for (uint32_t i = plan.count - 1; i > 0; --i)
      std::swap(plan.order[i], plan.order[rng.Below(uint64_t(i) + 1)]);
  }
  return plan;
}

}  // namespace batchcast::shm
