// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The leader's decode/augment pipeline: reads samples, decodes them (DCT-scaled JPEG
// decode where the target is small), applies the transform chain and collates the result
// straight into a caller-provided batch buffer (a shared-memory slot), using a pool of
// worker threads. Per-sample randomness is a pure function of (seed, epoch, sample index),
// so the output does not depend on thread scheduling or on the number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "batchcast/options.h"
#include "batchcast/status.h"
#include "data/dataset_reader.h"

namespace batchcast::pipeline {

enum class DType : uint32_t { kUint8 = 0, kFloat32 = 1, kInt64 = 2 };
enum class Layout : uint32_t { kCHW = 0, kHWC = 1 };

size_t DTypeSize(DType t);

// Shape and type of one output image.
struct SampleLayout {
  int channels = 0, height = 0, width = 0;
  DType dtype = DType::kUint8;
  Layout layout = Layout::kCHW;
  size_t bytes() const { return size_t(channels) * height * width * DTypeSize(dtype); }
};

// One producer batch to fill.
struct BatchRequest {
  uint64_t epoch = 0;
  std::span<const int64_t> samples;  // dataset indices, in batch order
  int image_size = 0;                // per-batch override of the output size (0 = options)
  void* images = nullptr;            // samples.size() * layout.bytes() bytes
  int64_t* labels = nullptr;         // samples.size() entries
};

struct BatchResult {
  // Samples actually written, in order (== samples.size() unless some were skipped).
  // Skipped samples are removed and the rest compacted to the front of the buffers.
  int64_t written = 0;
  std::vector<int64_t> kept;      // dataset indices of the written samples, in order
  std::vector<int64_t> skipped;   // dataset indices skipped under on_bad_sample=skip
  std::vector<std::string> skip_reasons;
  // Wall time per stage summed over samples (for telemetry), nanoseconds. read_lock_ns: the
  // part of reading spent waiting for a lock inside the dataset reader (not in read_ns).
  int64_t read_ns = 0, read_lock_ns = 0, decode_ns = 0, transform_ns = 0;
  // Decoded-sample cache (0 without one): samples taken from it, samples decoded, and the
  // bytes it holds after this batch.
  int64_t cache_hits = 0, cache_misses = 0, cache_bytes = 0;
};

// The deterministic part of one sample: the whole image decoded (or a raw sample converted to
// the output's channels) at a scale fixed per sample, before any random step (crop box,
// flip). What a DecodedSampleCache keeps; docs/pipeline.md, "Decoded-sample cache".
struct DecodedSample {
  int stored_width = 0, stored_height = 0;  // the image as stored: the frame crop boxes use
  int scale_num = 8;                        // decoded at scale_num/8 (kScaleDenom)
  int width = 0, height = 0, channels = 0;  // of `pixels`, HWC uint8
  const uint8_t* pixels = nullptr;
  size_t stride = 0;                        // bytes per row of `pixels`
  size_t bytes() const { return size_t(width) * height * channels; }
};

// Where a pipeline keeps decoded samples from one epoch to the next (producer::DecodedCache
// implements it). Keys are in [0, DecodedCacheKeys(dataset)). Thread-safe: every decode
// worker calls it.
class DecodedSampleCache {
 public:
  virtual ~DecodedSampleCache() = default;
  // True and *out (packed rows) when `key` is kept; its pixels stay valid and unchanged
  // until the cache is destroyed.
  virtual bool Find(int64_t key, DecodedSample* out) const = 0;
  // A sample just decoded without error: the cache copies and keeps it, or declines.
  virtual void Offer(int64_t key, const DecodedSample& sample) = 0;
  // Bytes held.
  virtual int64_t bytes() const = 0;
};

// Keys a cache needs for `dataset`: one per sample and offline resize bucket.
int64_t DecodedCacheKeys(const data::DatasetInfo& dataset);

// The cause of a bad sample, from its message, for the skip counts: "checksum", "empty",
// "pixel_limit", "format", "jpeg", "png", "raw_size", "read" or "other".
std::string_view BadSampleCause(std::string_view message);

class Pipeline {
 public:
  // With `cache`, every sample goes through its deterministic part (DecodedSample) once per
  // cache key and the random steps run on that, hit or miss: the output bytes do not depend
  // on what the cache holds (docs/pipeline.md, "Decoded-sample cache").
  static Result<std::unique_ptr<Pipeline>> Create(
      const Options& options, std::shared_ptr<data::DatasetReader> reader,
      std::shared_ptr<DecodedSampleCache> cache = nullptr);
  virtual ~Pipeline() = default;

  // The layout of every output image at `image_size` (0 = the options' size).
  virtual SampleLayout OutputLayout(int image_size = 0) const = 0;
  virtual int threads() const = 0;
  virtual const data::DatasetInfo& dataset() const = 0;

  // Decodes and transforms every sample of `req` into its buffers using all workers;
  // returns when the batch is complete. Thread-compatible: one caller at a time.
  Status RunBatch(const BatchRequest& req, BatchResult* result);

  // Starts `req` and returns at once: the workers take its samples as soon as the batches
  // started before it have none left to take, so there is no idle gap between batches.
  // The buffers must stay valid and unread until FinishBatch returns it (req.samples is
  // copied).
  virtual void StartBatch(const BatchRequest& req) = 0;
  // Waits for the oldest started batch and completes it as RunBatch does (bad-sample
  // policy, compaction, result). kFailedPrecondition when no batch was started.
  virtual Status FinishBatch(BatchResult* result) = 0;
  // Batches started and not yet finished.
  virtual int batches_in_flight() const = 0;
  // Waits up to timeout_ms for the oldest started batch's samples; true when they are all
  // done (or none was started).
  virtual bool WaitOldest(int64_t timeout_ms) = 0;
  // Nanoseconds every worker had nothing to do, since the pipeline was created.
  virtual int64_t idle_ns() const = 0;
  // Bytes sample `index` takes as a DecodedSample (reads its header, decodes nothing), to size
  // a cache. Call it before the first StartBatch.
  virtual Result<size_t> DecodedBytes(int64_t index) = 0;
};

}  // namespace batchcast::pipeline
