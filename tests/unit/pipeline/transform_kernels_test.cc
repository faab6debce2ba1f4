// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The transform kernels (transform_kernels.h): the AVX2 and the scalar kernels write the same
// bytes for every input, on random sizes (odd widths, widths that are not a multiple of the
// vector length, 1-pixel images), every channel count and every output form, and never write
// outside their output; the linear resize is OpenCV 4.6's INTER_LINEAR byte for byte; the
// float32 pass keeps the value table's values (the affine form is used only where it is exact).
#include "core/sanitizers.h"
#include "pipeline/transform.h"

#include <gtest/gtest.h>

#include <opencv2/core/version.hpp>
#include <opencv2/imgproc.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace batchcast::pipeline {
namespace {

constexpr uint8_t kCanary = 0xa5;
constexpr size_t kMargin = 64;  // canary bytes after every output buffer

// A random image of w x h x channels with `pad` pixels of noise after every row (a box in a
// larger decode has such a stride); photo-like (smooth) or noise.
cv::Mat RandomImage(std::mt19937& rng, int w, int h, int channels, int pad, bool smooth) {
  cv::Mat whole(h, w + pad, CV_8UC(channels));
  cv::RNG fill(rng());
  fill.fill(whole, cv::RNG::UNIFORM, 0, 256);
  if (smooth && w >= 5 && h >= 5) cv::GaussianBlur(whole, whole, cv::Size(5, 5), 1.5);
  return whole;
}

// Resizes `box` of `img` with `isa` into a buffer with a canary tail; checks the tail.
std::vector<uint8_t> Resize(const cv::Mat& img, const CropBox& box, int out_w, int out_h,
                            KernelIsa isa) {
  const int c = img.channels();
  std::vector<uint8_t> out(size_t(out_w) * out_h * c + kMargin, kCanary);
  ResizeBox(PixelView{img.data, img.step, img.cols, img.rows, c}, box, out_w, out_h, out.data(),
            size_t(out_w) * c, isa);
  for (size_t i = out.size() - kMargin; i < out.size(); ++i)
    EXPECT_EQ(out[i], kCanary) << KernelIsaName(isa) << " wrote past its output";
  out.resize(out.size() - kMargin);
  return out;
}

std::vector<KernelIsa> Isas() {
  std::vector<KernelIsa> isas = {KernelIsa::kScalar};
  if (KernelIsaAvailable(KernelIsa::kAvx2)) isas.push_back(KernelIsa::kAvx2);
  return isas;
}

TEST(TransformKernelsTest, BestIsaIsAvailableAndNamed) {
  EXPECT_TRUE(KernelIsaAvailable(BestKernelIsa()));
  EXPECT_TRUE(KernelIsaAvailable(KernelIsa::kScalar));
  EXPECT_STREQ(KernelIsaName(KernelIsa::kScalar), "scalar");
  EXPECT_STREQ(KernelIsaName(KernelIsa::kAvx2), "avx2");
}

// Shrinks below 2x and enlargements: ResizeBox's own linear pass, in every instruction set,
// against cv::resize INTER_LINEAR on the same box. OpenCV 4.6 (Debian 12's, which the project
// builds against) rounds every value with its vector formula, which the pass reproduces; another
// OpenCV may round the last values of a row with its scalar formula (one level more, rarely).
TEST(TransformKernelsTest, LinearResizeIsOpenCvInterLinearByteForByte) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const bool exact = CV_VERSION_MAJOR == 4 && CV_VERSION_MINOR == 6;
  int64_t values = 0, differ = 0;
  // A quarter of the rounds under a sanitizer (the same code paths; -O0 ASan made this test
  // 24 s of make test's CPU); the normal build checks all 400 random boxes.
  const int rounds = BC_SANITIZED ? 100 : 400;
  for (int round = 0; round < rounds; ++round) {
    const int channels = round % 4 == 0 ? 1 : (round % 4 == 1 ? 4 : 3);
    const int box_w = uniform(1, round % 5 == 0 ? 12 : 300);
    const int box_h = uniform(1, round % 7 == 0 ? 12 : 300);
    // Each side: enlarged up to 3x or shrunk by less than 2 (2x or more is the area pass).
    auto side = [&](int box) { return uniform(box / 2 + 1, 3 * box); };
    const int out_w = side(box_w), out_h = side(box_h);
    const CropBox box{uniform(0, 9), uniform(0, 9), box_w, box_h};
    const cv::Mat img = RandomImage(rng, box.x + box_w + uniform(0, 9),
                                    box.y + box_h + uniform(0, 9), channels, uniform(0, 3),
                                    round % 2 == 0);
    cv::Mat want;
    cv::resize(img(cv::Rect(box.x, box.y, box_w, box_h)), want, cv::Size(out_w, out_h), 0, 0,
               cv::INTER_LINEAR);
    ASSERT_TRUE(want.isContinuous());
    for (KernelIsa isa : Isas()) {
      const auto got = Resize(img, box, out_w, out_h, isa);
      for (size_t i = 0; i < got.size(); ++i) {
        const int d = std::abs(int(got[i]) - int(want.data[i]));
        if (exact) {
          ASSERT_EQ(d, 0) << KernelIsaName(isa) << ", round " << round << ": box " << box_w
                          << "x" << box_h << " to " << out_w << "x" << out_h << "x" << channels
                          << ", value " << i;
        } else {
          ASSERT_LE(d, 1) << KernelIsaName(isa) << ", round " << round;
        }
        differ += d != 0;
        ++values;
      }
    }
  }
  EXPECT_GT(values, 0);
  if (!exact) {
    EXPECT_LE(differ * 100, values);
  }
}

// Every path of ResizeBox (linear, our area average, OpenCV's whole-number and enlarging area
// cases) gives the same bytes in every instruction set, with odd sizes and 1, 3 and 4 channels.
TEST(TransformKernelsTest, ResizeBoxIsTheSameInEveryInstructionSet) {
  if (!KernelIsaAvailable(KernelIsa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2 and FMA";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int round = 0; round < 600; ++round) {
    const int channels = round % 3 == 0 ? 1 : (round % 3 == 1 ? 3 : 4);
    const int out_w = uniform(1, 70), out_h = uniform(1, 70);
    int box_w = 0, box_h = 0;
    switch (round % 4) {
      case 0:  // linear
        box_w = uniform(std::max(1, out_w / 3), 2 * out_w - 1);
        box_h = uniform(std::max(1, out_h / 3), 2 * out_h - 1);
        break;
      case 1:  // area, ours
        box_w = uniform(2 * out_w, 5 * out_w + 3);
        box_h = uniform(out_h, 5 * out_h + 3);
        break;
      case 2:  // area by whole numbers (OpenCV)
        box_w = out_w * uniform(2, 4);
        box_h = out_h * uniform(1, 4);
        break;
      default:  // shrinks by 2x or more one way, enlarges the other (OpenCV's area)
        box_w = uniform(2 * out_w, 4 * out_w);
        box_h = uniform(1, std::max(1, out_h - 1));
        break;
    }
    const CropBox box{uniform(0, 5), uniform(0, 5), box_w, box_h};
    const cv::Mat img = RandomImage(rng, box.x + box_w + uniform(0, 5),
                                    box.y + box_h + uniform(0, 5), channels, uniform(0, 3),
                                    round % 2 == 0);
    const auto scalar = Resize(img, box, out_w, out_h, KernelIsa::kScalar);
    const auto avx2 = Resize(img, box, out_w, out_h, KernelIsa::kAvx2);
    ASSERT_EQ(scalar, avx2) << "round " << round << ": box " << box_w << "x" << box_h << " to "
                            << out_w << "x" << out_h << "x" << channels;
  }
}

// The image is exactly as big as the box, which ends at the image's last byte: the vector
// passes read nothing past it (checked by AddressSanitizer in the sanitizer builds) and agree.
TEST(TransformKernelsTest, ResizeReadsOnlyTheBoxAtTheEndOfTheImage) {
  std::mt19937 rng(7);
  for (int channels : {1, 3, 4}) {
    for (int w : {1, 2, 3, 5, 17, 64, 131}) {
      for (auto [out_w, out_h] : {std::pair{w + 3, 9}, std::pair{std::max(1, w * 2 / 3), 7},
                                  std::pair{std::max(1, w / 3), 5}}) {
        std::vector<uint8_t> px(size_t(w) * 11 * channels);
        for (auto& b : px) b = uint8_t(rng());
        const PixelView view{px.data(), size_t(w) * channels, w, 11, channels};
        std::vector<std::vector<uint8_t>> outs;
        for (KernelIsa isa : Isas()) {
          outs.emplace_back(size_t(out_w) * out_h * channels);
          ResizeBox(view, FullBox(w, 11), out_w, out_h, outs.back().data(),
                    size_t(out_w) * channels, isa);
        }
        for (const auto& o : outs)
          ASSERT_EQ(o, outs[0]) << w << " to " << out_w << "x" << channels;
      }
    }
  }
}

// Every output form, flip or not, widths 1..37 and a few rows, strided sources, four value
// tables: the instruction sets write the same bytes, nothing outside the output, and every
// value is the source's byte or its table value.
TEST(TransformKernelsTest, WriteOutputIsTheSameInEveryInstructionSet) {
  std::mt19937 rng(11);
  const std::vector<std::pair<std::vector<double>, std::vector<double>>> tables = {
      {{}, {}},                                        // v / 255
      {{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}},  // ImageNet
      {{0.5, 0.5, 0.5}, {0.5, 0.5, 0.5}},              // a ViT's
      {{0.1, 0.9, 0.33}, {0.07, 1.7, 0.3}}};
  int cases = 0;
  for (const auto& [src_c, out_c] : {std::pair{3, 3}, std::pair{1, 3}, std::pair{1, 1}}) {
    for (DType dtype : {DType::kUint8, DType::kFloat32}) {
      for (Layout layout : {Layout::kCHW, Layout::kHWC}) {
        for (const auto& [mean, stdv] : tables) {
          if (dtype == DType::kUint8 && !mean.empty()) continue;
          for (int w : {1, 2, 7, 8, 9, 15, 16, 17, 24, 31, 37}) {
            const int h = 1 + w % 4, pad = w % 3 * src_c;
            std::vector<uint8_t> src(size_t(w * src_c + pad) * h);
            for (auto& b : src) b = uint8_t(rng());
            const PixelView view{src.data(), size_t(w * src_c + pad), w, h, src_c};
            OutputSpec spec;
            spec.layout = SampleLayout{out_c, h, w, dtype, layout};
            if (dtype == DType::kFloat32) {
              std::vector<double> m(mean.begin(), mean.begin() + (mean.empty() ? 0 : out_c));
              std::vector<double> s(stdv.begin(), stdv.begin() + (stdv.empty() ? 0 : out_c));
              BuildOutputLut(m, s, &spec);
              ASSERT_TRUE(spec.affine) << "the affine form should be exact for these tables";
            }
            for (bool flip : {false, true}) {
              std::vector<std::vector<uint8_t>> outs;
              for (KernelIsa isa : Isas()) {
                outs.emplace_back(spec.layout.bytes() + kMargin, kCanary);
                WriteOutput(view, flip, spec, outs.back().data(), isa);
                for (size_t i = spec.layout.bytes(); i < outs.back().size(); ++i)
                  ASSERT_EQ(outs.back()[i], kCanary)
                      << KernelIsaName(isa) << " wrote past its output";
              }
              for (const auto& o : outs)
                ASSERT_EQ(o, outs[0]) << "src " << src_c << " out " << out_c << " w " << w
                                      << (dtype == DType::kFloat32 ? " float32" : " uint8")
                                      << (layout == Layout::kCHW ? " chw" : " hwc")
                                      << (flip ? " flip" : "");
              for (int y = 0; y < h; ++y) {
                for (int x = 0; x < w; ++x) {
                  for (int c = 0; c < out_c; ++c) {
                    const int sx = flip ? w - 1 - x : x;
                    const uint8_t v =
                        src[size_t(y) * view.stride + size_t(sx) * src_c + (src_c == 1 ? 0 : c)];
                    const size_t i = layout == Layout::kCHW ? (size_t(c) * h + y) * w + x
                                                            : (size_t(y) * w + x) * out_c + c;
                    if (dtype == DType::kUint8) {
                      ASSERT_EQ(outs[0][i], v);
                    } else {
                      float f;
                      std::memcpy(&f, outs[0].data() + i * 4, 4);
                      ASSERT_EQ(f, spec.lut[size_t(c) * 256 + v]);
                    }
                  }
                }
              }
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 3 * 2 * (1 + 4) * 11 * 2);  // channel pairs, layouts, tables, widths, flips
}

// The affine form equals the table bit for bit for ImageNet's mean and std, and a pass without
// an exact affine form reads the table: a table entry changed by hand reaches the output in
// every instruction set.
TEST(TransformKernelsTest, FloatPassUsesTheTableWhereTheAffineFormIsNotExact) {
  OutputSpec spec;
  spec.layout = SampleLayout{3, 2, 19, DType::kFloat32, Layout::kCHW};
  BuildOutputLut({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}, &spec);
  ASSERT_TRUE(spec.affine);
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v)
      ASSERT_EQ(static_cast<float>(std::fma(double(v), spec.scale[c], spec.offset[c])),
                spec.lut[size_t(c) * 256 + v]);
  spec.affine = false;
  spec.lut[1 * 256 + 77] = 1234.5f;  // channel 1, value 77
  std::vector<uint8_t> src(size_t(19) * 2 * 3, 77);
  for (KernelIsa isa : Isas()) {
    std::vector<float> out(size_t(3) * 2 * 19);
    WriteOutput(PixelView{src.data(), 19 * 3, 19, 2, 3}, true, spec, out.data(), isa);
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_EQ(out[i], i / 38 == 1 ? 1234.5f : spec.lut[(i / 38) * 256 + 77])
          << KernelIsaName(isa);
  }
}

}  // namespace
}  // namespace batchcast::pipeline
