// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The inner loops of the transform chain (transform.h) in two instruction sets: portable C++
// and AVX2 (transform_avx2.cc, chosen at run time: KernelIsa). Both write the same bytes for
// every input (transform_kernels_test.cc): the integer kernels (linear resize, byte layouts) by
// construction, the area average by doing the same float operations in the same order, and
// the float32 output pass because OutputSpec's affine form is checked against the value table
// for all 256 values of every channel before the vector pass may use it. Private to the module.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pipeline/transform.h"

namespace batchcast::pipeline::kernels {

// --- Linear resize (OpenCV's INTER_LINEAR for 8-bit images, reproduced bit for bit) ---

// The taps of one dimension: output d blends source `first[d]` and `second[d]` with the
// fixed-point weights weight[2d], weight[2d + 1] (sum 2048). Columns are clamped as OpenCV
// clamps them (weight (2048, 0) at the edges); rows keep OpenCV's unclamped weights and clip the
// row index.
struct LinearTaps {
  std::vector<int> first, second;
  std::vector<int16_t> weight;
  // The vector horizontal pass's plan (PrepareLinearRowAvx2): a row's first `vector_values`
  // values in blocks of 16, each block four quarters of 4 values, each quarter one 16-byte load
  // at offset[q], a byte shuffle into (tap 0, tap 1) int16 pairs and their weights for a madd.
  // Quarters are stored in the order 0, 2, 1, 3 (a 256-bit register holds quarters 0 and 2,
  // another 1 and 3, and one pack puts the 16 values in order).
  struct Block {
    int32_t offset[4];
    alignas(32) int8_t shuffle[64];
    alignas(32) int16_t weights[32];
  };
  std::vector<Block> blocks;
  int vector_values = 0;
};
void BuildLinearTaps(int src, int dst, bool columns, LinearTaps* t);

// One source row through the horizontal pass: h[d * cn + c] = (s[first[d] * cn + c] * w0 +
// s[second[d] * cn + c] * w1) >> 4 for every output column d (the >> 4 is the first step of
// OpenCV's vertical pass, taken early so that the row fits in 16 bits).
void LinearRowScalar(const uint8_t* s, int src_w, int cn, const LinearTaps& tx, int out_w,
                     int16_t* h);
// The vertical pass of one output row of n values: ((h0 * b0) >> 16) + ((h1 * b1) >> 16),
// then (+ 2) >> 2 saturated to a byte (OpenCV 4.6's vector formula, which it uses for every
// value of the row).
void LinearBlendScalar(const int16_t* h0, const int16_t* h1, int b0, int b1, int n, uint8_t* out);
// Padding (int16 values) a LinearRow* output row needs past out_w * cn.
inline constexpr size_t kLinearRowPadding = 16;

// --- Area average (our INTER_AREA for shrinks that are not by whole numbers) ---

// Output d averages count[d] source cells from first[d] with weights
// weight[d * max_taps + t] (zero past count[d]).
struct AreaTaps {
  std::vector<int> first, count;
  std::vector<float> weight;
  int max_taps = 0;
};
void BuildAreaTaps(int src, int dst, AreaTaps* t);
// out[i] = sum over the taps of weight * row_t[i], in float, tap 0 first.
void AverageRowsScalar(const uint8_t* first_row, size_t stride, const float* w, int taps, int n,
                       float* out);
// One output row from the averaged source row `row` (padded: AreaRowPadding floats past the
// last pixel, zeros), rounded half to even and saturated.
void AverageColumnsScalar(const float* row, const AreaTaps& tx, int channels, int out_w,
                          uint8_t* out);
// The same for output pixels [from, to) only (the vector pass's last pixel).
void AveragePixelsScalar(const float* row, const AreaTaps& tx, int channels, int from, int to,
                         uint8_t* out);
// Floats a row buffer needs past src_w * channels for AverageColumns* of `tx`.
inline size_t AreaRowPadding(const AreaTaps& tx, int channels) {
  return size_t(tx.max_taps + 2) * size_t(channels < 4 ? 4 : channels) + 8;
}

#if defined(__x86_64__)
// AVX2 versions of the above (transform_avx2.cc); call only where KernelIsaAvailable(kAvx2).
// Plans LinearRowAvx2 for rows of src_w pixels of cn channels (once per resize).
void PrepareLinearRowAvx2(int src_w, int cn, int out_w, LinearTaps* tx);
void LinearRowAvx2(const uint8_t* s, int src_w, int cn, const LinearTaps& tx, int out_w,
                   int16_t* h);
void LinearBlendAvx2(const int16_t* h0, const int16_t* h1, int b0, int b1, int n, uint8_t* out);
void AverageRowsAvx2(const uint8_t* first_row, size_t stride, const float* w, int taps, int n,
                     float* out);
void AverageColumnsAvx2(const float* row, const AreaTaps& tx, int channels, int out_w,
                        uint8_t* out);
// The final pass (WriteOutput) with AVX2; false, having written nothing, where it has no
// vector form (float32 without an exact affine form, a dtype or channel count it lacks).
bool WriteOutputAvx2(const PixelView& src, bool flip, const OutputSpec& spec, void* dst);
#endif

}  // namespace batchcast::pipeline::kernels
