// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The transform chain of one sample: choose a crop box (none, center, RandomResizedCrop),
// resize the box to the output size (INTER_AREA weights when shrinking by 2x or more, OpenCV's
// INTER_LINEAR otherwise), then one final pass that flips, normalizes, converts HWC to CHW and writes
// the output type straight into the batch buffer. Every output element is written once.
//
// The resize and the final pass run AVX2 kernels where the CPU has AVX2 and FMA (KernelIsa,
// chosen once at run time) and portable C++ elsewhere; both give the same bytes
// (transform_kernels.h, docs/pipeline.md "Transform kernels").
#pragma once

#include <cstdint>
#include <vector>

#include "pipeline/pipeline.h"
#include "pipeline/sample_rng.h"

namespace batchcast::pipeline {

struct CropBox {
  int x = 0, y = 0, width = 0, height = 0;
  bool operator==(const CropBox&) const = default;
};

// The fraction of the shorter side a center crop keeps: torchvision's evaluation
// convention Resize(size / 0.875) + CenterCrop(size), expressed as one box.
inline constexpr double kCenterCropFraction = 0.875;

CropBox FullBox(int width, int height);
// The central square of side round(kCenterCropFraction * min(width, height)).
CropBox CenterCropBox(int width, int height);
// torchvision RandomResizedCrop.get_params: area fraction in [scale_min, scale_max],
// aspect ratio in [3/4, 4/3] drawn in log space, 10 attempts, then a center crop of the
// whole image clamped to the ratio range.
CropBox RandomResizedCropBox(int width, int height, double scale_min, double scale_max,
                             SampleRng* rng);
// Maps `box` (in original pixels) onto the image decoded at scale_num/8, whose size is
// scaled_w x scaled_h, rounding outwards so the mapped box covers the original one.
CropBox ScaleBox(const CropBox& box, int scale_num, int scaled_w, int scaled_h);

// A packed HWC uint8 view of pixels.
struct PixelView {
  const uint8_t* data = nullptr;
  size_t stride = 0;  // bytes per row
  int width = 0, height = 0, channels = 0;
};

// The instruction set of the transform kernels. kAvx2 needs AVX2 and FMA.
enum class KernelIsa : uint8_t { kScalar = 0, kAvx2 = 1 };
// kAvx2 where this CPU (and OS) has it, else kScalar; decided once per process.
KernelIsa BestKernelIsa();
bool KernelIsaAvailable(KernelIsa isa);
const char* KernelIsaName(KernelIsa isa);

// Resizes `box` of `src` to out_w x out_h into `dst` (packed HWC, same channels; dst_stride
// bytes per row). INTER_AREA when a dimension shrinks by 2x or more (our own separable pass
// when neither dimension enlarges and the factors are not both whole numbers: equal to
// OpenCV's within one level, rarely; docs/pipeline.md), INTER_LINEAR otherwise (our own
// separable fixed-point pass, equal to OpenCV 4.6's 8-bit INTER_LINEAR byte for byte). `isa`
// must be available; every isa gives the same bytes.
void ResizeBox(const PixelView& src, const CropBox& box, int out_w, int out_h, uint8_t* dst,
               size_t dst_stride, KernelIsa isa = BestKernelIsa());

// Everything the final pass needs about the output.
struct OutputSpec {
  SampleLayout layout;
  // For float32 output: value of channel c for input byte v is lut[c * 256 + v]
  // ((v/255 - mean) / std with normalize, v/255 without, computed in double and rounded
  // once). Empty for uint8.
  std::vector<float> lut;
  // The same values as float(fma(double(v), scale[c], offset[c])), which the vector pass
  // computes: true only when that equals lut[c * 256 + v] bit for bit for every c and v
  // (BuildOutputLut checks all of them; otherwise the pass reads the table).
  bool affine = false;
  double scale[3] = {0, 0, 0}, offset[3] = {0, 0, 0};
};

// Builds the lookup table of `spec` (and its checked affine form) from per-channel mean and
// std (or v/255 when empty).
void BuildOutputLut(const std::vector<double>& mean, const std::vector<double>& std,
                    OutputSpec* spec);

// The final pass: src (layout.width x layout.height, 1 or layout.channels channels; a
// 1-channel source fills every output channel) → dst in the output layout and type,
// mirrored horizontally when `flip`. `isa` must be available; every isa gives the same bytes.
void WriteOutput(const PixelView& src, bool flip, const OutputSpec& spec, void* dst,
                 KernelIsa isa = BestKernelIsa());

}  // namespace batchcast::pipeline
