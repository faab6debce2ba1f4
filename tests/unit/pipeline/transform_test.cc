// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Pixel-exact checks of every transform against hand-computed values on tiny images.
#include "pipeline/transform.h"

#include <gtest/gtest.h>

#include <opencv2/imgproc.hpp>

#include <cmath>
#include <random>

#include "tests/unit/pipeline/memory_reader.h"

namespace batchcast::pipeline {
namespace {

// A raw H x W x C image whose pixel (y, x, c) is 100 * c + 10 * y + x.
std::vector<uint8_t> Pattern(int h, int w, int c) {
  std::vector<uint8_t> px(size_t(h) * w * c);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) px[(size_t(y) * w + x) * c + k] = uint8_t(100 * k + 10 * y + x);
  return px;
}

Options BaseOptions() {
  Options o;
  o.threads = 1;
  return o;
}

// Runs one batch over a raw in-memory dataset and returns the output bytes.
std::vector<uint8_t> RunRaw(const Options& o, int h, int w, int c,
                            std::vector<std::vector<uint8_t>> samples, SampleLayout* layout) {
  auto reader = testing::MemoryReader::Raw(h, w, c, std::move(samples));
  auto p = Pipeline::Create(o, reader);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  *layout = (*p)->OutputLayout();
  const int64_t n = reader->info().num_samples;
  std::vector<int64_t> idx(n), labels(n);
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  std::vector<uint8_t> out(layout->bytes() * n);
  BatchResult result;
  Status s = (*p)->RunBatch(BatchRequest{0, idx, 0, out.data(), labels.data()}, &result);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(result.written, n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(labels[i], 1000 + i);
  return out;
}

TEST(TransformTest, RawPassthroughHwcIsIdentity) {
  Options o = BaseOptions();
  o.layout = "hwc";
  SampleLayout l;
  auto out = RunRaw(o, 3, 5, 3, {Pattern(3, 5, 3)}, &l);
  EXPECT_EQ(l.height, 3);
  EXPECT_EQ(l.width, 5);
  EXPECT_EQ(out, Pattern(3, 5, 3));
}

TEST(TransformTest, ChwTransposesChannelsToPlanes) {
  SampleLayout l;
  auto out = RunRaw(BaseOptions(), 3, 5, 3, {Pattern(3, 5, 3)}, &l);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 5; ++x) ASSERT_EQ(out[(c * 3 + y) * 5 + x], 100 * c + 10 * y + x);
}

TEST(TransformTest, FlipMirrorsColumns) {
  OutputSpec spec;
  spec.layout = SampleLayout{3, 3, 5, DType::kUint8, Layout::kCHW};
  auto px = Pattern(3, 5, 3);
  std::vector<uint8_t> out(spec.layout.bytes());
  WriteOutput(PixelView{px.data(), 15, 5, 3, 3}, true, spec, out.data());
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 5; ++x) ASSERT_EQ(out[(c * 3 + y) * 5 + x], 100 * c + 10 * y + (4 - x));
  spec.layout.layout = Layout::kHWC;
  WriteOutput(PixelView{px.data(), 15, 5, 3, 3}, true, spec, out.data());
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 5; ++x)
      for (int c = 0; c < 3; ++c) ASSERT_EQ(out[(y * 5 + x) * 3 + c], 100 * c + 10 * y + (4 - x));
}

// The float32 CHW pass, flipped and not, RGB and gray sources, against the per-value formula.
TEST(TransformTest, Float32ChwFlipWritesEveryPlaneFromTheMirroredPixel) {
  OutputSpec spec;
  spec.layout = SampleLayout{3, 4, 7, DType::kFloat32, Layout::kCHW};
  BuildOutputLut({0.5, 0.25, 0.125}, {0.5, 0.25, 2}, &spec);
  for (int sc : {1, 3}) {
    for (bool flip : {false, true}) {
      auto px = Pattern(4, 7, sc);
      std::vector<float> out(size_t(3) * 4 * 7);
      WriteOutput(PixelView{px.data(), size_t(7) * sc, 7, 4, sc}, flip, spec, out.data());
      for (int c = 0; c < 3; ++c)
        for (int y = 0; y < 4; ++y)
          for (int x = 0; x < 7; ++x) {
            const int sx = flip ? 6 - x : x;
            const uint8_t v = px[(size_t(y) * 7 + sx) * sc + (sc == 1 ? 0 : c)];
            ASSERT_EQ(out[(size_t(c) * 4 + y) * 7 + x], spec.lut[size_t(c) * 256 + v])
                << "sc " << sc << " flip " << flip << " c " << c << " y " << y << " x " << x;
          }
    }
  }
}

TEST(TransformTest, PipelineFlipsAboutHalfTheSamplesByTheirOwnDraw) {
  Options o = BaseOptions();
  o.flip = true;
  o.seed = 7;
  std::vector<std::vector<uint8_t>> samples(64, Pattern(2, 4, 1));
  SampleLayout l;
  auto out = RunRaw(o, 2, 4, 1, samples, &l);
  int flipped = 0;
  for (int i = 0; i < 64; ++i) {
    bool want = SampleRng(7, 0, i, RngStream::kFlip).Bernoulli(0.5);
    const uint8_t* img = out.data() + i * 8;
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 4; ++x) ASSERT_EQ(img[y * 4 + x], 10 * y + (want ? 3 - x : x));
    flipped += want;
  }
  EXPECT_GT(flipped, 16);
  EXPECT_LT(flipped, 48);
}

TEST(TransformTest, NormalizeIsXOver255MinusMeanOverStd) {
  Options o = BaseOptions();
  o.normalize = true;
  o.mean = "0.5,0.25,0.125";
  o.std = "0.5,0.25,2";
  SampleLayout l;
  auto out = RunRaw(o, 2, 3, 3, {Pattern(2, 3, 3)}, &l);
  ASSERT_EQ(l.dtype, DType::kFloat32);
  const double mean[] = {0.5, 0.25, 0.125}, std[] = {0.5, 0.25, 2};
  const float* f = reinterpret_cast<const float*>(out.data());
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 3; ++x) {
        double v = 100 * c + 10 * y + x;
        ASSERT_EQ(f[(c * 2 + y) * 3 + x], static_cast<float>((v / 255.0 - mean[c]) / std[c]));
      }
}

TEST(TransformTest, Float32WithoutNormalizeIsXOver255Hwc) {
  Options o = BaseOptions();
  o.dtype = "float32";
  o.layout = "hwc";
  SampleLayout l;
  auto out = RunRaw(o, 2, 2, 1, {{0, 51, 102, 255}}, &l);
  const float* f = reinterpret_cast<const float*>(out.data());
  EXPECT_EQ(f[0], 0.0f);
  EXPECT_EQ(f[1], static_cast<float>(51 / 255.0));
  EXPECT_EQ(f[2], static_cast<float>(102 / 255.0));
  EXPECT_EQ(f[3], 1.0f);
}

TEST(TransformTest, CenterCropTakesTheCentralSquare) {
  // 10 x 6: side round(0.875 * 6) = 5, x = (10 - 5) / 2 = 2, y = (6 - 5) / 2 = 0.
  EXPECT_EQ(CenterCropBox(10, 6), (CropBox{2, 0, 5, 5}));
  EXPECT_EQ(CenterCropBox(8, 16), (CropBox{0, 4, 7, 7}));
  Options o = BaseOptions();
  o.crop = "center";
  o.image_size = 5;
  o.layout = "hwc";
  SampleLayout l;
  auto out = RunRaw(o, 6, 10, 1, {Pattern(6, 10, 1)}, &l);
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 5; ++x) ASSERT_EQ(out[y * 5 + x], 10 * y + (x + 2));
}

TEST(TransformTest, AreaShrinkAveragesBlocks) {
  // 4 x 4 gray image of 2 x 2 blocks {10, 20; 30, 40} + 40 * block: each block averages to
  // 25 + 40 * block.
  std::vector<uint8_t> px(16);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x)
      px[y * 4 + x] = uint8_t(10 + 10 * (x % 2) + 20 * (y % 2) + 40 * ((y / 2) * 2 + x / 2));
  Options o = BaseOptions();
  o.image_size = 2;
  SampleLayout l;
  auto out = RunRaw(o, 4, 4, 1, {px}, &l);
  EXPECT_EQ(out, (std::vector<uint8_t>{25, 65, 105, 145}));
}

// ResizeBox's own area averaging (shrinks by a factor that is not a whole number in both
// dimensions) against OpenCV's INTER_AREA, on random boxes of random images: the sums are
// rounded in another order, so a value may differ by one level, rarely.
TEST(TransformTest, AreaShrinkEqualsOpenCvInterAreaWithinOneLevel) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int64_t values = 0, differ = 0, cases = 0;
  for (int round = 0; round < 300; ++round) {
    const int channels = round % 3 == 0 ? 1 : 3;
    const int out_w = uniform(1, 60), out_h = uniform(1, 60);
    // At least one dimension shrinks by 2x or more (the area case), neither enlarges.
    const bool wide = round % 2 == 0;
    const int box_w = wide ? uniform(2 * out_w, 4 * out_w + 3) : uniform(out_w, 4 * out_w + 3);
    const int box_h = wide ? uniform(out_h, 4 * out_h + 3) : uniform(2 * out_h, 4 * out_h + 3);
    const CropBox box{uniform(0, 7), uniform(0, 7), box_w, box_h};
    const int w = box.x + box_w + uniform(0, 5), h = box.y + box_h + uniform(0, 5);
    cv::Mat src(h, w, CV_8UC(channels));
    cv::randu(src, 0, 256);
    if (round % 4 < 2) cv::GaussianBlur(src, src, cv::Size(5, 5), 1.5);  // photo-like
    const PixelView view{src.data, src.step, w, h, channels};
    std::vector<uint8_t> got(size_t(out_w) * out_h * channels);
    ResizeBox(view, box, out_w, out_h, got.data(), size_t(out_w) * channels);
    cv::Mat want;
    cv::resize(src(cv::Rect(box.x, box.y, box_w, box_h)), want, cv::Size(out_w, out_h), 0, 0,
               cv::INTER_AREA);
    ++cases;
    for (size_t i = 0; i < got.size(); ++i) {
      const int d = std::abs(int(got[i]) - int(want.data[i]));
      ASSERT_LE(d, 1) << "round " << round << ": box " << box_w << "x" << box_h << " to "
                      << out_w << "x" << out_h << "x" << channels << ", value " << i;
      differ += d;
      ++values;
    }
  }
  EXPECT_EQ(cases, 300);
  EXPECT_LE(differ * 1000, values) << differ << " of " << values << " values differ";
}

TEST(TransformTest, AreaShrinkKeepsAConstantImageConstant) {
  for (int value : {0, 1, 127, 254, 255}) {
    cv::Mat src(97, 131, CV_8UC3, cv::Scalar(value, value, value));
    const PixelView view{src.data, src.step, src.cols, src.rows, 3};
    std::vector<uint8_t> got(size_t(29) * 31 * 3);
    ResizeBox(view, CropBox{3, 2, 125, 90}, 31, 29, got.data(), 31 * 3);
    for (uint8_t v : got) ASSERT_EQ(v, value);
  }
}

TEST(TransformTest, LinearEnlargeInterpolatesBetweenPixelCentres) {
  // Row [0, 100] to 4 columns with half-pixel centres: source x = -0.25 (clamped), 0.25,
  // 0.75, 1.25 (clamped) → 0, 25, 75, 100. Both rows are equal, so rows stay equal.
  Options o = BaseOptions();
  o.image_size = 4;
  o.layout = "hwc";
  o.channels = 3;  // gray source replicated to 3 channels in the final pass
  SampleLayout l;
  auto out = RunRaw(o, 2, 2, 1, {{0, 100, 0, 100}}, &l);
  ASSERT_EQ(out.size(), 4u * 4 * 3);
  const uint8_t want[] = {0, 25, 75, 100};
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x)
      for (int c = 0; c < 3; ++c) ASSERT_EQ(out[(y * 4 + x) * 3 + c], want[x]) << y << "," << x;
}

TEST(TransformTest, RandomResizedCropMatchesHandComputedBox) {
  // The first attempt of torchvision's get_params, computed by hand from the same draws.
  const int W = 640, H = 480;
  SampleRng draws(42, 3, 17, RngStream::kCrop);
  double area = W * H * (0.08 + (1.0 - 0.08) * draws.Uniform());
  double ratio = std::exp(std::log(0.75) + (std::log(4.0 / 3.0) - std::log(0.75)) * draws.Uniform());
  int w = int(std::nearbyint(std::sqrt(area * ratio))), h = int(std::nearbyint(std::sqrt(area / ratio)));
  ASSERT_TRUE(w <= W && h <= H);  // this seed succeeds on the first attempt
  int y = int(draws.UniformInt(0, H - h)), x = int(draws.UniformInt(0, W - w));
  SampleRng rng(42, 3, 17, RngStream::kCrop);
  EXPECT_EQ(RandomResizedCropBox(W, H, 0.08, 1.0, &rng), (CropBox{x, y, w, h}));
}

TEST(TransformTest, RandomResizedCropFallsBackToCenterCropClampedToTheRatio) {
  // 100 x 10 with the whole area requested: no box with ratio <= 4/3 fits in 10 rows, so
  // all 10 attempts fail and the fallback keeps h = 10, w = round(10 * 4/3) = 13.
  SampleRng rng(1, 0, 0, RngStream::kCrop);
  EXPECT_EQ(RandomResizedCropBox(100, 10, 1.0, 1.0, &rng), (CropBox{43, 0, 13, 10}));
  SampleRng rng2(1, 0, 0, RngStream::kCrop);
  EXPECT_EQ(RandomResizedCropBox(10, 100, 1.0, 1.0, &rng2), (CropBox{0, 43, 10, 13}));
}

TEST(TransformTest, RandomResizedCropBoxesStayInsideAndCoverTheScaleRange) {
  double min_frac = 1, max_frac = 0;
  for (uint64_t i = 0; i < 2000; ++i) {
    SampleRng rng(5, 0, i, RngStream::kCrop);
    CropBox b = RandomResizedCropBox(500, 375, 0.08, 1.0, &rng);
    ASSERT_GE(b.x, 0);
    ASSERT_GE(b.y, 0);
    ASSERT_LE(b.x + b.width, 500);
    ASSERT_LE(b.y + b.height, 375);
    double frac = double(b.width) * b.height / (500.0 * 375);
    min_frac = std::min(min_frac, frac);
    max_frac = std::max(max_frac, frac);
  }
  EXPECT_LT(min_frac, 0.1);
  EXPECT_GT(max_frac, 0.7);
}

TEST(TransformTest, ScaleBoxCoversTheOriginalBoxAtTheDecodedSize) {
  // Box [13, 113) x [7, 207) at 1/4: columns [3, 29), rows [1, 52).
  EXPECT_EQ(ScaleBox(CropBox{13, 7, 100, 200}, 2, 125, 94), (CropBox{3, 1, 26, 51}));
  EXPECT_EQ(ScaleBox(CropBox{13, 7, 100, 200}, 8, 500, 375), (CropBox{13, 7, 100, 200}));
  EXPECT_EQ(ScaleBox(CropBox{0, 0, 500, 375}, 4, 250, 188), (CropBox{0, 0, 250, 188}));
}

TEST(SampleRngTest, IsAPureFunctionOfItsKey) {
  SampleRng a(1, 2, 3, RngStream::kCrop), b(1, 2, 3, RngStream::kCrop);
  SampleRng c(1, 2, 4, RngStream::kCrop), d(1, 3, 3, RngStream::kCrop), e(1, 2, 3, RngStream::kFlip);
  uint64_t va = a.Next();
  EXPECT_EQ(va, b.Next());
  EXPECT_NE(va, c.Next());
  EXPECT_NE(va, d.Next());
  EXPECT_NE(va, e.Next());
  for (int i = 0; i < 1000; ++i) {
    int64_t v = a.UniformInt(3, 5);
    ASSERT_TRUE(v >= 3 && v <= 5);
    double u = a.Uniform();
    ASSERT_TRUE(u >= 0 && u < 1);
  }
}

}  // namespace
}  // namespace batchcast::pipeline
