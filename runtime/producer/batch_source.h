// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// What a leader publishes from: anything that fills a producer batch in place given
// the dataset indices. The native pipeline is one source; the Python Producer and test
// sources are others. The leader never copies what a source wrote.
#pragma once

#include <memory>

#include "pipeline/pipeline.h"

namespace batchcast::producer {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t num_samples() const = 0;
  // Largest image layout any batch can have (sizes the ring's slots).
  virtual pipeline::SampleLayout MaxLayout() const = 0;
  virtual pipeline::SampleLayout Layout(int image_size) const = 0;
  // Fills req.images / req.labels for req.samples; see pipeline::Pipeline::RunBatch.
  virtual Status Fill(const pipeline::BatchRequest& req, pipeline::BatchResult* result) = 0;
  // Worker threads the source uses (telemetry: worker utilisation); 0 if not applicable.
  virtual int threads() const { return 0; }
};

// The native decode pipeline as a source.
Result<std::unique_ptr<BatchSource>> MakePipelineSource(const Options& options);

}  // namespace batchcast::producer
