// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The leader's decode/augment pipeline: reads samples, decodes them (DCT-scaled JPEG
// decode where the target is small), applies the transform chain and collates the result
// straight into a caller-provided batch buffer (a shared-memory slot), using a pool of
// worker threads. Per-sample randomness is a pure function of (seed, epoch, sample index),
// so the output does not depend on thread scheduling or on the number of threads.
//
// Views (docs/pipeline.md, "Views"): one pipeline serves several groups of consumers, each
// with its own core::View (size, crop, flip, normalisation, dtype, layout, draw). Each sample
// is read once and decoded once per distinct DCT scale its groups' own decodes use (one
// decode in the usual case), and every group's output is made from that decode, byte for byte
// what a pipeline of that view alone writes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "batchcast/options.h"
#include "batchcast/status.h"
#include "core/view.h"
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

// The most views a pipeline holds (AddView) and the most groups one batch fills.
inline constexpr int kMaxViews = 64;
inline constexpr int kMaxBatchGroups = 32;

// One group's part of a batch: its view (an id from Pipeline::AddView; 0 = the options' view),
// its output size in this batch (0 = the view's; a progressive-resizing step) and its images,
// samples.size() * GroupLayout(view, image_size).bytes() bytes.
struct GroupTarget {
  int view = 0;
  int image_size = 0;
  void* images = nullptr;
};

// One producer batch to fill.
struct BatchRequest {
  uint64_t epoch = 0;
  std::span<const int64_t> samples;  // dataset indices, in batch order
  int image_size = 0;                // per-batch override of the output size (0 = options)
  void* images = nullptr;            // samples.size() * layout.bytes() bytes
  int64_t* labels = nullptr;         // samples.size() entries
  // Several groups from one decode per sample (docs/pipeline.md, "Views"): when given, the
  // batch's images are these groups' (at most kMaxBatchGroups, distinct buffers) and
  // `images` must be null and `image_size` 0. Empty: the one group {0, image_size, images}.
  std::span<const GroupTarget> groups = {};
};

struct BatchResult {
  // Samples actually written, in order (== samples.size() unless some were skipped).
  // Skipped samples are removed and the rest compacted to the front of the buffers.
  int64_t written = 0;
  std::vector<int64_t> kept;      // dataset indices of the written samples, in order
  std::vector<int64_t> skipped;   // dataset indices skipped under on_bad_sample=skip
  std::vector<std::string> skip_reasons;
  // Wall time per stage summed over samples (for telemetry), nanoseconds. transform_ns is
  // the sum over groups; group_transform_ns has each group's part, in request order (one
  // entry without `groups`). Reads and decodes serve every group: they are not split.
  // read_lock_ns: the part of reading spent waiting for a lock inside the dataset reader
  // (not in read_ns).
  int64_t read_ns = 0, read_lock_ns = 0, decode_ns = 0, transform_ns = 0;
  std::vector<int64_t> group_transform_ns;
  // Image decodes run (cache hits and raw samples decode nothing): one per sample, or one
  // per distinct DCT scale (and stored image) its groups need (docs/pipeline.md, "Views").
  int64_t decodes = 0;
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
  bool dct_scalable = false;                // a JPEG: other scales exist (a cache keeps each)
  size_t bytes() const { return size_t(width) * height * channels; }
};

// Where a pipeline keeps decoded samples from one epoch to the next (producer::DecodedCache
// implements it). Keys are in [0, DecodedCacheKeys(dataset)). A key may hold one decode per
// DCT scale (views of different sizes can need two). Thread-safe: every decode worker calls it.
class DecodedSampleCache {
 public:
  virtual ~DecodedSampleCache() = default;
  // True and *out (packed rows) when `key` is kept at `scale_num` (0: at any scale, the first
  // kept); its pixels stay valid and unchanged until the cache is destroyed.
  virtual bool Find(int64_t key, int scale_num, DecodedSample* out) const = 0;
  // A sample just decoded without error: the cache copies and keeps it (under `key` at
  // sample.scale_num), or declines.
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
  SampleLayout OutputLayout(int image_size = 0) const { return GroupLayout(0, image_size); }
  // The layout of view `view`'s images at `image_size` (0 = the view's size).
  virtual SampleLayout GroupLayout(int view, int image_size = 0) const = 0;

  // Adds a view (docs/pipeline.md, "Views") and returns its id for GroupTarget::view; a view
  // equal to one already added gets that one's id (0: the options' view). Refuses, naming
  // the field, a view this dataset cannot give (size 0 of encoded images, mean/std values
  // that do not match the channels) and more than kMaxViews views. Call it from the thread
  // that starts batches, also while batches are in flight (they keep the views they were
  // started with); views are never removed.
  virtual Result<int> AddView(const core::View& view) = 0;
  // What AddView would refuse, without adding: the layout of `view`'s images at its size, or
  // the refusal naming the field. Thread-safe (a producer checks a view as a consumer joins).
  virtual Result<SampleLayout> CheckView(const core::View& view) const = 0;
  // View `id` (0: the options' own, draw=leader); id must be one AddView returned.
  virtual const core::View& view(int id) const = 0;
  virtual int views() const = 0;
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
  // Bytes sample `index` takes as DecodedSamples, summed over the scales the views added so far
  // need (reads its header, decodes nothing), to size a cache. Call it before the first
  // StartBatch.
  virtual Result<size_t> DecodedBytes(int64_t index) = 0;
};

}  // namespace batchcast::pipeline
