// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "data/idx_reader.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include "tests/unit/data/data_test_util.h"

namespace batchcast::data {
namespace {
using testing::FashionPath;
using testing::TempDir;
using testing::WriteBytes;

TEST(IdxReaderTest, ReadsFashionMnistTestImagesAndLabels) {
  auto images = ReadIdxFile(FashionPath("t10k-images-idx3-ubyte.gz"));
  ASSERT_TRUE(images.ok()) << images.status().ToString();
  EXPECT_EQ(images->dims, (std::vector<int64_t>{10000, 28, 28}));
  EXPECT_EQ(images->data.size(), 10000u * 28 * 28);
  auto labels = ReadIdxFile(FashionPath("t10k-labels-idx1-ubyte.gz"));
  ASSERT_TRUE(labels.ok()) << labels.status().ToString();
  EXPECT_EQ(labels->dims, (std::vector<int64_t>{10000}));
  std::vector<int> counts(10, 0);
  for (uint8_t l : labels->data) {
    ASSERT_LT(l, 10);
    ++counts[l];
  }
  for (int c : counts) EXPECT_EQ(c, 1000);  // the test split is balanced
}

TEST(IdxReaderTest, ReadsPlainUncompressedFile) {
  TempDir dir;
  WriteBytes(dir / "x.idx", {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6});
  auto a = ReadIdxFile(dir / "x.idx");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->data, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
}

TEST(IdxReaderTest, MissingFileIsNotFoundAndNamed) {
  auto a = ReadIdxFile("/nonexistent/train-images.gz");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kNotFound);
  EXPECT_NE(a.status().message().find("/nonexistent/train-images.gz"), std::string::npos);
}

TEST(IdxReaderTest, BadMagicIsCorrupt) {
  TempDir dir;
  WriteBytes(dir / "bad.idx", {'h', 'e', 'l', 'l', 'o', '!', '!', '!'});
  auto a = ReadIdxFile(dir / "bad.idx");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("not an IDX file"), std::string::npos)
      << a.status().message();
}

TEST(IdxReaderTest, TruncatedDataIsCorrupt) {
  TempDir dir;
  WriteBytes(dir / "short.idx", {0, 0, 8, 1, 0, 0, 0, 9, 1, 2, 3});
  auto a = ReadIdxFile(dir / "short.idx");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("truncated"), std::string::npos) << a.status().message();
}

TEST(IdxReaderTest, TrailingBytesAreCorrupt) {
  TempDir dir;
  WriteBytes(dir / "long.idx", {0, 0, 8, 1, 0, 0, 0, 1, 7, 8});
  EXPECT_FALSE(ReadIdxFile(dir / "long.idx").ok());
}

TEST(IdxReaderTest, NonByteElementTypeIsRejected) {
  TempDir dir;
  WriteBytes(dir / "float.idx", {0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0});
  auto a = ReadIdxFile(dir / "float.idx");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("element type"), std::string::npos);
}

// Found by fuzzing (tests/fuzz/corpus/fuzz_idx/regress-oom-declared-size): a 16-byte file
// whose header declares 3 x 1024 x 1024 x 1024 bytes made the reader allocate (and zero)
// all of it before reading the first byte of data. It must fail as truncated, having
// allocated no more than one read chunk.
TEST(IdxReaderTest, HeaderDeclaringGigabytesOfAShortFileAllocatesNoMore) {
  TempDir dir;
  WriteBytes(dir / "huge.idx", {0, 0, 8, 3, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 12, 0, 1, 2, 3, 4});
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  auto a = ReadIdxFile(dir / "huge.idx");
  getrusage(RUSAGE_SELF, &after);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("truncated"), std::string::npos) << a.status().message();
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 256 * 1024)  // KiB: far below the 3 GiB declared
      << "the reader's peak memory grew by " << (after.ru_maxrss - before.ru_maxrss) << " KiB";
}

}  // namespace
}  // namespace batchcast::data
