// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Offline progressive-resizing buckets (docs/dataset-format.md): written by the
// DatasetWriter next to the originals, read back by the HDF5 reader, and taken by the
// decode pipeline when a batch's image size is a stored bucket.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "data/dataset_reader.h"
#include "data/dataset_writer.h"
#include "data/image_encode.h"
#include "pipeline/pipeline.h"

namespace batchcast {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("bc-resize-buckets-" + std::to_string(getpid()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// A solid-colour RGB image, PNG-encoded (lossless, so pixels survive exactly).
std::vector<uint8_t> SolidPng(int w, int h, uint8_t value) {
  std::vector<uint8_t> px(size_t(w) * h * 3, value);
  auto png = data::EncodePng(px, w, h, 3);
  EXPECT_TRUE(png.ok()) << png.status().ToString();
  return png.ok() ? *png : std::vector<uint8_t>{};
}

// Original of sample i: 16x16 of value i; its bucket images: value 100 + size + i, so
// the pixel value tells which stored image the pipeline decoded.
uint8_t BucketValue(int size, int i) { return static_cast<uint8_t>(100 + size + i); }

Status WriteFile(const std::string& path, int n, const std::vector<int>& sizes) {
  data::DatasetSpec spec;
  spec.kind = data::SampleKind::kEncoded;
  spec.class_names = {"a", "b"};
  spec.bucket_sizes = sizes;
  spec.bucket_encoding = "png";
  spec.overwrite = true;
  BC_ASSIGN_OR_RETURN(auto w, data::DatasetWriter::Create(path, spec));
  for (int i = 0; i < n; ++i) {
    std::vector<std::vector<uint8_t>> buckets;
    for (int s : sizes) buckets.push_back(SolidPng(s, s, BucketValue(s, i)));
    BC_RETURN_IF_ERROR(w->Append(SolidPng(16, 16, uint8_t(i)), i % 2, 16, 16,
                                 data::ImageEncoding::kPng, buckets));
  }
  return w->Finish();
}

TEST(ResizeBucketsTest, WriterAndReaderRoundTripEveryBucket) {
  TempDir dir;
  const std::string path = (dir.path / "b.h5").string();
  ASSERT_TRUE(WriteFile(path, 5, {4, 8}).ok());
  auto r = data::DatasetReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->info().bucket_sizes, (std::vector<int>{4, 8}));
  std::vector<uint8_t> got;
  for (int i = 0; i < 5; ++i) {
    for (int s : {4, 8}) {
      ASSERT_TRUE((*r)->ReadBucketSample(s, i, &got).ok());
      EXPECT_EQ(got, SolidPng(s, s, BucketValue(s, i))) << "sample " << i << " size " << s;
    }
    ASSERT_TRUE((*r)->ReadSample(i, &got).ok());
    EXPECT_EQ(got, SolidPng(16, 16, uint8_t(i)));
  }
  Status missing = (*r)->ReadBucketSample(6, 0, &got);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("size 6"), std::string::npos) << missing.message();
  EXPECT_EQ((*r)->ReadBucketSample(4, 5, &got).code(), StatusCode::kOutOfRange);
}

TEST(ResizeBucketsTest, FileWithoutBucketsHasNone) {
  TempDir dir;
  const std::string path = (dir.path / "plain.h5").string();
  ASSERT_TRUE(WriteFile(path, 3, {}).ok());
  auto r = data::DatasetReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)->info().bucket_sizes.empty());
  std::vector<uint8_t> got;
  EXPECT_EQ((*r)->ReadBucketSample(4, 0, &got).code(), StatusCode::kNotFound);
}

TEST(ResizeBucketsTest, WriterRefusesBadBuckets) {
  TempDir dir;
  data::DatasetSpec spec;
  spec.kind = data::SampleKind::kEncoded;
  spec.bucket_sizes = {8, 4};
  auto bad = data::DatasetWriter::Create((dir.path / "x.h5").string(), spec);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ascending"), std::string::npos) << bad.status().message();

  spec.bucket_sizes = {4, 8};
  auto w = data::DatasetWriter::Create((dir.path / "y.h5").string(), spec);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  std::vector<std::vector<uint8_t>> one = {SolidPng(4, 4, 1)};
  Status st = (*w)->Append(SolidPng(16, 16, 0), 0, 16, 16, data::ImageEncoding::kPng, one);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("expected 2"), std::string::npos) << st.message();
}

// The pipeline decodes the stored bucket image when the batch's size is a bucket, and
// the original otherwise (the online/offline split).
TEST(ResizeBucketsTest, PipelineTakesTheMatchingBucket) {
  TempDir dir;
  const std::string path = (dir.path / "p.h5").string();
  ASSERT_TRUE(WriteFile(path, 4, {4, 8}).ok());
  auto reader = data::DatasetReader::Open(path);
  ASSERT_TRUE(reader.ok());
  Options o;
  o.threads = 2;
  o.image_size = 16;
  o.layout = "hwc";
  auto p = pipeline::Pipeline::Create(o, *reader);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::vector<int64_t> ids = {3, 0, 2};
  for (int size : {4, 8, 12, 16}) {
    SCOPED_TRACE("size " + std::to_string(size));
    const auto layout = (*p)->OutputLayout(size);
    ASSERT_EQ(layout.height, size);
    std::vector<uint8_t> images(layout.bytes() * ids.size());
    std::vector<int64_t> labels(ids.size());
    pipeline::BatchResult res;
    ASSERT_TRUE((*p)->RunBatch({0, ids, size, images.data(), labels.data()}, &res).ok());
    ASSERT_EQ(res.written, 3);
    const bool bucket = size == 4 || size == 8;
    for (size_t k = 0; k < ids.size(); ++k) {
      const int i = static_cast<int>(ids[k]);
      const uint8_t want = bucket ? BucketValue(size, i) : uint8_t(i);
      int bad = 0;
      for (size_t b = 0; b < layout.bytes(); ++b) bad += images[k * layout.bytes() + b] != want;
      EXPECT_EQ(bad, 0) << "sample " << i << (bucket ? " (bucket)" : " (original)");
      EXPECT_EQ(labels[k], i % 2);
    }
  }
}

}  // namespace
}  // namespace batchcast
