// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// What a leader publishes from: anything that fills a producer batch in place given
// the dataset indices. The native pipeline is one source; the Python Producer and test
// sources are others. The leader never copies what a source wrote.
#pragma once

#include <memory>
#include <utility>
#include <vector>

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
  // A fill in two halves, so that a producer can publish one batch while the next one is
  // filled (producer::SlotWriter's look-ahead): Start begins `req` (its buffers stay valid
  // until Finish returns it; req.samples and req.groups may go away when Start returns, so a
  // source that fills later copies them), Finish completes the oldest started one. The
  // default runs Fill inside Start (no overlap); sources that can overlap override all three.
  virtual void Start(const pipeline::BatchRequest& req);
  virtual Status Finish(pipeline::BatchResult* result);
  // True when Start returns before the fill is done (look-ahead is worth a slot).
  virtual bool overlaps() const { return false; }
  // Waits up to timeout_ms for the oldest started fill; true when it is done (Finish will
  // not block).
  virtual bool WaitOldest(int64_t timeout_ms) {
    (void)timeout_ms;
    return true;
  }
  // Nanoseconds the source's workers all had nothing to do, since it was created.
  virtual int64_t idle_ns() const { return 0; }
  // Worker threads the source uses (telemetry: worker utilisation); 0 if not applicable.
  virtual int threads() const { return 0; }

  // Views (docs/pipeline.md "Views through the Producer"): the source's own view as
  // configured (not canonical: its mean and std stay without normalize, since a consumer's
  // partial spec is read over it), or null when it makes one kind of image only (then the
  // two below refuse).
  virtual const core::View* own_view() const { return nullptr; }
  // The layout of `view`'s images, or the refusal naming the field. Thread-safe.
  virtual Result<pipeline::SampleLayout> CheckView(const core::View& view) const;
  // The id of `view` for pipeline::GroupTarget::view (see Pipeline::AddView); the thread
  // that starts fills, also while fills are in flight.
  virtual Result<int> AddView(const core::View& view);

 private:
  // The default Start's outcome, until Finish.
  std::vector<std::pair<Status, pipeline::BatchResult>> started_;
};

// The options' view as a consumer's partial view spec is read over it (ViewFromOptions, with
// the options' mean and std kept when normalize is off, which the canonical form clears, so
// that view(normalize=1) means the leader's mean and std; ImageNet's when those do not parse).
Result<core::View> ViewSpecBase(const Options& options);

// The native decode pipeline as a source.
Result<std::unique_ptr<BatchSource>> MakePipelineSource(const Options& options);

}  // namespace batchcast::producer
