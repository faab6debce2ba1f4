// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/transform.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "pipeline/transform_kernels.h"

namespace batchcast::pipeline {
namespace kernels {

void BuildLinearTaps(int src, int dst, bool columns, LinearTaps* t) {
  // OpenCV's tables: the source position in float, its floor and fraction, the fraction in
  // 11-bit fixed point rounded half to even (saturate_cast<short>).
  const double scale = 1.0 / (double(dst) / src);
  t->first.resize(size_t(dst));
  t->second.resize(size_t(dst));
  t->weight.resize(size_t(dst) * 2);
  for (int d = 0; d < dst; ++d) {
    float f = static_cast<float>((d + 0.5) * scale - 0.5);
    int s = static_cast<int>(std::floor(f));
    f -= static_cast<float>(s);
    if (columns && s < 0) f = 0, s = 0;
    if (columns && s >= src - 1) f = 0, s = src - 1;
    t->first[size_t(d)] = std::clamp(s, 0, src - 1);
    t->second[size_t(d)] = std::clamp(s + 1, 0, src - 1);
    t->weight[size_t(d) * 2] = static_cast<int16_t>(std::lrint((1.0f - f) * 2048.0f));
    t->weight[size_t(d) * 2 + 1] = static_cast<int16_t>(std::lrint(f * 2048.0f));
  }
}

void LinearRowScalar(const uint8_t* s, int src_w, int cn, const LinearTaps& tx, int out_w,
                     int16_t* h) {
  for (int d = 0; d < out_w; ++d) {
    const uint8_t* p0 = s + size_t(tx.first[size_t(d)]) * cn;
    const uint8_t* p1 = s + size_t(tx.second[size_t(d)]) * cn;
    const int w0 = tx.weight[size_t(d) * 2], w1 = tx.weight[size_t(d) * 2 + 1];
    for (int c = 0; c < cn; ++c)
      h[size_t(d) * cn + c] = static_cast<int16_t>((p0[c] * w0 + p1[c] * w1) >> 4);
  }
}

void LinearBlendScalar(const int16_t* h0, const int16_t* h1, int b0, int b1, int n, uint8_t* out) {
  for (int i = 0; i < n; ++i) {
    const int t = ((h0[i] * b0) >> 16) + ((h1[i] * b1) >> 16);
    out[i] = static_cast<uint8_t>(std::clamp((t + 2) >> 2, 0, 255));
  }
}

// INTER_AREA's weights along one dimension: output d averages the source cells under
// [d * src / dst, (d + 1) * src / dst), each weighted by the part of it that lies inside.
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

// Blocks of a fixed length so that the compiler vectorises the loop (SSE2 here; the AVX2
// version does the same operations eight at a time).
void AverageRowsScalar(const uint8_t* first_row, size_t stride, const float* w, int taps, int n,
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

namespace {
// Rounds half to even (as cvRound) for 0 <= v < 2^22 and saturates to 255.
inline uint8_t RoundToByte(float v) {
  const float r = (v + 12582912.0f) - 12582912.0f;
  return static_cast<uint8_t>(std::min(static_cast<int>(r), 255));
}
}  // namespace

// 3 or 4 channels as one 4-float vector per source pixel.
void AverageColumnsScalar(const float* row, const AreaTaps& tx, int channels, int out_w,
                          uint8_t* out) {
  AveragePixelsScalar(row, tx, channels, 0, out_w, out);
}

void AveragePixelsScalar(const float* row, const AreaTaps& tx, int channels, int from, int to,
                         uint8_t* out) {
  typedef float Float4 __attribute__((vector_size(16)));
  typedef int Int4 __attribute__((vector_size(16)));
  for (int dx = from; dx < to; ++dx) {
    const float* w = &tx.weight[size_t(dx) * tx.max_taps];
    const float* p = row + size_t(tx.first[dx]) * channels;
    if (channels == 3 || channels == 4) {
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

}  // namespace kernels

namespace {

using kernels::AreaTaps;
using kernels::LinearTaps;

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

// The kernels of one instruction set.
struct ResizeKernels {
  void (*prepare_linear_row)(int, int, int, LinearTaps*);  // null: nothing to plan
  void (*linear_row)(const uint8_t*, int, int, const LinearTaps&, int, int16_t*);
  void (*linear_blend)(const int16_t*, const int16_t*, int, int, int, uint8_t*);
  void (*average_rows)(const uint8_t*, size_t, const float*, int, int, float*);
  void (*average_columns)(const float*, const AreaTaps&, int, int, uint8_t*);
};

const ResizeKernels& KernelsFor(KernelIsa isa) {
  static constexpr ResizeKernels kScalar = {nullptr, kernels::LinearRowScalar,
                                            kernels::LinearBlendScalar, kernels::AverageRowsScalar,
                                            kernels::AverageColumnsScalar};
#if defined(__x86_64__)
  static constexpr ResizeKernels kAvx2 = {kernels::PrepareLinearRowAvx2, kernels::LinearRowAvx2,
                                          kernels::LinearBlendAvx2, kernels::AverageRowsAvx2,
                                          kernels::AverageColumnsAvx2};
  if (isa == KernelIsa::kAvx2) return kAvx2;
#endif
  return kScalar;
}

struct LinearScratch {
  LinearTaps x, y;
  std::vector<int16_t> rows[2];  // the horizontal pass of two source rows
  int row_of[2] = {-1, -1};      // which source row each holds
};

// Separable linear resize of a src_w x src_h region (OpenCV's INTER_LINEAR for 8-bit images,
// byte for byte): each source row the output needs goes through the horizontal pass once
// (two kept), each output row blends two of them.
void LinearResize(const uint8_t* src, size_t src_stride, int src_w, int src_h, int cn,
                  uint8_t* dst, size_t dst_stride, int out_w, int out_h, const ResizeKernels& k) {
  thread_local LinearScratch s;
  kernels::BuildLinearTaps(src_w, out_w, true, &s.x);
  kernels::BuildLinearTaps(src_h, out_h, false, &s.y);
  if (k.prepare_linear_row != nullptr) k.prepare_linear_row(src_w, cn, out_w, &s.x);
  const int n = out_w * cn;
  for (auto& r : s.rows) r.resize(size_t(n) + kernels::kLinearRowPadding);
  s.row_of[0] = s.row_of[1] = -1;
  // The slot holding source row `y`, computing it into a slot that `keep` does not need.
  auto row = [&](int y, int keep) -> const int16_t* {
    for (int i = 0; i < 2; ++i)
      if (s.row_of[i] == y) return s.rows[i].data();
    const int i = s.row_of[0] == keep ? 1 : 0;
    k.linear_row(src + size_t(y) * src_stride, src_w, cn, s.x, out_w, s.rows[i].data());
    s.row_of[i] = y;
    return s.rows[i].data();
  };
  for (int dy = 0; dy < out_h; ++dy) {
    const int y0 = s.y.first[size_t(dy)], y1 = s.y.second[size_t(dy)];
    const int16_t* h0 = row(y0, y1);
    const int16_t* h1 = row(y1, y0);
    k.linear_blend(h0, h1, s.y.weight[size_t(dy) * 2], s.y.weight[size_t(dy) * 2 + 1], n,
                   dst + size_t(dy) * dst_stride);
  }
}

struct AreaScratch {
  AreaTaps x, y;
  std::vector<float> row;  // one output row's source rows averaged, HWC floats, padded
};

// Area averaging (OpenCV's INTER_AREA weights) of a src_w x src_h region to a smaller
// out_w x out_h: rows first (vectorised), then columns. OpenCV's own generic INTER_AREA
// costs 3-4 times more (docs/pipeline.md); the result equals it within one level in rare
// values (the sums are rounded in another order).
void AreaShrink(const uint8_t* src, size_t src_stride, int src_w, int src_h, int channels,
                uint8_t* dst, size_t dst_stride, int out_w, int out_h, const ResizeKernels& k) {
  thread_local AreaScratch s;
  kernels::BuildAreaTaps(src_w, out_w, &s.x);
  kernels::BuildAreaTaps(src_h, out_h, &s.y);
  const int n = src_w * channels;
  s.row.assign(size_t(n) + kernels::AreaRowPadding(s.x, channels), 0.0f);
  for (int dy = 0; dy < out_h; ++dy) {
    k.average_rows(src + size_t(s.y.first[dy]) * src_stride, src_stride,
                   &s.y.weight[size_t(dy) * s.y.max_taps], s.y.count[dy], n, s.row.data());
    k.average_columns(s.row.data(), s.x, channels, out_w, dst + size_t(dy) * dst_stride);
  }
}

}  // namespace

KernelIsa BestKernelIsa() {
#if defined(__x86_64__)
  static const KernelIsa best = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                                    ? KernelIsa::kAvx2
                                    : KernelIsa::kScalar;
  return best;
#else
  return KernelIsa::kScalar;
#endif
}

bool KernelIsaAvailable(KernelIsa isa) {
  return isa == KernelIsa::kScalar || BestKernelIsa() == KernelIsa::kAvx2;
}

const char* KernelIsaName(KernelIsa isa) { return isa == KernelIsa::kAvx2 ? "avx2" : "scalar"; }

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
               size_t dst_stride, KernelIsa isa) {
  const uint8_t* region = src.data + size_t(box.y) * src.stride + size_t(box.x) * src.channels;
  const ResizeKernels& k = KernelsFor(isa);
  // Area averaging where bilinear would alias (shrinking by 2 or more in a dimension);
  // below 2x bilinear reads every source pixel anyway.
  const bool area = box.width >= 2 * out_w || box.height >= 2 * out_h;
  if (!area) {
    LinearResize(region, src.stride, box.width, box.height, src.channels, dst, dst_stride, out_w,
                 out_h, k);
    return;
  }
  // OpenCV's INTER_AREA is fast for whole-number factors only; other shrinks go through
  // AreaShrink (same weights). Enlarging in one dimension stays with OpenCV's variant.
  const bool integer = box.width % out_w == 0 && box.height % out_h == 0;
  if (!integer && box.width >= out_w && box.height >= out_h) {
    AreaShrink(region, src.stride, box.width, box.height, src.channels, dst, dst_stride, out_w,
               out_h, k);
    return;
  }
  const int type = CV_8UC(src.channels);
  cv::Mat in(box.height, box.width, type, const_cast<uint8_t*>(region), src.stride);
  cv::Mat out(out_h, out_w, type, dst, dst_stride);
  cv::resize(in, out, cv::Size(out_w, out_h), 0, 0, cv::INTER_AREA);
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
  // The affine form the vector pass computes, kept only where it gives every table value bit
  // for bit (it did for every mean and std tried: ImageNet's, 0.5, and 2000 random pairs).
  spec->affine = channels >= 1 && channels <= 3;
  for (int c = 0; c < channels && spec->affine; ++c) {
    const double scale = mean.empty() ? 1.0 / 255.0 : 1.0 / (255.0 * std[c]);
    const double offset = mean.empty() ? 0.0 : -mean[c] / std[c];
    spec->scale[c] = scale;
    spec->offset[c] = offset;
    for (int v = 0; v < 256; ++v) {
      const float got = static_cast<float>(std::fma(double(v), scale, offset));
      if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(spec->lut[size_t(c) * 256 + v]))
        spec->affine = false;
    }
  }
}

void WriteOutput(const PixelView& src, bool flip, const OutputSpec& spec, void* dst,
                 KernelIsa isa) {
  const SampleLayout& l = spec.layout;
  if (l.dtype == DType::kUint8 && l.layout == Layout::kHWC && !flip &&
      src.channels == l.channels) {
    auto* out = static_cast<uint8_t*>(dst);
    const size_t row = size_t(src.width) * src.channels;
    for (int y = 0; y < src.height; ++y) std::memcpy(out + y * row, src.data + y * src.stride, row);
    return;
  }
#if defined(__x86_64__)
  if (isa == KernelIsa::kAvx2 && kernels::WriteOutputAvx2(src, flip, spec, dst)) return;
#endif
  if (l.dtype == DType::kUint8) {
    auto same = [](int, uint8_t v) { return v; };
    auto* out = static_cast<uint8_t*>(dst);
    if (l.layout == Layout::kHWC) WriteHwc(src, flip, l.channels, out, same);
    else WriteChw(src, flip, l.channels, out, same);
    return;
  }
  const float* lut = spec.lut.data();
  auto convert = [lut](int c, uint8_t v) { return lut[c * 256 + v]; };
  auto* out = static_cast<float*>(dst);
  if (l.layout == Layout::kHWC) WriteHwc(src, flip, l.channels, out, convert);
  else WriteChw(src, flip, l.channels, out, convert);
}

}  // namespace batchcast::pipeline
