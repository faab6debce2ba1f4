// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Stages the leader runs on each producer batch after the pipeline and before the slot is
// completed (fill-repeat tail, descriptor) and published: a model stage (docs/model-stage.md)
// reads the batch's images or an earlier stage's output and writes its output straight into
// one of the slot's named tensors, once per producer batch whatever the number of consumers.
//
// The producer core knows stages only through this interface. The LibTorch model stage
// (runtime/stage/, built with BATCHCAST_TORCH) registers its factory with SetStageFactory, so
// the leader library never depends on LibTorch; without a factory, option 'stage' is refused
// naming the cause and the fix.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "batchcast/status.h"
#include "pipeline/pipeline.h"
#include "producer/slot_layout.h"

namespace batchcast::producer {

// One producer batch as a stage sees it: the slot, its layout (named tensors and offsets),
// the batch's image layout and the n distinct samples at positions [0, n).
struct StageSlot {
  uint8_t* data = nullptr;
  const SlotLayout* layout = nullptr;
  pipeline::SampleLayout images;
  uint32_t num_samples = 0;
};

class BatchStage {
 public:
  virtual ~BatchStage() = default;
  // "stage 1 model(encoder.pt): images -> embedding", for messages and telemetry.
  virtual const std::string& name() const = 0;
  // The named tensors it writes (added to the slot layout at start).
  virtual std::vector<TensorSpec> Outputs() const = 0;
  // The tensor it reads ("images" or an earlier stage's output) and whether consumers see it
  // (keep_input): a dropped input stays in the slot for the stage but is not published.
  virtual const std::string& input() const = 0;
  virtual bool keeps_input() const { return true; }
  // Runs on one producer batch; an error names the stage and the cause.
  virtual Status Run(const StageSlot& slot) = 0;
  // Bytes of output copied into the slot after forward so far (0 while every output was
  // written in place: docs/model-stage.md "Where the output is written").
  virtual int64_t copied_bytes() const { return 0; }
};

// What a stage may read when it is created: the images' layout, the named tensors written
// before it (earlier stages), the producer batch and the leader's decode threads (a stage
// pins its own threads so that it and the decode workers do not oversubscribe the cores).
struct StageContext {
  pipeline::SampleLayout images;
  // Every image layout the batches may have: images alone, or one per size of a
  // progressive-resizing schedule (a stage probes each at start).
  std::vector<pipeline::SampleLayout> image_sizes;
  std::vector<TensorSpec> tensors;
  int64_t producer_batch = 0;
  int decode_threads = 0;
  int index = 0;  // 1-based position in the chain, for messages
};

using StageFactory = Result<std::unique_ptr<BatchStage>> (*)(std::string_view spec,
                                                              const StageContext& context);
// Installs the factory of model stages (the LibTorch stage module); nullptr removes it.
void SetStageFactory(StageFactory factory);
bool HaveStageFactory();

// The stages of option 'stage' (`model(...)`, several separated by ';', run in this order;
// each may read the images or an earlier stage's output). Refused, naming `who`, without a
// factory (a build or front door without the LibTorch stage).
Result<std::vector<std::unique_ptr<BatchStage>>> CreateStages(std::string_view specs,
                                                               StageContext context,
                                                               std::string_view who);

// What every front door with a pipeline does with option 'stage' (`specs`): creates the
// stages for producer batches of `producer_batch` images of `images` (the largest layout)
// and of each of `image_sizes` (progressive resizing: every size is probed; empty: images
// only), and adds their outputs to `slot`. When a stage drops the images (keep_input=false)
// the slot keeps no room for their fill-repeat tail (DropImagesTail). Hand *stages to
// SlotWriter::SetStages.
Status PrepareStages(std::string_view specs, const pipeline::SampleLayout& images,
                     std::span<const pipeline::SampleLayout> image_sizes,
                     int64_t producer_batch, int decode_threads, std::string_view who,
                     SlotLayout* slot, std::vector<std::unique_ptr<BatchStage>>* stages);

// Whether the stages drop tensor `name` (some stage reads it with keep_input=false).
bool StagesDrop(std::span<const std::unique_ptr<BatchStage>> stages, std::string_view name);

}  // namespace batchcast::producer
