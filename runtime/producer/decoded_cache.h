// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The leader's decoded-sample cache (option `cache`, PRESTO's application-level cache): the
// first epoch keeps each sample as the deterministic part of the pipeline leaves it
// (pipeline::DecodedSample), the later epochs take it from here and run only the random steps.
//
// Policy: admit until the budget is full, never evict. Epochs read every sample once in a
// new random order, so a sample's next use is a whole epoch away whatever was used last; LRU
// would evict each sample just before its next use once the dataset exceeds the budget (the
// cyclic-scan worst case), while keeping the first `budget` bytes serves that fraction of
// every later epoch at no bookkeeping cost. Lookups are lock-free (one atomic pointer per
// key); entries never change once published, so a hit needs no lock and no reference count.
//
// One decode serves every view (docs/pipeline.md, "Views"): a key holds the whole image at
// each DCT scale the views' own decodes need (usually one; views of different sizes can need
// two), as a chain of entries appended lock-free and never changed.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "batchcast/options.h"
#include "pipeline/pipeline.h"

namespace batchcast::producer {

class DecodedCache final : public pipeline::DecodedSampleCache {
 public:
  // `budget` bytes of pixels and entry headers, for keys [0, num_keys); `what` names the
  // dataset in the summary it logs when destroyed.
  DecodedCache(int64_t budget, int64_t num_keys, std::string what);
  ~DecodedCache() override;
  DecodedCache(const DecodedCache&) = delete;
  DecodedCache& operator=(const DecodedCache&) = delete;

  bool Find(int64_t key, int scale_num, pipeline::DecodedSample* out) const override;
  // At any scale (the first kept).
  bool Find(int64_t key, pipeline::DecodedSample* out) const { return Find(key, 0, out); }
  void Offer(int64_t key, const pipeline::DecodedSample& sample) override;
  int64_t bytes() const override { return bytes_.load(std::memory_order_relaxed); }

  int64_t budget() const { return budget_; }
  int64_t entries() const { return entries_.load(std::memory_order_relaxed); }
  // Samples offered and not kept because the budget was full.
  int64_t declined() const { return declined_.load(std::memory_order_relaxed); }
  // Bytes one entry of `pixel_bytes` pixels takes from the budget.
  static int64_t EntryBytes(size_t pixel_bytes);

 private:
  struct Entry;
  const int64_t budget_;
  const int64_t num_keys_;
  const std::string what_;
  std::unique_ptr<std::atomic<Entry*>[]> slots_;
  std::atomic<int64_t> bytes_{0}, entries_{0}, declined_{0};
  mutable std::atomic<int64_t> hits_{0}, lookups_{0};
};

// Checks `cache`'s budget against `pipeline`'s dataset before the first batch: refuses a
// budget under one producer batch of decoded samples (it would hold almost nothing) and warns
// when it holds under a quarter of the dataset; both messages say what to set. Sizes are
// estimated from the headers of up to 16 samples spread over the dataset.
Status CheckCacheBudget(const Options& options, pipeline::Pipeline& pipeline,
                        const DecodedCache& cache);

}  // namespace batchcast::producer
