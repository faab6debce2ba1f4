// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/transform.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace batchcast::pipeline {
namespace {

int RoundHalfEven(double v) { return static_cast<int>(std::nearbyint(v)); }

template <typename T, typename Convert>
void WriteChw(const PixelView& src, bool flip, int channels, T* dst, Convert convert) {
  const int w = src.width, h = src.height, sc = src.channels;
  for (int c = 0; c < channels; ++c) {
    const int src_c = sc == 1 ? 0 : c;
    for (int y = 0; y < h; ++y) {
      const uint8_t* row = src.data + size_t(y) * src.stride + src_c;
      T* out = dst + (size_t(c) * h + y) * w;
      if (flip) {
        for (int x = 0; x < w; ++x) out[x] = convert(c, row[size_t(w - 1 - x) * sc]);
      } else {
        for (int x = 0; x < w; ++x) out[x] = convert(c, row[size_t(x) * sc]);
      }
    }
  }
}

template <typename T, typename Convert>
void WriteHwc(const PixelView& src, bool flip, int channels, T* dst, Convert convert) {
  const int w = src.width, h = src.height, sc = src.channels;
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = src.data + size_t(y) * src.stride;
    T* out = dst + size_t(y) * w * channels;
    for (int x = 0; x < w; ++x) {
      const uint8_t* px = row + size_t(flip ? w - 1 - x : x) * sc;
      for (int c = 0; c < channels; ++c) out[size_t(x) * channels + c] = convert(c, px[sc == 1 ? 0 : c]);
    }
  }
}

}  // namespace

CropBox FullBox(int width, int height) { return CropBox{0, 0, width, height}; }

CropBox CenterCropBox(int width, int height) {
  int side = std::max(1, RoundHalfEven(kCenterCropFraction * std::min(width, height)));
  return CropBox{(width - side) / 2, (height - side) / 2, side, side};
}

CropBox RandomResizedCropBox(int width, int height, double scale_min, double scale_max,
                             SampleRng* rng) {
  const double area = double(width) * height;
  const double log_lo = std::log(3.0 / 4.0), log_hi = std::log(4.0 / 3.0);
  for (int attempt = 0; attempt < 10; ++attempt) {
    double target_area = area * rng->Uniform(scale_min, scale_max);
    double ratio = std::exp(rng->Uniform(log_lo, log_hi));
    int w = RoundHalfEven(std::sqrt(target_area * ratio));
    int h = RoundHalfEven(std::sqrt(target_area / ratio));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      int y = static_cast<int>(rng->UniformInt(0, height - h));
      int x = static_cast<int>(rng->UniformInt(0, width - w));
      return CropBox{x, y, w, h};
    }
  }
  // Fallback: the whole image, clamped to the ratio range, centred.
  double in_ratio = double(width) / height;
  int w = width, h = height;
  if (in_ratio < 3.0 / 4.0) {
    h = std::max(1, RoundHalfEven(w / (3.0 / 4.0)));
    h = std::min(h, height);
  } else if (in_ratio > 4.0 / 3.0) {
    w = std::max(1, RoundHalfEven(h * (4.0 / 3.0)));
    w = std::min(w, width);
  }
  return CropBox{(width - w) / 2, (height - h) / 2, w, h};
}

CropBox ScaleBox(const CropBox& box, int scale_num, int scaled_w, int scaled_h) {
  if (scale_num == 8) return box;
  auto lo = [&](int v) { return static_cast<int>(int64_t(v) * scale_num / 8); };
  auto hi = [&](int v) { return static_cast<int>((int64_t(v) * scale_num + 7) / 8); };
  int x0 = lo(box.x), y0 = lo(box.y);
  int x1 = std::min(hi(box.x + box.width), scaled_w);
  int y1 = std::min(hi(box.y + box.height), scaled_h);
  return CropBox{x0, y0, std::max(1, x1 - x0), std::max(1, y1 - y0)};
}

void ResizeBox(const PixelView& src, const CropBox& box, int out_w, int out_h, uint8_t* dst,
               size_t dst_stride) {
  const int type = CV_8UC(src.channels);
  cv::Mat whole(src.height, src.width, type, const_cast<uint8_t*>(src.data), src.stride);
  cv::Mat region = whole(cv::Rect(box.x, box.y, box.width, box.height));
  cv::Mat out(out_h, out_w, type, dst, dst_stride);
  // Area averaging where bilinear would alias (shrinking by 2 or more in a dimension);
  // below 2x bilinear reads every source pixel anyway and OpenCV's fixed-point SIMD
  // INTER_LINEAR is several times faster than its generic non-integer INTER_AREA.
  const bool area = box.width >= 2 * out_w || box.height >= 2 * out_h;
  cv::resize(region, out, cv::Size(out_w, out_h), 0, 0, area ? cv::INTER_AREA : cv::INTER_LINEAR);
}

void BuildOutputLut(const std::vector<double>& mean, const std::vector<double>& std,
                    OutputSpec* spec) {
  const int channels = spec->layout.channels;
  spec->lut.assign(size_t(channels) * 256, 0.0f);
  for (int c = 0; c < channels; ++c) {
    for (int v = 0; v < 256; ++v) {
      double x = v / 255.0;
      if (!mean.empty()) x = (x - mean[c]) / std[c];
      spec->lut[size_t(c) * 256 + v] = static_cast<float>(x);
    }
  }
}

void WriteOutput(const PixelView& src, bool flip, const OutputSpec& spec, void* dst) {
  const SampleLayout& l = spec.layout;
  if (l.dtype == DType::kUint8) {
    auto same = [](int, uint8_t v) { return v; };
    auto* out = static_cast<uint8_t*>(dst);
    if (l.layout == Layout::kHWC && !flip && src.channels == l.channels) {
      const size_t row = size_t(src.width) * src.channels;
      for (int y = 0; y < src.height; ++y) std::memcpy(out + y * row, src.data + y * src.stride, row);
    } else if (l.layout == Layout::kHWC) {
      WriteHwc(src, flip, l.channels, out, same);
    } else {
      WriteChw(src, flip, l.channels, out, same);
    }
    return;
  }
  const float* lut = spec.lut.data();
  auto convert = [lut](int c, uint8_t v) { return lut[c * 256 + v]; };
  auto* out = static_cast<float*>(dst);
  if (l.layout == Layout::kHWC) WriteHwc(src, flip, l.channels, out, convert);
  else WriteChw(src, flip, l.channels, out, convert);
}

}  // namespace batchcast::pipeline
