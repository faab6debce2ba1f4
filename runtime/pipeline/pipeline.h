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
  // Wall time per stage summed over samples (for telemetry), nanoseconds.
  int64_t read_ns = 0, decode_ns = 0, transform_ns = 0;
};

// The cause of a bad sample, from its message, for the skip counts: "checksum", "empty",
// "pixel_limit", "format", "jpeg", "png", "raw_size", "read" or "other".
std::string_view BadSampleCause(std::string_view message);

class Pipeline {
 public:
  static Result<std::unique_ptr<Pipeline>> Create(const Options& options,
                                                  std::shared_ptr<data::DatasetReader> reader);
  virtual ~Pipeline() = default;

  // The layout of every output image at `image_size` (0 = the options' size).
  virtual SampleLayout OutputLayout(int image_size = 0) const = 0;
  virtual int threads() const = 0;
  virtual const data::DatasetInfo& dataset() const = 0;

  // Decodes and transforms every sample of `req` into its buffers using all workers;
  // returns when the batch is complete. Thread-compatible: one RunBatch at a time.
  virtual Status RunBatch(const BatchRequest& req, BatchResult* result) = 0;
};

}  // namespace batchcast::pipeline
