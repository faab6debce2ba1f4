// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/shm/carving.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/random.h"
#include "transport/shm/segment.h"

namespace batchcast::shm {

namespace {
uint32_t FillRepeats(uint32_t n, uint32_t b) {
  uint32_t k = (n + b - 1) / b;
  return k * b - n;
}
}  // namespace

uint32_t ScaledConsumerBatch(uint32_t b, uint32_t num, uint32_t den, uint32_t cap) {
  if (den == 0 || b == 0) return b;
  uint64_t scaled = std::max<uint64_t>(uint64_t(b) * num / den, b);
  if (cap > 0) scaled = std::min<uint64_t>(scaled, std::max(cap, b));
  return static_cast<uint32_t>(std::min<uint64_t>(scaled, UINT32_MAX));
}

float ConsumerLrFactor(uint32_t b, uint32_t scaled, uint32_t rule, float given) {
  if (b == 0) return given;
  double r = double(scaled) / double(b);
  switch (rule) {
    case kLrLinear: return static_cast<float>(r);
    case kLrSqrt: return static_cast<float>(std::sqrt(r));
    case kLrNone: return 1.0f;
    default: return given;
  }
}

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
