// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The per-sample plan of "one decode, many views" (docs/pipeline.md, "Views"): each group's
// crop box, flip and the DCT scale its own decode would use, and the decodes that serve them:
// groups at one scale share a decode of the union of their boxes. A crop decode's pixels
// inside any box are bit-exact with a full decode at that scale (crop_decode.h), so every
// group gets the pixels its own decode gives it. Groups at different scales get a decode
// each: a larger scale would give a group other pixels than its own decode (the scaled
// inverse DCT is not a resize of the full one), and a group's batches must not depend on
// which other groups are attached.
#pragma once

#include <cstdint>
#include <span>

#include "batchcast/status.h"
#include "core/view.h"
#include "data/dataset_reader.h"
#include "pipeline/pipeline.h"
#include "pipeline/transform.h"

namespace batchcast::pipeline {

// A view ready for the workers.
struct PreparedView {
  core::View view;
  uint64_t seed = 0;  // of its draws: core::ViewDrawSeed(options seed, view)
  OutputSpec spec;    // its images at view.image_size, and the value table
};

// The layout of `view`'s images at `image_size` (0: the view's size; the dataset's own for a
// raw dataset and size 0) with `channels` channels.
SampleLayout ViewSampleLayout(const core::View& view, const data::DatasetInfo& dataset,
                              int channels, int image_size);

// Checks `view` against the dataset and the output's channels and builds its value table.
// Messages name `what` ("option", "view view(size=...)").
Result<PreparedView> PrepareView(const core::View& view, const data::DatasetInfo& dataset,
                                 int channels, uint64_t seed);

// The view's crop box for sample `index` in `epoch` of a width x height image (original
// pixels), and its flip: pure functions of (view seed, epoch, index).
CropBox ViewCropBox(const PreparedView& view, int width, int height, int64_t index,
                    uint64_t epoch);
bool ViewFlip(const PreparedView& view, int64_t index, uint64_t epoch);

// The scale a cached decode of a width x height JPEG is kept at for `view` at `layout`: the
// one the view's smallest box needs (docs/pipeline.md, "Decoded-sample cache").
int ViewCacheScale(const core::View& view, const SampleLayout& layout, int width, int height);

// One group's part of a sample.
struct GroupDraw {
  CropBox box;        // in original pixels
  int scale_num = 8;  // the DCT scale the group's own decode uses
  bool flip = false;
};

// One decode of a sample: `region` of the image at scale_num/8 (the union of the scaled boxes
// of the groups in the bit mask `groups`).
struct DecodeStep {
  int scale_num = 8;
  CropBox region;
  uint32_t groups = 0;
};

// The decodes of a width x height image for the groups in `draws` (at most 32): one per
// distinct scale, in the order the scales first appear. Returns how many were written to
// `steps` (which has room for draws.size()).
int PlanDecodes(std::span<const GroupDraw> draws, int width, int height,
                std::span<DecodeStep> steps);

// The smallest box that holds both.
CropBox UnionBox(const CropBox& a, const CropBox& b);

}  // namespace batchcast::pipeline
