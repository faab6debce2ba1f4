// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The AVX2 kernels of the transform chain (transform_kernels.h). The file is built for the
// baseline x86-64 like every other: each kernel carries its own target attribute and runs only
// after BestKernelIsa() found AVX2 and FMA. Each writes exactly what its scalar twin writes.
#include "pipeline/transform_kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

// FMA only where the result is checked against the scalar one (the output pass); the area
// average rounds every product and every sum as the scalar pass does, so its kernels are built
// without FMA (the compiler may not contract a multiply and an add it cannot emit).
#define BC_AVX2_FMA __attribute__((target("avx2,fma")))
#define BC_AVX2_ONLY __attribute__((target("avx2")))

namespace batchcast::pipeline::kernels {
namespace {

BC_AVX2_FMA inline __m256i Load2x16(const uint8_t* lo, const uint8_t* hi) {
  return _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)), 1);
}

// ((h0 * b0) >> 16) + ((h1 * b1) >> 16), then (+ 2) >> 2, for 16 values.
BC_AVX2_FMA inline __m256i Blend16(const int16_t* h0, const int16_t* h1, __m256i b0, __m256i b1) {
  const __m256i t = _mm256_add_epi16(
      _mm256_mulhi_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h0)), b0),
      _mm256_mulhi_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h1)), b1));
  return _mm256_srai_epi16(_mm256_add_epi16(t, _mm256_set1_epi16(2)), 2);
}

BC_AVX2_ONLY inline __m256 Bytes8ToFloats(const uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

}  // namespace

void PrepareLinearRowAvx2(int src_w, int cn, int out_w, LinearTaps* tx) {
  const int n = out_w * cn;
  tx->blocks.resize(size_t(n / 16));
  tx->vector_values = 0;
  for (int block = 0; block < n / 16; ++block) {
    LinearTaps::Block& b = tx->blocks[size_t(block)];
    bool ok = true;
    for (int slot = 0; slot < 4; ++slot) {
      static constexpr int kQuarterOfSlot[4] = {0, 2, 1, 3};
      const int j0 = 16 * block + 4 * kQuarterOfSlot[slot];  // the quarter's first value
      const int p0 = j0 / cn;
      const int base = tx->first[size_t(p0)] * cn;
      b.offset[slot] = base;
      ok = ok && base + 16 <= src_w * cn;  // the load stays inside the row
      for (int i = 0; i < 4; ++i) {
        const int p = (j0 + i) / cn, c = (j0 + i) % cn;
        const int tap0 = tx->first[size_t(p)] * cn + c - base;
        const int tap1 = tx->second[size_t(p)] * cn + c - base;
        ok = ok && tap1 == tap0 + cn && tap1 < 16;
        int8_t* m = &b.shuffle[slot * 16 + i * 4];
        m[0] = static_cast<int8_t>(tap0);
        m[1] = -1;  // zero: the byte becomes an int16
        m[2] = static_cast<int8_t>(tap1);
        m[3] = -1;
        b.weights[slot * 8 + i * 2] = tx->weight[size_t(p) * 2];
        b.weights[slot * 8 + i * 2 + 1] = tx->weight[size_t(p) * 2 + 1];
      }
    }
    if (!ok) break;  // the first taps only grow: no later block fits either
    tx->vector_values = 16 * (block + 1);
  }
}

// Sixteen values per step from the plan; the rest of the row as LinearRowScalar makes it.
BC_AVX2_FMA void LinearRowAvx2(const uint8_t* s, int src_w, int cn, const LinearTaps& tx, int out_w,
                               int16_t* h) {
  int j = 0;
  for (const LinearTaps::Block& b : tx.blocks) {
    if (j >= tx.vector_values) break;
    const __m256i a =
        _mm256_shuffle_epi8(Load2x16(s + b.offset[0], s + b.offset[1]),
                            _mm256_load_si256(reinterpret_cast<const __m256i*>(b.shuffle)));
    const __m256i c =
        _mm256_shuffle_epi8(Load2x16(s + b.offset[2], s + b.offset[3]),
                            _mm256_load_si256(reinterpret_cast<const __m256i*>(b.shuffle + 32)));
    const __m256i wa = _mm256_load_si256(reinterpret_cast<const __m256i*>(b.weights));
    const __m256i wc = _mm256_load_si256(reinterpret_cast<const __m256i*>(b.weights + 16));
    const __m256i va = _mm256_srai_epi32(_mm256_madd_epi16(a, wa), 4);  // quarters 0 | 2
    const __m256i vc = _mm256_srai_epi32(_mm256_madd_epi16(c, wc), 4);  // quarters 1 | 3
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + j), _mm256_packs_epi32(va, vc));
    j += 16;
  }
  for (int p = j / cn, c = j % cn; j < out_w * cn; ++j) {  // p, c: the pixel and channel of j
    const int w0 = tx.weight[size_t(p) * 2], w1 = tx.weight[size_t(p) * 2 + 1];
    h[j] = static_cast<int16_t>((s[size_t(tx.first[size_t(p)]) * cn + c] * w0 +
                                 s[size_t(tx.second[size_t(p)]) * cn + c] * w1) >>
                                4);
    if (++c == cn) c = 0, ++p;
  }
}

BC_AVX2_FMA void LinearBlendAvx2(const int16_t* h0, const int16_t* h1, int b0, int b1, int n,
                                 uint8_t* out) {
  const __m256i vb0 = _mm256_set1_epi16(static_cast<int16_t>(b0));
  const __m256i vb1 = _mm256_set1_epi16(static_cast<int16_t>(b1));
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i p = _mm256_packus_epi16(Blend16(h0 + i, h1 + i, vb0, vb1),
                                          Blend16(h0 + i + 16, h1 + i + 16, vb0, vb1));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_permute4x64_epi64(p, 0xd8));
  }
  for (; i + 16 <= n; i += 16) {
    const __m256i a = Blend16(h0 + i, h1 + i, vb0, vb1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm_packus_epi16(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)));
  }
  LinearBlendScalar(h0 + i, h1 + i, b0, b1, n - i, out + i);
}

// As AverageRowsScalar, eight values per vector: tap 0's product, then each further tap's
// product added, every product and sum rounded to float.
BC_AVX2_ONLY void AverageRowsAvx2(const uint8_t* first_row, size_t stride, const float* w, int taps,
                                  int n, float* out) {
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 w0 = _mm256_set1_ps(w[0]);
    __m256 a0 = _mm256_mul_ps(w0, Bytes8ToFloats(first_row + i));
    __m256 a1 = _mm256_mul_ps(w0, Bytes8ToFloats(first_row + i + 8));
    for (int t = 1; t < taps; ++t) {
      const uint8_t* row = first_row + size_t(t) * stride + i;
      const __m256 wt = _mm256_set1_ps(w[t]);
      a0 = _mm256_add_ps(a0, _mm256_mul_ps(wt, Bytes8ToFloats(row)));
      a1 = _mm256_add_ps(a1, _mm256_mul_ps(wt, Bytes8ToFloats(row + 8)));
    }
    _mm256_storeu_ps(out + i, a0);
    _mm256_storeu_ps(out + i + 8, a1);
  }
  for (; i < n; ++i) {
    float acc = 0;
    for (int t = 0; t < taps; ++t) acc += w[t] * first_row[size_t(t) * stride + i];
    out[i] = acc;
  }
}

// As AverageColumnsScalar, two output pixels per vector (one per 128-bit lane). The pixel
// with fewer taps adds weight-0 products of finite values (the row is padded with zeros),
// which leave its sum unchanged.
BC_AVX2_ONLY void AverageColumnsAvx2(const float* row, const AreaTaps& tx, int channels, int out_w,
                                     uint8_t* out) {
  if (channels != 3 && channels != 4) {
    AverageColumnsScalar(row, tx, channels, out_w, out);
    return;
  }
  const __m256 magic = _mm256_set1_ps(12582912.0f);
  const __m256i top = _mm256_set1_epi32(255);
  int dx = 0;
  for (; dx + 2 <= out_w; dx += 2) {
    const float* w0 = &tx.weight[size_t(dx) * tx.max_taps];
    const float* w1 = w0 + tx.max_taps;
    const float* p0 = row + size_t(tx.first[size_t(dx)]) * channels;
    const float* p1 = row + size_t(tx.first[size_t(dx) + 1]) * channels;
    const int taps = std::max(tx.count[size_t(dx)], tx.count[size_t(dx) + 1]);
    __m256 acc = _mm256_setzero_ps();
    for (int t = 0; t < taps; ++t) {
      const __m256 v =
          _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p0 + size_t(t) * channels)),
                               _mm_loadu_ps(p1 + size_t(t) * channels), 1);
      const __m256 wt =
          _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(w0[t])), _mm_set1_ps(w1[t]), 1);
      acc = _mm256_add_ps(acc, _mm256_mul_ps(wt, v));
    }
    const __m256i q =
        _mm256_min_epi32(_mm256_cvttps_epi32(_mm256_sub_ps(_mm256_add_ps(acc, magic), magic)), top);
    const __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(q, q), _mm256_setzero_si256());
    const uint32_t px0 = uint32_t(_mm_cvtsi128_si32(_mm256_castsi256_si128(b)));
    const uint32_t px1 = uint32_t(_mm_cvtsi128_si32(_mm256_extracti128_si256(b, 1)));
    std::memcpy(out + size_t(dx) * channels, &px0, size_t(channels));
    std::memcpy(out + size_t(dx + 1) * channels, &px1, size_t(channels));
  }
  AveragePixelsScalar(row, tx, channels, dx, out_w, out);  // the last pixel of an odd width
}

namespace {

// The final pass for one (source channels, output channels, output type): rows in blocks of
// 8 pixels. Each block is read once (8 or 24 bytes, nothing past the row), and each of the
// output's `kOut` chunks of 8 values (a plane's 8 values for CHW, 8 consecutive values for HWC)
// is gathered with two byte shuffles, then stored as bytes or as floats from the checked
// affine form (double precision, one rounding to float: the value table's values).
template <int kSrc, int kOut, bool kFloat>
BC_AVX2_FMA void WriteRows(const PixelView& src, bool flip, const OutputSpec& spec, void* dst) {
  const int w = src.width, h = src.height;
  const bool chw = spec.layout.layout == Layout::kCHW;
  const size_t plane = size_t(w) * h;
  __m128i lo[kOut], hi[kOut];
  __m256d scale_lo[kOut], scale_hi[kOut], offset_lo[kOut], offset_hi[kOut];
  for (int k = 0; k < kOut; ++k) {
    alignas(16) uint8_t mlo[16], mhi[16];
    alignas(32) double s[8], o[8];
    for (int i = 0; i < 16; ++i) {
      mlo[i] = mhi[i] = 0x80;
      if (i >= 8) continue;
      const int e = 8 * k + i;  // HWC: the block's e-th value
      const int pixel = chw ? i : e / kOut, c = chw ? k : e % kOut;
      const int from = flip ? 7 - pixel : pixel;
      const int byte = from * kSrc + (kSrc == 1 ? 0 : c);
      (byte < 16 ? mlo : mhi)[i] = static_cast<uint8_t>(byte < 16 ? byte : byte - 16);
      s[i] = spec.scale[c];
      o[i] = spec.offset[c];
    }
    lo[k] = _mm_load_si128(reinterpret_cast<const __m128i*>(mlo));
    hi[k] = _mm_load_si128(reinterpret_cast<const __m128i*>(mhi));
    scale_lo[k] = _mm256_load_pd(s);
    scale_hi[k] = _mm256_load_pd(s + 4);
    offset_lo[k] = _mm256_load_pd(o);
    offset_hi[k] = _mm256_load_pd(o + 4);
  }
  using Out = std::conditional_t<kFloat, float, uint8_t>;
  Out* out = static_cast<Out*>(dst);
  const float* lut = spec.lut.data();
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = src.data + size_t(y) * src.stride;
    const size_t first = size_t(y) * w;  // output pixel index of the row's pixel 0
    int x = 0;
    for (; x + 8 <= w; x += 8) {
      const uint8_t* p = row + size_t(flip ? w - 8 - x : x) * kSrc;
      __m128i a, b = _mm_setzero_si128();
      if constexpr (kSrc == 3) {
        a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 16));
      } else {
        a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
      }
      for (int k = 0; k < kOut; ++k) {
        __m128i bytes = _mm_shuffle_epi8(a, lo[k]);
        if constexpr (kSrc == 3) bytes = _mm_or_si128(bytes, _mm_shuffle_epi8(b, hi[k]));
        Out* o = chw ? out + size_t(k) * plane + first + x : out + (first + x) * kOut + 8 * k;
        if constexpr (kFloat) {
          const __m256i v = _mm256_cvtepu8_epi32(bytes);
          const __m128 f0 = _mm256_cvtpd_ps(_mm256_fmadd_pd(
              _mm256_cvtepi32_pd(_mm256_castsi256_si128(v)), scale_lo[k], offset_lo[k]));
          const __m128 f1 = _mm256_cvtpd_ps(_mm256_fmadd_pd(
              _mm256_cvtepi32_pd(_mm256_extracti128_si256(v, 1)), scale_hi[k], offset_hi[k]));
          _mm256_storeu_ps(o, _mm256_set_m128(f1, f0));
        } else {
          _mm_storel_epi64(reinterpret_cast<__m128i*>(o), bytes);
        }
      }
    }
    for (; x < w; ++x) {  // the last w % 8 pixels, from the value table
      const uint8_t* px = row + size_t(flip ? w - 1 - x : x) * kSrc;
      for (int c = 0; c < kOut; ++c) {
        const uint8_t v = px[kSrc == 1 ? 0 : c];
        Out* o = chw ? out + size_t(c) * plane + first + x : out + (first + x) * kOut + c;
        if constexpr (kFloat)
          *o = lut[c * 256 + v];
        else
          *o = v;
      }
    }
  }
}

}  // namespace

bool WriteOutputAvx2(const PixelView& src, bool flip, const OutputSpec& spec, void* dst) {
  const SampleLayout& l = spec.layout;
  const bool f32 = l.dtype == DType::kFloat32;
  if (!f32 && l.dtype != DType::kUint8) return false;
  if (f32 && !spec.affine) return false;
  const int sc = src.channels, oc = l.channels;
  if (sc == 3 && oc == 3) {
    f32 ? WriteRows<3, 3, true>(src, flip, spec, dst)
        : WriteRows<3, 3, false>(src, flip, spec, dst);
  } else if (sc == 1 && oc == 3) {
    f32 ? WriteRows<1, 3, true>(src, flip, spec, dst)
        : WriteRows<1, 3, false>(src, flip, spec, dst);
  } else if (sc == 1 && oc == 1) {
    f32 ? WriteRows<1, 1, true>(src, flip, spec, dst)
        : WriteRows<1, 1, false>(src, flip, spec, dst);
  } else {
    return false;
  }
  return true;
}

}  // namespace batchcast::pipeline::kernels

#endif  // __x86_64__
