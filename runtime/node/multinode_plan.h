// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Pure arithmetic of the two multi-node modes (docs/multinode.md), shared by the node
// leaders, the tests and the benchmark so that every side computes the same split.
//
// Shard mode: the epoch's global permutation (StreamPlan keyed by (seed, epoch)) is cut
// into global batches of T x b samples (T trainers, batch size b). A global batch of R
// samples is split over the trainers in trainer-index order:
//   q = R / T, r = R % T; trainer t gets count q + (t < r) starting at t*q + min(t, r).
// A full global batch (R = T*b) gives trainer t exactly [t*b, (t+1)*b). The last global
// batch of an epoch may be partial: it is spread as evenly as possible so that every
// trainer takes one step (an exact partial batch; padded to b with reported repeats only
// with pad_last); only when R < T do trainers t >= R get no batch for it.
//
// Replicate mode: node j of N decodes [j*n/N, (j+1)*n/N) of a producer batch of n samples,
// in `chunks` consecutive chunks so that the exchange of chunk c overlaps the decode of
// chunk c+1.
#pragma once

#include <algorithm>
#include <cstdint>

namespace batchcast::node {

struct SampleRange {
  int64_t begin = 0;
  int64_t count = 0;
};

// Trainer t's part of a global batch of `global_samples` samples over `trainers` trainers.
inline SampleRange ShardPart(int64_t global_samples, int trainers, int t) {
  const int64_t q = global_samples / trainers, r = global_samples % trainers;
  return {t * q + std::min<int64_t>(t, r), q + (t < r ? 1 : 0)};
}

// Global batches in an epoch of n samples, T trainers of batch size b.
inline int64_t GlobalBatchesPerEpoch(int64_t n, int trainers, int b) {
  const int64_t g = int64_t(trainers) * b;
  return (n + g - 1) / g;
}

// Node j's share of a producer batch of n samples spread over `nodes` node leaders.
inline SampleRange ReplicateShare(int64_t n, int nodes, int j) {
  const int64_t lo = n * j / nodes, hi = n * (j + 1) / nodes;
  return {lo, hi - lo};
}

// Chunk c of `chunks` of a range (absolute positions in the producer batch).
inline SampleRange ChunkOf(const SampleRange& r, int chunks, int c) {
  const int64_t lo = r.count * c / chunks, hi = r.count * (c + 1) / chunks;
  return {r.begin + lo, hi - lo};
}

}  // namespace batchcast::node
