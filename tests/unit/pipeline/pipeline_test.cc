// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The pipeline end to end over in-memory and HDF5 datasets: DCT-scaled decode through
// RunBatch, determinism across thread counts, and every bad input under both policies.
#include "pipeline/pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "data/dataset_writer.h"
#include "tests/unit/pipeline/memory_reader.h"
#include "tests/unit/pipeline/test_images.h"

namespace batchcast::pipeline {
namespace {

using testing::MemoryReader;

struct Batch {
  Status status;
  BatchResult result;
  std::vector<uint8_t> images;
  std::vector<int64_t> labels;
  SampleLayout layout;
};

Batch RunPipeline(const Options& o, std::shared_ptr<data::DatasetReader> reader,
          std::vector<int64_t> samples, uint64_t epoch = 0) {
  Batch b;
  auto p = Pipeline::Create(o, std::move(reader));
  if (!p.ok()) {
    b.status = p.status();
    return b;
  }
  b.layout = (*p)->OutputLayout();
  b.images.assign(b.layout.bytes() * samples.size(), 0xEE);
  b.labels.assign(samples.size(), -1);
  b.status = (*p)->RunBatch(BatchRequest{epoch, samples, 0, b.images.data(), b.labels.data()},
                            &b.result);
  return b;
}

// A set of real-photo JPEGs and PNGs of assorted kinds and sizes.
std::vector<std::vector<uint8_t>> MixedImages(int n) {
  testing::Image photo = testing::Photo(320, 240);
  std::vector<std::vector<uint8_t>> out;
  for (int i = 0; i < n; ++i) {
    int w = 96 + 37 * (i % 5), h = 80 + 29 * (i % 4);
    testing::Image img{w, h, 3, std::vector<uint8_t>(size_t(w) * h * 3)};
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int c = 0; c < 3; ++c) img.pixels[(size_t(y) * w + x) * 3 + c] = photo.at(y + i % 7, x + i % 11, c);
    if (i % 6 == 5) out.push_back(testing::EncodePng(w, h, 2, 8, img.pixels));
    else out.push_back(testing::EncodeJpeg(img, 90, i % 3 == 0 ? TJSAMP_444 : TJSAMP_420, i % 4 == 1));
  }
  return out;
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST(PipelineTest, DctScaledDecodeThroughRunBatchEqualsDjpegScale) {
  // 256 x 256 to 64: the whole image at 1/4 is exactly 64 x 64, so no resampling follows.
  auto jpeg = testing::EncodeJpeg(testing::Photo(256, 256), 90, TJSAMP_420);
  Options o;
  o.threads = 2;
  o.image_size = 64;
  o.layout = "hwc";
  Batch b = RunPipeline(o, MemoryReader::Encoded({jpeg}), {0});
  ASSERT_TRUE(b.status.ok()) << b.status.ToString();
  testing::Image ref = testing::DjpegDecode(jpeg, "1/4");
  ASSERT_EQ(ref.width, 64);
  EXPECT_EQ(b.images, ref.pixels);
  // With DCT scaling off, the same output comes from a full decode and an area resize.
  o.dct_scaling = false;
  Batch naive = RunPipeline(o, MemoryReader::Encoded({jpeg}), {0});
  ASSERT_TRUE(naive.status.ok());
  EXPECT_NE(naive.images, b.images);
  double diff = 0;
  for (size_t i = 0; i < b.images.size(); ++i) diff += std::abs(b.images[i] - naive.images[i]);
  EXPECT_LT(diff / b.images.size(), 3.0);
}

TEST(PipelineTest, OutputIsByteIdenticalForAnyThreadCount) {
  auto reader = MemoryReader::Encoded(MixedImages(24));
  Options o;
  o.image_size = 48;
  o.crop = "random";
  o.flip = true;
  o.normalize = true;
  o.seed = 99;
  std::vector<int64_t> order = {5, 3, 22, 0, 1, 17, 9, 8, 23, 2, 4, 6, 7, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 21};
  o.threads = 1;
  Batch one = RunPipeline(o, reader, order, 4);
  ASSERT_TRUE(one.status.ok()) << one.status.ToString();
  for (int t : {2, 3, 8}) {
    o.threads = t;
    Batch many = RunPipeline(o, reader, order, 4);
    ASSERT_TRUE(many.status.ok());
    EXPECT_EQ(many.images, one.images) << t << " threads";
    EXPECT_EQ(many.labels, one.labels);
  }
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(one.labels[i], 1000 + order[i]);
  // A sample's output depends on (seed, epoch, index), not on its batch position.
  Batch single = RunPipeline(o, reader, {22}, 4);
  const size_t bytes = one.layout.bytes();
  EXPECT_TRUE(std::equal(single.images.begin(), single.images.end(), one.images.begin() + 2 * bytes));
  Batch other_epoch = RunPipeline(o, reader, order, 5);
  EXPECT_NE(other_epoch.images, one.images);
}

TEST(PipelineTest, PerBatchImageSizeOverride) {
  auto reader = MemoryReader::Encoded(MixedImages(3));
  Options o;
  o.threads = 2;
  o.image_size = 64;
  auto p = Pipeline::Create(o, reader);
  ASSERT_TRUE(p.ok());
  SampleLayout l = (*p)->OutputLayout(32);
  EXPECT_EQ(l.height, 32);
  EXPECT_EQ(l.bytes(), 3u * 32 * 32);
  std::vector<uint8_t> images(l.bytes() * 3);
  std::vector<int64_t> idx = {0, 1, 2};
  BatchResult r;
  ASSERT_TRUE((*p)->RunBatch(BatchRequest{0, idx, 32, images.data(), nullptr}, &r).ok());
  EXPECT_EQ(r.written, 3);
  EXPECT_EQ(r.kept, idx);
}

// One bad sample among good ones, under both policies.
struct BadCase {
  const char* name;
  std::function<std::vector<uint8_t>(const std::vector<uint8_t>& good_jpeg)> make;
  const char* cause;
  int64_t max_pixels = int64_t(128) << 20;
};

class BadInputTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadInputTest, ErrorNamesSampleFileAndCauseOrSkipCompacts) {
  const BadCase& c = GetParam();
  auto images = MixedImages(6);
  images[3] = c.make(images[0]);
  auto reader = MemoryReader::Encoded(images, "/data/train.h5");
  Options o;
  o.threads = 3;
  o.image_size = 32;
  o.max_pixels = c.max_pixels;
  Batch err = RunPipeline(o, reader, Iota(6));
  ASSERT_FALSE(err.status.ok());
  EXPECT_NE(err.status.message().find(std::string("pipeline: sample 3 of /data/train.h5: ") + c.cause),
            std::string::npos)
      << err.status.message();

  o.on_bad_sample = "skip";
  Batch skip = RunPipeline(o, reader, Iota(6));
  ASSERT_TRUE(skip.status.ok()) << skip.status.ToString();
  EXPECT_EQ(skip.result.written, 5);
  EXPECT_EQ(skip.result.kept, (std::vector<int64_t>{0, 1, 2, 4, 5}));
  ASSERT_EQ(skip.result.skipped, (std::vector<int64_t>{3}));
  EXPECT_NE(skip.result.skip_reasons[0].find(c.cause), std::string::npos) << skip.result.skip_reasons[0];
  EXPECT_EQ(skip.labels[3], 1004);
  EXPECT_EQ(skip.labels[4], 1005);
  // The good samples are compacted: position 3 holds what sample 4 alone produces.
  Batch four = RunPipeline(o, reader, {4, 5});
  const size_t bytes = skip.layout.bytes();
  EXPECT_TRUE(std::equal(four.images.begin(), four.images.end(), skip.images.begin() + 3 * bytes));
}

std::vector<uint8_t> Truncate(const std::vector<uint8_t>& v, size_t n) {
  return std::vector<uint8_t>(v.begin(), v.begin() + std::min(n, v.size()));
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, BadInputTest,
    ::testing::Values(
        BadCase{"truncated_jpeg", [](const auto& j) { return Truncate(j, j.size() / 2); },
                "jpeg decode failed: Premature end of JPEG file"},
        BadCase{"corrupt_jpeg_header",
                [](const auto& j) {
                  auto v = Truncate(j, 200);
                  for (size_t i = 4; i < v.size(); ++i) v[i] = uint8_t(i * 31);
                  return v;
                },
                "jpeg header"},
        BadCase{"zero_length", [](const auto&) { return std::vector<uint8_t>(); },
                "empty image (0 bytes)"},
        BadCase{"unknown_format",
                [](const auto&) { return std::vector<uint8_t>{'G', 'I', 'F', '8', '9', 'a', 0, 0}; },
                "unknown image format (8 bytes starting 47 49 46 38)"},
        BadCase{"truncated_png",
                [](const auto&) {
                  auto png = testing::EncodePng(40, 30, 2, 8, testing::Photo(40, 30).pixels);
                  return Truncate(png, png.size() - 20);
                },
                "png decode failed"},
        BadCase{"over_pixel_limit",
                [](const auto&) { return testing::EncodeJpeg(testing::Photo(300, 300), 90, TJSAMP_420); },
                "jpeg image is 300x300 = 90000 pixels, over the limit max_pixels=80000", 80000}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(BadInputTest, WrongRawSizeAndReadFailure) {
  std::vector<std::vector<uint8_t>> samples(4, std::vector<uint8_t>(4 * 4 * 3, 7));
  samples[1].resize(40);
  auto reader = MemoryReader::Raw(4, 4, 3, samples, "/data/raw.h5");
  reader->FailRead(2);
  Options o;
  o.threads = 2;
  Batch err = RunPipeline(o, reader, Iota(4));
  ASSERT_FALSE(err.status.ok());
  EXPECT_EQ(err.status.message(),
            "pipeline: sample 1 of /data/raw.h5: raw sample has 40 bytes, expected 4x4x3 = 48");
  o.on_bad_sample = "skip";
  Batch skip = RunPipeline(o, reader, Iota(4));
  ASSERT_TRUE(skip.status.ok());
  EXPECT_EQ(skip.result.written, 2);
  EXPECT_EQ(skip.result.skipped, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(skip.result.skip_reasons[1],
            "pipeline: sample 2 of /data/raw.h5: read failed: memory reader: sample 2 cannot be "
            "read (injected)");
  EXPECT_EQ(skip.labels[1], 1003);
}

TEST(BadInputTest, BadRequestsAndOptions) {
  auto reader = MemoryReader::Encoded(MixedImages(2), "/data/x.h5");
  Options o;
  o.threads = 1;
  Batch no_size = RunPipeline(o, reader, {0});
  EXPECT_NE(no_size.status.message().find("set option 'image_size'"), std::string::npos);
  o.image_size = 16;
  Batch range = RunPipeline(o, reader, {0, 2});
  EXPECT_EQ(range.status.message(), "pipeline: sample 2 is out of range for /data/x.h5 with 2 samples");
  o.normalize = true;
  o.mean = "0.5,0.5";
  Batch mean = RunPipeline(o, reader, {0});
  EXPECT_EQ(mean.status.message(),
            "pipeline: option 'mean' = '0.5,0.5': 'mean' has 2 values; give 1 (every channel) or "
            "3 (R,G,B)");
  o.mean = "0.4,0.5,0.6";
  o.channels = 1;
  EXPECT_EQ(RunPipeline(o, reader, {0}).status.message(),
            "pipeline: option: mean has 3 values but the output has 1 channel; give 1 value "
            "(every channel)");
  o.channels = 0;
  o.mean = "0.5";
  o.std = "0,1,1";
  EXPECT_NE(RunPipeline(o, reader, {0}).status.message().find("has a zero"), std::string::npos);
  EXPECT_FALSE(Pipeline::Create(o, nullptr).ok());
}

// Writes `images` (label i % 2) to an HDF5 dataset file through the converter's writer.
void WriteDataset(const std::string& path, const std::vector<std::vector<uint8_t>>& images) {
  data::DatasetSpec spec;
  spec.kind = data::SampleKind::kEncoded;
  spec.class_names = {"a", "b"};
  spec.overwrite = true;
  auto writer = data::DatasetWriter::Create(path, spec);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  for (size_t i = 0; i < images.size(); ++i) {
    auto header = ImageDecoder::Create()->ReadHeader(images[i], 1 << 30);
    ASSERT_TRUE(header.ok());
    auto enc = header->format == ImageFormat::kJpeg ? data::ImageEncoding::kJpeg : data::ImageEncoding::kPng;
    ASSERT_TRUE((*writer)->Append(images[i], int64_t(i % 2), header->width, header->height, enc).ok());
  }
  ASSERT_TRUE((*writer)->Finish().ok());
}

TEST(PipelineHdf5Test, DecodesThroughARealHdf5File) {
  std::string path = testing::TempDir() + "/pipeline_" + std::to_string(::getpid()) + ".h5";
  auto images = MixedImages(8);
  WriteDataset(path, images);
  auto reader = data::DatasetReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  Options o;
  o.threads = 3;
  o.image_size = 40;
  o.crop = "random";
  o.flip = true;
  Batch h5 = RunPipeline(o, *reader, Iota(8));
  ASSERT_TRUE(h5.status.ok()) << h5.status.ToString();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(h5.labels[i], i % 2);
  // Same bytes as the same images served from memory.
  Batch mem = RunPipeline(o, MemoryReader::Encoded(images), Iota(8));
  EXPECT_EQ(h5.images, mem.images);
  std::filesystem::remove(path);
}

// One pixel changed inside a stored raw sample is still an image: with verify=sample (the
// default) it fails its checksum and is a bad sample under the policy, never served as good;
// verify=off serves it; verify=full finds it when the pipeline starts (an error unless
// on_bad_sample=skip).
TEST(PipelineHdf5Test, AChangedSampleIsABadSampleNeverServedAsGood) {
  std::string path = testing::TempDir() + "/verify_" + std::to_string(::getpid()) + ".h5";
  std::vector<std::vector<uint8_t>> samples(6, std::vector<uint8_t>(16 * 16 * 3));
  std::mt19937 rng(7);
  for (auto& px : samples)
    for (auto& v : px) v = static_cast<uint8_t>(rng());
  {
    data::DatasetSpec spec;
    spec.kind = data::SampleKind::kRaw;
    spec.raw_height = spec.raw_width = 16;
    spec.raw_channels = 3;
    spec.compress = false;
    spec.class_names = {"a", "b"};
    spec.overwrite = true;
    auto writer = data::DatasetWriter::Create(path, spec);
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    for (size_t i = 0; i < samples.size(); ++i)
      ASSERT_TRUE((*writer)->Append(samples[i], int64_t(i % 2), 16, 16).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
    auto file = testing::ReadFile(path);
    auto at = std::search(file.begin(), file.end(), samples[2].begin() + 100, samples[2].begin() + 132);
    ASSERT_NE(at, file.end());
    *(at + 8) ^= 0x01;
    testing::WriteFile(path, file);
  }
  auto reader = data::DatasetReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  Options o;
  o.threads = 2;
  o.image_size = 32;
  o.verify = "off";
  Batch served = RunPipeline(o, *reader, Iota(6));
  ASSERT_TRUE(served.status.ok()) << served.status.ToString();
  EXPECT_EQ(served.result.written, 6);
  o.verify = "sample";
  Batch err = RunPipeline(o, *reader, Iota(6));
  ASSERT_FALSE(err.status.ok());
  EXPECT_NE(err.status.message().find("sample 2 of " + path + " fails its checksum"),
            std::string::npos) << err.status.message();
  o.on_bad_sample = "skip";
  Batch skip = RunPipeline(o, *reader, Iota(6));
  ASSERT_TRUE(skip.status.ok()) << skip.status.ToString();
  EXPECT_EQ(skip.result.skipped, (std::vector<int64_t>{2}));
  EXPECT_EQ(BadSampleCause(skip.result.skip_reasons[0]), "checksum");
  o.verify = "full";
  o.on_bad_sample = "error";
  auto full = Pipeline::Create(o, *reader);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find("verify=full: 1 of 6 samples of " + path +
                                         " are bad, the first: sample 2"),
            std::string::npos) << full.status().message();
  o.on_bad_sample = "skip";
  EXPECT_TRUE(Pipeline::Create(o, *reader).ok());
  std::filesystem::remove(path);
}

// A corrupt header on one worker never costs the good samples after it (one worker thread:
// every sample goes through the same decoder).
TEST(BadInputTest, ACorruptHeaderNeverCostsTheSamplesAfterItOnTheSameWorker) {
  auto images = MixedImages(8);
  std::vector<uint8_t> bad(images[0].begin(), images[0].begin() + 2);
  bad.insert(bad.end(), {0xff, 0x8a, 0x00, 0x04, 0x00, 0x00});
  bad.insert(bad.end(), images[0].begin() + 2, images[0].end());
  images[1] = bad;
  Options o;
  o.threads = 1;
  o.image_size = 32;
  o.on_bad_sample = "skip";
  Batch b = RunPipeline(o, MemoryReader::Encoded(images), Iota(8));
  ASSERT_TRUE(b.status.ok()) << b.status.ToString();
  EXPECT_EQ(b.result.skipped, (std::vector<int64_t>{1}));
  EXPECT_EQ(b.result.written, 7);
  EXPECT_EQ(BadSampleCause(b.result.skip_reasons[0]), "jpeg");
}

TEST(BadInputTest, CausesOfBadSamples) {
  EXPECT_EQ(BadSampleCause("pipeline: sample 3 of x.h5: empty image (0 bytes)"), "empty");
  EXPECT_EQ(BadSampleCause("pipeline: sample 3 of x.h5: read failed: hdf5: sample 3 in x.h5 is "
                           "empty (0 bytes)"), "empty");
  EXPECT_EQ(BadSampleCause("jpeg image is 9x9 = 81 pixels, over the limit max_pixels=80"),
            "pixel_limit");
  EXPECT_EQ(BadSampleCause("png decode failed: invalid chunk checksum"), "png");
  EXPECT_EQ(BadSampleCause("read failed: hdf5: sample 1 of x.h5 fails its checksum"), "checksum");
  EXPECT_EQ(BadSampleCause("read failed: injected"), "read");
  EXPECT_EQ(BadSampleCause("raw sample has 40 bytes, expected 48"), "raw_size");
  EXPECT_EQ(BadSampleCause("something else"), "other");
}

}  // namespace
}  // namespace batchcast::pipeline
