// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/shm/carving.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

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

bool CarvesPerProducerBatch(uint32_t flags, uint32_t scale_den) {
  return scale_den != 0 || (flags & (kCarveOffset | kCarveShuffle)) != 0;
}

uint32_t TailNeeded(uint32_t n, uint32_t b, uint32_t flags, uint32_t scale_den) {
  if (n == 0 || b == 0 || !CarvesPerProducerBatch(flags, scale_den)) return 0;
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

ExactCarve PlanExact(uint32_t carried, uint32_t n, uint32_t b, bool last, bool drop_last,
                     bool pad_last) {
  ExactCarve x;
  if (b == 0) return x;
  x.join = carried > 0 ? std::min(b - carried, n) : 0;
  x.joined_batch = carried > 0 && carried + x.join == b;
  x.first = x.join;
  x.count = (n - x.join) / b;
  x.rest_begin = x.first + x.count * b;
  x.rest = n - x.rest_begin;
  // What is left over: the slot's rest, or (a batch still not complete) every carried sample.
  const bool pending_in_slot = carried == 0 || x.joined_batch;
  const uint32_t pending = pending_in_slot ? x.rest : carried + x.join;
  if (!last) {
    x.carry_out = pending;
    return x;
  }
  if (pending == 0) return x;
  if (drop_last) {
    x.dropped = pending;
    return x;
  }
  x.final_size = pad_last ? b : pending;
  x.final_repeats = pad_last ? b - pending : 0;
  x.final_in_place = pending_in_slot && !pad_last;
  return x;
}

uint64_t ExactBatchesPerEpoch(uint64_t n, uint32_t b, bool drop_last) {
  if (b == 0) return 0;
  return drop_last ? n / b : (n + b - 1) / b;
}

std::vector<ShardSegment> PlanShard(uint64_t first, uint32_t n, uint64_t epoch_n, uint32_t b,
                                    uint32_t world, uint32_t rank) {
  std::vector<ShardSegment> out;
  if (b == 0 || world == 0 || n == 0) return out;
  const uint64_t g = uint64_t(world) * b;
  const uint64_t tail_start = epoch_n / g * g;
  const uint64_t end = first + n, body_end = std::min(end, tail_start);
  for (uint64_t j = first / g; j * g < body_end; ++j) {
    const uint64_t start = j * g + uint64_t(rank) * b;
    const uint64_t lo = std::max(start, first), hi = std::min(start + b, body_end);
    if (lo >= hi) continue;
    ShardSegment seg;
    seg.begin = static_cast<uint32_t>(lo - first);
    seg.count = static_cast<uint32_t>(hi - lo);
    seg.whole = lo == start && hi == start + b;
    seg.ends_batch = hi == start + b;
    out.push_back(seg);
  }
  if (end > tail_start) {
    const uint64_t lo = std::max(first, tail_start);
    ShardSegment seg;
    seg.begin = static_cast<uint32_t>(lo - first);
    seg.count = static_cast<uint32_t>(end - lo);
    seg.tail = true;
    out.push_back(seg);
  }
  return out;
}

ShardTail ShardTailPart(uint32_t tail_n, uint32_t b, uint32_t world, uint32_t rank,
                        bool drop_last, bool pad_last) {
  ShardTail t;
  if (tail_n == 0 || drop_last || world == 0) return t;
  t.per = (tail_n + world - 1) / world;
  t.begin = rank * t.per;
  t.size = pad_last ? std::max(b, t.per) : t.per;
  const uint64_t end = uint64_t(t.begin) + t.per;
  const uint64_t wrapped = end > tail_n ? end - std::max<uint64_t>(t.begin, tail_n) : 0;
  t.repeats = static_cast<uint32_t>(wrapped) + (t.size - t.per);
  return t;
}

uint64_t ShardBatchesPerEpoch(uint64_t n, uint32_t b, uint32_t world, bool drop_last) {
  if (b == 0 || world == 0) return 0;
  const uint64_t g = uint64_t(world) * b;
  return n / g + (n % g != 0 && !drop_last ? 1 : 0);
}

}  // namespace batchcast::shm
