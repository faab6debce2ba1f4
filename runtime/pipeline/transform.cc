// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/transform.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace batchcast::pipeline {
namespace {

int RoundHalfEven(double v) { return static_cast<int>(std::nearbyint(v)); }

// Row by row; an RGB row is read once for its three planes (one pass instead of three:
// 25% less time at 224x224 float32 than plane by plane).
template <typename T, typename Convert>
void WriteChw(const PixelView& src, bool flip, int channels, T* dst, Convert convert) {
  const int w = src.width, h = src.height, sc = src.channels;
  const size_t plane = size_t(w) * h;
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = src.data + size_t(y) * src.stride;
    T* out = dst + size_t(y) * w;
    if (sc == 3 && channels == 3) {
      T* out1 = out + plane;
      T* out2 = out1 + plane;
      for (int x = 0; x < w; ++x) {
        const uint8_t* px = row + size_t(flip ? w - 1 - x : x) * 3;
        out[x] = convert(0, px[0]);
        out1[x] = convert(1, px[1]);
        out2[x] = convert(2, px[2]);
      }
      continue;
    }
    for (int c = 0; c < channels; ++c) {
      const uint8_t* in = row + (sc == 1 ? 0 : c);
      T* o = out + size_t(c) * plane;
      if (flip) {
        for (int x = 0; x < w; ++x) o[x] = convert(c, in[size_t(w - 1 - x) * sc]);
      } else {
        for (int x = 0; x < w; ++x) o[x] = convert(c, in[size_t(x) * sc]);
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

// INTER_AREA's weights along one dimension: output d averages the source cells under
// [d * src / dst, (d + 1) * src / dst), each weighted by the part of it that lies inside.
// Output d reads count[d] cells from first[d]; its weights are weight[d * max_taps ...].
struct AreaTaps {
  std::vector<int> first, count;
  std::vector<float> weight;
  int max_taps = 0;
};

void BuildAreaTaps(int src, int dst, AreaTaps* t) {
  const double scale = double(src) / dst;
  t->max_taps = static_cast<int>(std::ceil(scale)) + 1;
  t->first.assign(dst, 0);
  t->count.assign(dst, 0);
  t->weight.assign(size_t(dst) * t->max_taps, 0.0f);
  for (int d = 0; d < dst; ++d) {
    const double lo = d * scale, hi = std::min(double(src), (d + 1) * scale);
    const int s0 = static_cast<int>(std::floor(lo));
    const int s1 = std::min(src, static_cast<int>(std::ceil(hi)));
    float* w = &t->weight[size_t(d) * t->max_taps];
    int first = -1;
    for (int s = s0; s < s1; ++s) {
      const double overlap = std::min(double(s + 1), hi) - std::max(double(s), lo);
      if (overlap <= 1e-6) continue;  // a cell the box only touches
      if (first < 0) first = s;
      w[s - first] = static_cast<float>(overlap / (hi - lo));
      t->count[d] = s - first + 1;
    }
    t->first[d] = std::max(first, 0);
  }
}

// Rounds half to even (as cvRound) for 0 <= v < 2^22 and saturates to 255.
inline uint8_t RoundToByte(float v) {
  const float r = (v + 12582912.0f) - 12582912.0f;
  return static_cast<uint8_t>(std::min(static_cast<int>(r), 255));
}

struct AreaScratch {
  AreaTaps x, y;
  std::vector<float> row;  // one output row's source rows averaged, HWC floats
};

// One output row of the vertical pass: out[i] = sum over the taps of weight * row_t[i], in
// blocks of a fixed length so that the compiler vectorises the loop.
void AverageRows(const uint8_t* first_row, size_t stride, const float* w, int taps, int n,
                 float* out) {
  constexpr int kBlock = 16;
  int i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    float acc[kBlock];
    for (int j = 0; j < kBlock; ++j) acc[j] = w[0] * first_row[i + j];
    for (int t = 1; t < taps; ++t) {
      const uint8_t* row = first_row + size_t(t) * stride + i;
      for (int j = 0; j < kBlock; ++j) acc[j] += w[t] * row[j];
    }
    std::memcpy(out + i, acc, sizeof(acc));
  }
  for (; i < n; ++i) {
    float acc = 0;
    for (int t = 0; t < taps; ++t) acc += w[t] * first_row[size_t(t) * stride + i];
    out[i] = acc;
  }
}

// The horizontal pass of one output row from `row` (averaged source rows, `row` padded with
// 4 floats): 3 or 4 channels as one 4-float vector per source pixel.
void AverageColumns(const float* row, const AreaTaps& tx, int channels, int out_w, uint8_t* out) {
  typedef float Float4 __attribute__((vector_size(16)));
  typedef int Int4 __attribute__((vector_size(16)));
  for (int dx = 0; dx < out_w; ++dx) {
    const float* w = &tx.weight[size_t(dx) * tx.max_taps];
    const float* p = row + size_t(tx.first[dx]) * channels;
    if (channels >= 3) {
      Float4 acc = {0, 0, 0, 0};
      for (int t = 0; t < tx.count[dx]; ++t) {
        Float4 v;
        std::memcpy(&v, p + size_t(t) * channels, sizeof(v));
        acc += w[t] * v;
      }
      const Float4 magic = {12582912.0f, 12582912.0f, 12582912.0f, 12582912.0f};
      const Int4 q = __builtin_convertvector((acc + magic) - magic, Int4);
      for (int c = 0; c < channels; ++c)
        out[size_t(dx) * channels + c] = static_cast<uint8_t>(std::min(q[c], 255));
    } else {
      for (int c = 0; c < channels; ++c) {
        float acc = 0;
        for (int t = 0; t < tx.count[dx]; ++t) acc += w[t] * p[size_t(t) * channels + c];
        out[size_t(dx) * channels + c] = RoundToByte(acc);
      }
    }
  }
}

// Area averaging (OpenCV's INTER_AREA weights) of a src_w x src_h region to a smaller
// out_w x out_h: rows first (vectorised), then columns. OpenCV's own generic INTER_AREA
// costs 3-4 times more (docs/pipeline.md); the result equals it within one level in rare
// values (the sums are rounded in another order).
void AreaShrink(const uint8_t* src, size_t src_stride, int src_w, int src_h, int channels,
                uint8_t* dst, size_t dst_stride, int out_w, int out_h) {
  thread_local AreaScratch s;
  BuildAreaTaps(src_w, out_w, &s.x);
  BuildAreaTaps(src_h, out_h, &s.y);
  const int n = src_w * channels;
  s.row.assign(size_t(n) + 4, 0.0f);
  for (int dy = 0; dy < out_h; ++dy) {
    AverageRows(src + size_t(s.y.first[dy]) * src_stride, src_stride,
                &s.y.weight[size_t(dy) * s.y.max_taps], s.y.count[dy], n, s.row.data());
    AverageColumns(s.row.data(), s.x, channels, out_w, dst + size_t(dy) * dst_stride);
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
  // OpenCV's INTER_AREA is fast for whole-number factors only; other shrinks go through
  // AreaShrink (same weights). Enlarging in one dimension stays with OpenCV's variant.
  const bool integer = box.width % out_w == 0 && box.height % out_h == 0;
  if (area && !integer && box.width >= out_w && box.height >= out_h) {
    AreaShrink(region.data, region.step, box.width, box.height, src.channels, dst, dst_stride,
               out_w, out_h);
    return;
  }
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
