// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/views.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/errors.h"
#include "pipeline/decode.h"
#include "pipeline/sample_rng.h"

namespace batchcast::pipeline {

SampleLayout ViewSampleLayout(const core::View& view, const data::DatasetInfo& dataset,
                              int channels, int image_size) {
  SampleLayout l;
  const int size = image_size > 0 ? image_size : view.image_size;
  l.height = size > 0 ? size : dataset.raw_height;
  l.width = size > 0 ? size : dataset.raw_width;
  l.channels = channels;
  l.dtype = view.normalize || view.dtype == core::ViewDType::kFloat32 ? DType::kFloat32
                                                                       : DType::kUint8;
  l.layout = view.layout == core::ViewLayout::kHWC ? Layout::kHWC : Layout::kCHW;
  return l;
}

Result<PreparedView> PrepareView(const core::View& view, const data::DatasetInfo& dataset,
                                 int channels, uint64_t seed) {
  BC_RETURN_IF_ERROR(core::ValidateView(view));
  const bool raw = dataset.kind == data::SampleKind::kRaw;
  if (view.image_size == 0 && !raw)
    return InvalidArgumentError("{} stores {} of varying size; give the view a size", dataset.path,
                                dataset.kind == data::SampleKind::kPixels ? "pixels"
                                                                          : "encoded images");
  PreparedView p;
  p.view = core::CanonicalView(view);
  p.seed = core::ViewDrawSeed(seed, p.view);
  p.spec.layout = ViewSampleLayout(p.view, dataset, channels, 0);
  if (p.spec.layout.dtype != DType::kFloat32) return p;
  std::vector<double> mean, std;
  if (p.view.normalize) {
    for (const auto& [name, values, count, out] :
         {std::tuple{"mean", &p.view.mean, p.view.mean_count, &mean},
          std::tuple{"std", &p.view.std, p.view.std_count, &std}}) {
      if (count != 1 && count != channels)
        return InvalidArgumentError("{} has {} values but the output has {} channel{}; give 1 "
                                    "value (every channel){}", name, count, channels,
                                    channels == 1 ? "" : "s",
                                    channels == 1 ? "" : " or one per channel");
      out->assign(values->begin(), values->begin() + channels);
    }
  }
  BuildOutputLut(mean, std, &p.spec);
  return p;
}

CropBox ViewCropBox(const PreparedView& v, int width, int height, int64_t index, uint64_t epoch) {
  switch (v.view.crop) {
    case core::ViewCrop::kCenter: return CenterCropBox(width, height);
    case core::ViewCrop::kRandom: {
      SampleRng rng(v.seed, epoch, static_cast<uint64_t>(index), RngStream::kCrop);
      return RandomResizedCropBox(width, height, v.view.crop_scale_min, v.view.crop_scale_max,
                                  &rng);
    }
    case core::ViewCrop::kNone: break;
  }
  return FullBox(width, height);
}

bool ViewFlip(const PreparedView& v, int64_t index, uint64_t epoch) {
  return v.view.flip &&
         SampleRng(v.seed, epoch, static_cast<uint64_t>(index), RngStream::kFlip).Bernoulli(0.5);
}

int ViewCacheScale(const core::View& view, const SampleLayout& layout, int w, int h) {
  CropBox smallest = FullBox(w, h);
  if (view.crop == core::ViewCrop::kCenter) smallest = CenterCropBox(w, h);
  if (view.crop == core::ViewCrop::kRandom) {
    // RandomResizedCropBox: area >= scale_min of the image, aspect ratio in [3/4, 4/3], so
    // no side is under sqrt(scale_min * area * 3/4) (less one for rounding).
    const double side = std::sqrt(view.crop_scale_min * double(w) * h * 0.75);
    const int s = std::max(1, static_cast<int>(side) - 1);
    smallest = CropBox{0, 0, std::min(s, w), std::min(s, h)};
  }
  return ChooseScaleNum(smallest.width, smallest.height, layout.width, layout.height);
}

CropBox UnionBox(const CropBox& a, const CropBox& b) {
  const int x0 = std::min(a.x, b.x), y0 = std::min(a.y, b.y);
  const int x1 = std::max(a.x + a.width, b.x + b.width);
  const int y1 = std::max(a.y + a.height, b.y + b.height);
  return CropBox{x0, y0, x1 - x0, y1 - y0};
}

int PlanDecodes(std::span<const GroupDraw> draws, int width, int height,
                std::span<DecodeStep> steps) {
  int n = 0;
  for (size_t g = 0; g < draws.size(); ++g) {
    const int scale = draws[g].scale_num;
    const int sw = ScaledDim(width, scale), sh = ScaledDim(height, scale);
    const CropBox scaled = ScaleBox(draws[g].box, scale, sw, sh);
    int s = 0;
    while (s < n && steps[s].scale_num != scale) ++s;
    if (s == n) {
      steps[n++] = DecodeStep{scale, scaled, 0};
    } else {
      steps[s].region = UnionBox(steps[s].region, scaled);
    }
    steps[s].groups |= uint32_t(1) << g;
  }
  return n;
}

}  // namespace batchcast::pipeline
