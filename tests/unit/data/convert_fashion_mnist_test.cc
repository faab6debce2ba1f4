// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Converter round trips on the real Fashion-MNIST (Debian's dataset-fashion-mnist):
// every sample of both splits, labels intact, pixels equal to the IDX files, the PNG
// variant decoding to the same pixels, and output independent of the thread count.
// Under a sanitizer the train split's round trip uses the test split (the same code with
// 10000 samples instead of 60000) and the PNG split is converted with 2 threads only: the
// full runs took 33 s of the two sanitizer trees' CPU; the normal build runs them all.
#include <gtest/gtest.h>
#include <spng.h>

#include <memory>

#include "core/sanitizers.h"
#include "data/convert.h"
#include "data/dataset_inspect.h"
#include "data/dataset_reader.h"
#include "data/idx_reader.h"
#include "tests/unit/data/data_test_util.h"

namespace batchcast::data {
namespace {
using testing::FashionPath;
using testing::TempDir;

struct Split {
  IdxArray images, labels;
};

class FashionMnistConvertTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    for (const char* name : {"train", "t10k"}) {
      if (BC_SANITIZED && std::string(name) == "train") continue;  // not used there
      auto images = ReadIdxFile(FashionPath(std::string(name) + "-images-idx3-ubyte.gz"));
      auto labels = ReadIdxFile(FashionPath(std::string(name) + "-labels-idx1-ubyte.gz"));
      ASSERT_TRUE(images.ok() && labels.ok());
      (std::string(name) == "train" ? train_ : test_) = Split{*images, *labels};
    }
  }
  static void TearDownTestSuite() { delete dir_; }

  static Result<ConvertReport> Convert(const std::string& split, const std::string& encode,
                                       const std::string& out, int threads) {
    IdxConvertOptions o;
    o.images_path = FashionPath(split + "-images-idx3-ubyte.gz");
    o.labels_path = FashionPath(split + "-labels-idx1-ubyte.gz");
    o.out_path = out;
    o.encode = encode;
    o.threads = threads;
    o.class_names = FashionMnistClassNames();
    return ConvertIdx(o, nullptr);
  }

  static void ExpectRawEqualsIdx(const std::string& path, const Split& split) {
    auto r = DatasetReader::Open(path);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const int64_t n = split.labels.dims[0];
    ASSERT_EQ((*r)->info().num_samples, n);
    EXPECT_EQ((*r)->info().class_names, FashionMnistClassNames());
    EXPECT_EQ((*r)->info().raw_height, 28);
    EXPECT_EQ((*r)->info().raw_channels, 1);
    std::vector<uint8_t> px;
    int64_t pixel_mismatches = 0, label_mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE((*r)->ReadSample(i, &px).ok());
      pixel_mismatches += !std::equal(px.begin(), px.end(), split.images.data.begin() + i * 784);
      label_mismatches += (*r)->Label(i) != split.labels.data[size_t(i)];
    }
    EXPECT_EQ(pixel_mismatches, 0);
    EXPECT_EQ(label_mismatches, 0);
  }

  static TempDir* dir_;
  static Split train_, test_;
};
TempDir* FashionMnistConvertTest::dir_ = nullptr;
Split FashionMnistConvertTest::train_;
Split FashionMnistConvertTest::test_;

std::vector<uint8_t> DecodePngGray(const std::vector<uint8_t>& png) {
  std::unique_ptr<spng_ctx, void (*)(spng_ctx*)> ctx(spng_ctx_new(0), spng_ctx_free);
  spng_set_png_buffer(ctx.get(), png.data(), png.size());
  size_t size = 0;
  if (spng_decoded_image_size(ctx.get(), SPNG_FMT_G8, &size) != 0) return {};
  std::vector<uint8_t> out(size);
  if (spng_decode_image(ctx.get(), out.data(), size, SPNG_FMT_G8, 0) != 0) return {};
  return out;
}

TEST_F(FashionMnistConvertTest, RawTrainSplitRoundTripsEverySample) {
  const bool train = !BC_SANITIZED;
  auto rep = Convert(train ? "train" : "t10k", "raw", *dir_ / "train.h5", 2);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->samples, train ? 60000 : 10000);
  ExpectRawEqualsIdx(*dir_ / "train.h5", train ? train_ : test_);
}

TEST_F(FashionMnistConvertTest, RawTestSplitRoundTripsAndIsBalanced) {
  auto rep = Convert("t10k", "raw", *dir_ / "test.h5", 1);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ExpectRawEqualsIdx(*dir_ / "test.h5", test_);
  auto s = InspectDataset(*dir_ / "test.h5");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->class_counts, std::vector<int64_t>(10, 1000));
  EXPECT_EQ(s->width.min, 28);
  EXPECT_EQ(s->height.max, 28);
  EXPECT_EQ(s->stored_bytes, 10000 * 784);
}

TEST_F(FashionMnistConvertTest, PngTestSplitDecodesToIdxPixelsWhateverTheThreads) {
  auto two = Convert("t10k", "png", *dir_ / "png2.h5", 2);
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  auto r = DatasetReader::Open(*dir_ / "png2.h5");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->info().encoding, "png");
  std::vector<std::vector<uint8_t>> block;
  int64_t mismatches = 0;
  for (int64_t first = 0; first < 10000; first += 1000) {
    ASSERT_TRUE((*r)->ReadSamples(first, 1000, &block).ok());
    for (int64_t i = 0; i < 1000; ++i) {
      auto px = DecodePngGray(block[size_t(i)]);
      auto begin = test_.images.data.begin() + (first + i) * 784;
      mismatches += px.size() != 784 || !std::equal(px.begin(), px.end(), begin);
      mismatches += (*r)->Label(first + i) != test_.labels.data[size_t(first + i)];
    }
  }
  EXPECT_EQ(mismatches, 0);
  if (BC_SANITIZED) return;
  auto one = Convert("t10k", "png", *dir_ / "png1.h5", 1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  auto a = InspectDataset(*dir_ / "png1.h5");
  auto b = InspectDataset(*dir_ / "png2.h5");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->checksum, b->checksum);  // identical content with 1 and 2 threads
}

TEST_F(FashionMnistConvertTest, JpegTestSplitKeepsLabelsAndSizes) {
  auto rep = Convert("t10k", "jpeg", *dir_ / "jpeg.h5", 2);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  auto r = DatasetReader::Open(*dir_ / "jpeg.h5");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->info().encoding, "jpeg");
  EXPECT_EQ((*r)->info().num_samples, 10000);
  std::vector<uint8_t> bytes;
  ASSERT_TRUE((*r)->ReadSample(9999, &bytes).ok());
  EXPECT_EQ(bytes[0], 0xff);
  EXPECT_EQ((*r)->Label(9999), test_.labels.data[9999]);
  EXPECT_EQ((*r)->OriginalWidth(9999), 28);
}

TEST_F(FashionMnistConvertTest, MismatchedImagesAndLabelsFail) {
  IdxConvertOptions o;
  o.images_path = FashionPath("train-images-idx3-ubyte.gz");
  o.labels_path = FashionPath("t10k-labels-idx1-ubyte.gz");
  o.out_path = *dir_ / "mismatch.h5";
  auto rep = ConvertIdx(o, nullptr);
  ASSERT_FALSE(rep.ok());
  EXPECT_NE(rep.status().message().find("has 10000 labels but"), std::string::npos)
      << rep.status().message();
  EXPECT_FALSE(std::filesystem::exists(o.out_path));
}

TEST_F(FashionMnistConvertTest, MissingInputFileIsNamed) {
  IdxConvertOptions o;
  o.images_path = "/nonexistent/images.gz";
  o.labels_path = FashionPath("t10k-labels-idx1-ubyte.gz");
  o.out_path = *dir_ / "missing.h5";
  auto rep = ConvertIdx(o, nullptr);
  ASSERT_FALSE(rep.ok());
  EXPECT_EQ(rep.status().code(), StatusCode::kNotFound);
  EXPECT_NE(rep.status().message().find("/nonexistent/images.gz"), std::string::npos);
}

}  // namespace
}  // namespace batchcast::data
