// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The stream definition: position p of the stream is a pure function of
// (seed, epoch, position), so the same options give the same batches on every run and
// a run can resume at any position.
//   epoch e        = p / batches_per_epoch
//   batch k        = p % batches_per_epoch
//   samples        = order_e[k*P, min((k+1)*P, N))
//   order_e        = Fisher-Yates permutation keyed by (seed, e), or identity without shuffle
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "batchcast/options.h"
#include "core/random.h"

namespace batchcast::producer {

class StreamPlan {
 public:
  StreamPlan(int64_t num_samples, int64_t producer_batch, uint64_t seed, bool shuffle)
      : n_(num_samples), p_(producer_batch), seed_(seed), shuffle_(shuffle) {}

  int64_t num_samples() const { return n_; }
  int64_t producer_batch() const { return p_; }
  int64_t BatchesPerEpoch() const { return (n_ + p_ - 1) / p_; }

  // The sample order of epoch e (cached: consecutive calls for one epoch are free).
  const std::vector<int64_t>& EpochOrder(uint64_t epoch) {
    if (epoch != cached_epoch_) {
      if (shuffle_) {
        Permutation(HashCombine(seed_, epoch, 0x5eed), n_, &order_);
      } else {
        order_.resize(static_cast<size_t>(n_));
        for (int64_t i = 0; i < n_; ++i) order_[i] = i;
      }
      cached_epoch_ = epoch;
    }
    return order_;
  }

  // The dataset indices of producer batch k of epoch e.
  std::span<const int64_t> Batch(uint64_t epoch, int64_t k) {
    const auto& order = EpochOrder(epoch);
    int64_t begin = k * p_;
    int64_t end = std::min(n_, begin + p_);
    return std::span<const int64_t>(order.data() + begin, static_cast<size_t>(end - begin));
  }

 private:
  int64_t n_, p_;
  uint64_t seed_;
  bool shuffle_;
  uint64_t cached_epoch_ = ~0ULL;
  std::vector<int64_t> order_;
};

// Resume (options start_epoch / start_batch, docs/launch.md): the producer batch of
// start_epoch that holds the consumers' position, sample start_batch x batch_size (x
// world_size in shard mode; world size unknown counts as 1, which starts earlier, never
// later). A consumer whose position lies later skips to it; one whose position lies earlier
// (a smaller batch size) is told at its first batch that the stream passed it.
inline int64_t ResumeFirstBatch(const Options& o, int64_t producer_batch) {
  if (o.start_batch <= 0 || producer_batch <= 0) return 0;
  const int64_t world = o.mode == "shard" ? std::max(1, o.world_size) : 1;
  return o.start_batch * o.batch_size * world / producer_batch;
}

// The MPI Runtime's multi-node shard mode: its plan's producer batch is the global batch of
// T trainers x batch_size, and batch k of every trainer is its part of global batch k, so a
// trainer position (start_epoch, start_batch) is global batch start_batch.
inline int64_t ResumeFirstGlobalBatch(const Options& o) { return std::max<int64_t>(0, o.start_batch); }

}  // namespace batchcast::producer
