// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Reading without the HDF5 lock (docs/dataset-format.md): every layout and storage reads the
// same bytes; the direct path takes no lock, compressed chunks take it once per chunk,
// layout version 1 once per sample (counted by the lock's own per-thread accounting); a
// damaged sample index or chunk map is refused at open, a file cut short after open fails
// the read, never the process; user blocks and HDF5 chunkings Batchcast does not write read
// right. Then `convert --upgrade` (ConvertUpgrade): version 1 files become version 2 with
// the same content, in place or not; a damaged sample stops it with nothing written.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>
#include <tuple>

#include "core/hdf5_lock.h"
#include "data/convert.h"
#include "data/dataset_inspect.h"
#include "data/dataset_layout.h"
#include "data/dataset_reader.h"
#include "data/dataset_writer.h"
#include "data/image_encode.h"
#include "tests/unit/data/data_test_util.h"

namespace batchcast::data::read_path_test {  // named: the unit build merges test files
namespace {
using testing::ExpectContains;
using testing::TempDir;

std::vector<uint8_t> Bytes(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * 131 + size_t(seed) * 29 + (i >> 8));
  return v;
}

// Encoded-looking samples of 1..5000 bytes (sample i's bytes differ from every other's);
// bucket b of sample i: a few bytes of its own.
struct EncodedSet {
  std::vector<std::vector<uint8_t>> samples;
  std::vector<int> bucket_sizes = {8, 16};
  std::vector<uint8_t> Bucket(size_t b, int i) const { return Bytes(3 + size_t(i % 7), i * 10 + int(b)); }
};

EncodedSet MakeSet(int n) {
  EncodedSet set;
  for (int i = 0; i < n; ++i) set.samples.push_back(Bytes(size_t(1 + (i * 977) % 5000), i));
  return set;
}

void WriteEncodedSet(const std::string& path, const EncodedSet& set, int layout_version,
                     bool buckets = true) {
  DatasetSpec spec;
  spec.class_names = {"a", "b", "c"};
  spec.layout_version = layout_version;
  spec.overwrite = true;
  if (buckets) spec.bucket_sizes = set.bucket_sizes;
  auto w = DatasetWriter::Create(path, spec);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (size_t i = 0; i < set.samples.size(); ++i) {
    std::vector<std::vector<uint8_t>> b;
    if (buckets)
      for (size_t k = 0; k < set.bucket_sizes.size(); ++k) b.push_back(set.Bucket(k, int(i)));
    ASSERT_TRUE((*w)->Append(set.samples[i], int64_t(i % 3), 10, 20, ImageEncoding::kJpeg, b).ok());
  }
  const Status finished = (*w)->Finish();
  ASSERT_TRUE(finished.ok()) << finished.ToString();
}

// Raw 7x5x3 samples; compression "none", "gzip:1", ...
void WriteRawSet(const std::string& path, int n, const std::string& compression) {
  DatasetSpec spec;
  spec.kind = SampleKind::kRaw;
  spec.raw_height = 7;
  spec.raw_width = 5;
  spec.raw_channels = 3;
  spec.compression = compression;
  spec.class_names = {"a", "b"};
  spec.overwrite = true;
  auto w = DatasetWriter::Create(path, spec);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int i = 0; i < n; ++i) ASSERT_TRUE((*w)->Append(Bytes(105, i), i % 2, 5, 7).ok());
  const Status finished = (*w)->Finish();
  ASSERT_TRUE(finished.ok()) << finished.ToString();
}

// Stored pixels of per-sample shapes (1..40 x 1..30 x 3).
void WritePixelSet(const std::string& path, int n, const std::string& compression) {
  DatasetSpec spec;
  spec.kind = SampleKind::kPixels;
  spec.compression = compression;
  spec.class_names = {"a"};
  spec.overwrite = true;
  auto w = DatasetWriter::Create(path, spec);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int i = 0; i < n; ++i) {
    StoredShape shape{1 + i % 40, 1 + (i * 7) % 30, 3};
    ASSERT_TRUE((*w)->AppendPixels(Bytes(shape.bytes(), i), 0, 50, 50, shape).ok());
  }
  const Status finished = (*w)->Finish();
  ASSERT_TRUE(finished.ok()) << finished.ToString();
}

std::shared_ptr<DatasetReader> OpenOk(const std::string& path, ReaderOptions options = {}) {
  auto r = DatasetReader::Open(path, options);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : nullptr;
}

std::vector<std::vector<uint8_t>> ReadAll(const DatasetReader& r) {
  std::vector<std::vector<uint8_t>> all(size_t(r.info().num_samples));
  for (size_t i = 0; i < all.size(); ++i) {
    Status st = r.ReadSample(int64_t(i), &all[i]);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  return all;
}

int64_t Acquisitions() { return ThisThreadHdf5LockTimes().acquisitions; }

TEST(ReadPathTest, EncodedLayoutsReadTheSameBytesVersion2WithoutTheLock) {
  TempDir dir;
  const EncodedSet set = MakeSet(700);
  WriteEncodedSet(dir / "v1.h5", set, 1);
  WriteEncodedSet(dir / "v2.h5", set, 2);
  auto v1 = OpenOk(dir / "v1.h5");
  auto v2 = OpenOk(dir / "v2.h5");
  ASSERT_TRUE(v1 && v2);
  EXPECT_EQ(v1->info().schema_version, 1);
  EXPECT_EQ(v2->info().schema_version, 2);
  EXPECT_EQ(v1->info().read_path, ReadPath::kHdf5PerSample);
  EXPECT_EQ(v2->info().read_path, ReadPath::kDirect);
  EXPECT_EQ(v2->info().bucket_sizes, set.bucket_sizes);
  EXPECT_EQ(v2->info().bucket_encoding, "jpeg");

  int64_t before = Acquisitions();
  EXPECT_EQ(ReadAll(*v1), set.samples);
  EXPECT_EQ(Acquisitions() - before, 700) << "version 1: one HDF5 read per sample";
  before = Acquisitions();
  EXPECT_EQ(ReadAll(*v2), set.samples);
  std::vector<uint8_t> bucket;
  for (int i = 0; i < 700; i += 13)
    for (size_t b = 0; b < set.bucket_sizes.size(); ++b) {
      ASSERT_TRUE(v2->ReadBucketSample(set.bucket_sizes[b], i, &bucket).ok());
      EXPECT_EQ(bucket, set.Bucket(b, i));
      ASSERT_TRUE(v1->ReadBucketSample(set.bucket_sizes[b], i, &bucket).ok());
      EXPECT_EQ(bucket, set.Bucket(b, i));
    }
  std::vector<std::vector<uint8_t>> block;
  ASSERT_TRUE(v2->ReadSamples(600, 100, &block).ok());
  EXPECT_TRUE(std::equal(block.begin(), block.end(), set.samples.begin() + 600));
  for (int i : {0, 350, 699}) EXPECT_TRUE(v2->VerifySample(i, set.samples[size_t(i)]).ok());
  EXPECT_EQ(Acquisitions() - before, 54 * 2)  // i = 0, 13, ..., 689: 54 samples, 2 buckets
      << "only the version 1 file's bucket reads take the lock";
  auto a = InspectDataset(dir / "v1.h5");
  auto b = InspectDataset(dir / "v2.h5");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->checksum, b->checksum);
  EXPECT_EQ(a->stored_bytes, b->stored_bytes);
}

TEST(ReadPathTest, UncompressedAndGzipReadWithoutTheLockOtherFiltersOnceEachChunk) {
  TempDir dir;
  WriteRawSet(dir / "raw-none.h5", 1000, "none");
  WriteRawSet(dir / "raw-gzip.h5", 1000, "gzip:1");
  WriteRawSet(dir / "raw-lz4.h5", 1000, "lz4");
  WritePixelSet(dir / "px-none.h5", 300, "");
  WritePixelSet(dir / "px-gzip.h5", 300, "gzip:1");
  auto raw_none = OpenOk(dir / "raw-none.h5");
  auto raw_gzip = OpenOk(dir / "raw-gzip.h5");
  auto raw_lz4 = OpenOk(dir / "raw-lz4.h5");
  auto px_none = OpenOk(dir / "px-none.h5");
  auto px_gzip = OpenOk(dir / "px-gzip.h5");
  ASSERT_TRUE(raw_none && raw_gzip && raw_lz4 && px_none && px_gzip);
  EXPECT_EQ(raw_none->info().schema_version, 1) << "raw files stay readable by older builds";
  EXPECT_EQ(raw_none->info().read_path, ReadPath::kDirect);
  EXPECT_EQ(raw_gzip->info().read_path, ReadPath::kInflate);
  EXPECT_EQ(raw_gzip->info().compression, "gzip:1");
  EXPECT_EQ(raw_lz4->info().read_path, ReadPath::kBlocks);
  EXPECT_EQ(raw_lz4->info().compression, "lz4");
  EXPECT_EQ(px_none->info().read_path, ReadPath::kDirect);
  EXPECT_EQ(px_gzip->info().read_path, ReadPath::kInflate);

  int64_t before = Acquisitions();
  const auto raw = ReadAll(*raw_none);
  const auto px = ReadAll(*px_none);
  EXPECT_EQ(ReadAll(*raw_gzip), raw);
  EXPECT_EQ(ReadAll(*px_gzip), px);
  EXPECT_EQ(Acquisitions(), before) << "uncompressed and gzip samples are read without the lock";
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(raw[size_t(i)], Bytes(105, i));
  // min(65536 / 105, 256) = 256 samples per chunk: 4 chunks, each read once in any order.
  before = Acquisitions();
  std::vector<uint8_t> got;
  for (int k = 0; k < 2000; ++k) {
    const int i = (k * 379) % 1000;
    ASSERT_TRUE(raw_lz4->ReadSample(i, &got).ok());
    ASSERT_EQ(got, Bytes(105, i));
  }
  EXPECT_EQ(Acquisitions() - before, 4);
}

// The file address and stored size of the chunk of raw `images` holding sample `first`.
std::pair<uint64_t, uint64_t> ChunkOf(const std::string& path, hsize_t first) {
  std::lock_guard lock(Hdf5Lock());
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, "images", H5P_DEFAULT);
  hsize_t coord[4] = {first, 0, 0, 0}, stored = 0;
  unsigned mask = 0;
  haddr_t addr = 0;
  if (H5Dget_chunk_info_by_coord(d, coord, &mask, &addr, &stored) < 0) stored = 0;
  H5Dclose(d);
  H5Fclose(f);
  return {uint64_t(addr), uint64_t(stored)};
}

TEST(ReadPathTest, ADamagedGzipChunkFailsItsSamplesOnly) {
  TempDir dir;
  WriteRawSet(dir / "raw.h5", 1000, "gzip:1");
  // The stored bytes of chunk 2 (samples 512..767), found through HDF5, one of them changed.
  auto file = testing::ReadBytes(dir / "raw.h5");
  auto [addr, size] = ChunkOf(dir / "raw.h5", 512);
  ASSERT_GT(size, 0u);
  file[size_t(addr + size / 2)] ^= 0x5a;
  testing::WriteBytes(dir / "raw.h5", file);
  auto r = OpenOk(dir / "raw.h5");
  ASSERT_TRUE(r);
  std::vector<uint8_t> got;
  for (int i : {0, 511, 768, 999}) {
    ASSERT_TRUE(r->ReadSample(i, &got).ok());
    EXPECT_EQ(got, Bytes(105, i));
  }
  Status st = r->ReadSample(600, &got);
  EXPECT_EQ(st.code(), StatusCode::kCorruptData) << st.ToString();
  ExpectContains(st.message(), "chunk 2 of dataset 'images' in " + dir / "raw.h5" +
                                   " does not inflate to its 26880 bytes");
  // The first chunk damaged too: the file still opens, its other samples still read.
  std::tie(addr, size) = ChunkOf(dir / "raw.h5", 0);
  ASSERT_GT(size, 0u);
  file[size_t(addr + size / 2)] ^= 0x5a;
  testing::WriteBytes(dir / "raw.h5", file);
  auto again = OpenOk(dir / "raw.h5");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->info().read_path, ReadPath::kInflate) << "the last chunk was compared";
  EXPECT_FALSE(again->ReadSample(3, &got).ok());
  ASSERT_TRUE(again->ReadSample(999, &got).ok());
  EXPECT_EQ(got, Bytes(105, 999));
}

TEST(ReadPathTest, ASmallChunkCacheEvictsAndStillReadsRightFromManyThreads) {
  TempDir dir;
  WriteRawSet(dir / "raw.h5", 3000, "gzip:1");  // 12 chunks of 256 samples
  ReaderOptions options;
  options.chunk_cache_bytes = 1;  // one block at a time
  auto r = OpenOk(dir / "raw.h5", options);
  ASSERT_TRUE(r);
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<uint8_t> got;
      for (int k = 0; k < 3000; ++k) {
        const int i = (k * 1009 + t * 757) % 3000;
        if (!r->ReadSample(i, &got).ok() || got != Bytes(105, i)) ++wrong[size_t(t)];
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

TEST(ReadPathTest, AReusedBufferIsNotReallocated) {
  TempDir dir;
  const EncodedSet set = MakeSet(200);
  WriteEncodedSet(dir / "v2.h5", set, 2, false);
  auto r = OpenOk(dir / "v2.h5");
  ASSERT_TRUE(r);
  size_t largest = 0;
  for (size_t i = 0; i < set.samples.size(); ++i)
    if (set.samples[i].size() > set.samples[largest].size()) largest = i;
  std::vector<uint8_t> buf;
  ASSERT_TRUE(r->ReadSample(int64_t(largest), &buf).ok());
  const uint8_t* data = buf.data();
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(r->ReadSample(i, &buf).ok());
    EXPECT_EQ(buf.data(), data) << "sample " << i;
  }
}

// Opens `path` read-write and overwrites dataset `name` (uint64, its whole extent) by `v`.
void Overwrite(const std::string& path, const char* name, const std::vector<uint64_t>& v) {
  std::lock_guard lock(Hdf5Lock());
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  ASSERT_GE(d, 0) << name;
  ASSERT_GE(H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  H5Dclose(d);
  H5Fclose(f);
}

std::vector<uint64_t> ReadU64(const std::string& path, const char* name, size_t n) {
  std::lock_guard lock(Hdf5Lock());
  std::vector<uint64_t> v(n);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  EXPECT_GE(H5Dread(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  H5Dclose(d);
  H5Fclose(f);
  return v;
}

std::string OpenError(const std::string& path) {
  auto r = DatasetReader::Open(path);
  EXPECT_FALSE(r.ok()) << path << " opened but should not";
  if (!r.ok()) {
    EXPECT_EQ(r.status().code(), StatusCode::kCorruptData) << r.status().ToString();
  }
  return r.ok() ? "" : r.status().message();
}

TEST(ReadPathTest, ADamagedSampleIndexIsRefusedAtOpen) {
  TempDir dir;
  const EncodedSet set = MakeSet(50);
  WriteEncodedSet(dir / "good.h5", set, 2);
  const auto offsets = ReadU64(dir / "good.h5", "sample_offsets", 50);
  const auto lengths = ReadU64(dir / "good.h5", "sample_lengths", 50);
  uint64_t total = 0;
  for (const auto& s : set.samples) total += s.size();
  struct Case {
    const char* name;
    const char* dataset;
    size_t index;
    uint64_t value;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"past.h5", "sample_offsets", 49, total, "puts sample 49 at bytes [" +
                                                  std::to_string(total) + ", " +
                                                  std::to_string(total) + " + " +
                                                  std::to_string(lengths[49]) + "), past the "
                                                  "end of the dataset, which holds " +
                                                  std::to_string(total) + " bytes"},
      {"long.h5", "sample_lengths", 7, total, "puts sample 7 at bytes"},
      {"wrap.h5", "sample_offsets", 3, ~uint64_t(0) - 2, "past 2^64"},
      {"huge.h5", "sample_lengths", 0, uint64_t(1) << 40,
       "more than the 1073741824 bytes a sample may have"},
      {"bucket.h5", "buckets/16/sample_offsets", 20, uint64_t(1) << 33,
       "the index of buckets/16/images in"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::filesystem::copy_file(dir / "good.h5", dir / c.name);
    auto v = std::string(c.dataset).find("lengths") != std::string::npos ? lengths : offsets;
    if (std::string(c.dataset).find("buckets") != std::string::npos)
      v = ReadU64(dir / c.name, c.dataset, 50);
    v[c.index] = c.value;
    Overwrite(dir / c.name, c.dataset, v);
    const std::string msg = OpenError(dir / c.name);
    ExpectContains(msg, dir / c.name);
    ExpectContains(msg, c.want);
    ExpectContains(msg, "the sample index is damaged");
  }
  // An index with a missing entry names the counts.
  {
    std::lock_guard lock(Hdf5Lock());
    hid_t f = H5Fopen((dir / "good.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(H5Ldelete(f, "sample_lengths", H5P_DEFAULT), 0);
    hsize_t n = 49;
    hid_t s = H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(f, "sample_lengths", H5T_STD_U64LE, s, H5P_DEFAULT, H5P_DEFAULT,
                         H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, lengths.data());
    H5Dclose(d);
    H5Sclose(s);
    H5Fclose(f);
  }
  ExpectContains(OpenError(dir / "good.h5"), "dataset 'sample_lengths' in " + dir / "good.h5" +
                                                 " has 49 entries but 'images' has 50");
}

TEST(ReadPathTest, AFileCutShortAfterOpenFailsTheReadNotTheProcess) {
  TempDir dir;
  const EncodedSet set = MakeSet(100);
  WriteEncodedSet(dir / "v2.h5", set, 2, false);
  auto r = OpenOk(dir / "v2.h5");
  ASSERT_TRUE(r);
  ASSERT_EQ(::truncate((dir / "v2.h5").c_str(), 0), 0);
  std::vector<uint8_t> bytes;
  Status st = r->ReadSample(99, &bytes);
  EXPECT_EQ(st.code(), StatusCode::kCorruptData) << st.ToString();
  ExpectContains(st.message(), "truncated or replaced while it was read");
  ExpectContains(st.message(), "sample 99");
}

// A version 2 encoded file made with the HDF5 C API alone: a user block of 512 bytes (every
// chunk address is relative to its end), `images` chunked in 7-byte chunks or contiguous.
void WriteHandMadeV2(const std::string& path, const std::vector<std::vector<uint8_t>>& samples,
                     bool chunked) {
  std::lock_guard lock(Hdf5Lock());
  hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
  H5Pset_userblock(fcpl, 512);
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  testing::WriteIntAttr(f, "batchcast_schema_version", 2);
  testing::WriteIntAttr(f, "batchcast_complete", 1);
  std::vector<uint8_t> all;
  std::vector<uint64_t> off, len;
  for (const auto& s : samples) {
    off.push_back(all.size());
    len.push_back(s.size());
    all.insert(all.end(), s.begin(), s.end());
  }
  hsize_t n = all.size(), chunk = 7;
  hid_t space = H5Screate_simple(1, &n, nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (chunked) H5Pset_chunk(dcpl, 1, &chunk);
  hid_t d = H5Dcreate2(f, "images", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data());
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
  const hsize_t count = samples.size();
  testing::WriteVector(f, "sample_offsets", H5T_STD_U64LE, H5T_NATIVE_UINT64, off.data(), count);
  testing::WriteVector(f, "sample_lengths", H5T_STD_U64LE, H5T_NATIVE_UINT64, len.data(), count);
  std::vector<int64_t> labels(count, 0);
  std::vector<int32_t> sizes(count, 4);
  testing::WriteVector(f, "labels", H5T_STD_I64LE, H5T_NATIVE_INT64, labels.data(), count);
  testing::WriteVector(f, "widths", H5T_STD_I32LE, H5T_NATIVE_INT32, sizes.data(), count);
  testing::WriteVector(f, "heights", H5T_STD_I32LE, H5T_NATIVE_INT32, sizes.data(), count);
  hid_t str = H5Tcopy(H5T_C_S1);
  H5Tset_size(str, H5T_VARIABLE);
  const char* names[] = {"x"};
  testing::WriteVector(f, "class_names", str, str, names, 1);
  H5Tclose(str);
  H5Fclose(f);
  H5Pclose(fcpl);
}

TEST(ReadPathTest, AUserBlockAndChunkingsBatchcastDoesNotWriteReadRight) {
  TempDir dir;
  std::vector<std::vector<uint8_t>> samples;
  for (int i = 0; i < 40; ++i) samples.push_back(Bytes(size_t(1 + i % 17), i));
  for (bool chunked : {true, false}) {
    SCOPED_TRACE(chunked ? "7-byte chunks" : "contiguous");
    const std::string path = dir / (chunked ? "chunked.h5" : "contiguous.h5");
    WriteHandMadeV2(path, samples, chunked);
    auto r = OpenOk(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->info().read_path, ReadPath::kDirect);
    EXPECT_EQ(ReadAll(*r), samples);
  }
  // Raw samples whose chunks split each sample (h5py's automatic chunking can): read
  // through HDF5 in blocks of whole chunk rows.
  {
    std::lock_guard lock(Hdf5Lock());
    hid_t f = H5Fcreate((dir / "split.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    testing::WriteIntAttr(f, "batchcast_schema_version", 1);
    testing::WriteIntAttr(f, "batchcast_complete", 1);
    hsize_t dims[4] = {10, 4, 6, 1}, chunk[4] = {3, 2, 6, 1};
    hid_t space = H5Screate_simple(4, dims, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 4, chunk);
    hid_t d = H5Dcreate2(f, "images", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    std::vector<uint8_t> px;
    for (int i = 0; i < 10; ++i) {
      auto b = Bytes(24, i);
      px.insert(px.end(), b.begin(), b.end());
    }
    H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, px.data());
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
    std::vector<int64_t> labels(10, 0);
    std::vector<int32_t> w(10, 6), h(10, 4);
    testing::WriteVector(f, "labels", H5T_STD_I64LE, H5T_NATIVE_INT64, labels.data(), 10);
    testing::WriteVector(f, "widths", H5T_STD_I32LE, H5T_NATIVE_INT32, w.data(), 10);
    testing::WriteVector(f, "heights", H5T_STD_I32LE, H5T_NATIVE_INT32, h.data(), 10);
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, H5T_VARIABLE);
    const char* names[] = {"x"};
    testing::WriteVector(f, "class_names", str, str, names, 1);
    H5Tclose(str);
    H5Fclose(f);
  }
  auto r = OpenOk(dir / "split.h5");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->info().read_path, ReadPath::kBlocks);
  for (int i = 0; i < 10; ++i) {
    std::vector<uint8_t> got;
    ASSERT_TRUE(r->ReadSample(i, &got).ok());
    EXPECT_EQ(got, Bytes(24, i)) << i;
  }
}

// ------------------------------------------------------------------ convert --upgrade

TEST(UpgradeTest, AVersion1FileBecomesVersion2WithTheSameContent) {
  TempDir dir;
  const EncodedSet set = MakeSet(300);
  WriteEncodedSet(dir / "old.h5", set, 1);
  auto before = InspectDataset(dir / "old.h5");
  ASSERT_TRUE(before.ok());
  UpgradeOptions o{dir / "old.h5", dir / "new.h5", false};
  auto report = ConvertUpgrade(o, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_FALSE(report->already_current);
  EXPECT_EQ(report->layout_from, 1);
  EXPECT_EQ(report->layout_to, 2);
  EXPECT_EQ(report->samples, 300);
  auto after = InspectDataset(dir / "new.h5", true);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->checksum, before->checksum);
  EXPECT_TRUE(after->bad_samples.empty());
  EXPECT_EQ(after->class_counts, before->class_counts);
  EXPECT_EQ(after->info.class_names, before->info.class_names);
  EXPECT_EQ(after->info.read_path, ReadPath::kDirect);
  EXPECT_EQ(after->info.bucket_sizes, set.bucket_sizes);
  auto r = OpenOk(dir / "new.h5");
  ASSERT_TRUE(r);
  std::vector<uint8_t> bucket;
  for (int i = 0; i < 300; i += 7) {
    ASSERT_TRUE(r->ReadBucketSample(16, i, &bucket).ok());
    EXPECT_EQ(bucket, set.Bucket(1, i));
    EXPECT_EQ(r->OriginalWidth(i), 10);
    EXPECT_EQ(r->OriginalHeight(i), 20);
  }
  // Existing output: refused without overwrite.
  auto again = ConvertUpgrade(o, nullptr);
  EXPECT_FALSE(again.ok());
  ExpectContains(again.status().message(), "already exists (pass --force");
}

TEST(UpgradeTest, InPlaceReplacesTheFileAndACurrentFileIsLeftAlone) {
  TempDir dir;
  const EncodedSet set = MakeSet(40);
  WriteEncodedSet(dir / "f.h5", set, 1, false);
  auto report = ConvertUpgrade(UpgradeOptions{dir / "f.h5", "", false}, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  auto r = OpenOk(dir / "f.h5");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->info().schema_version, 2);
  EXPECT_EQ(ReadAll(*r), set.samples);
  EXPECT_FALSE(std::filesystem::exists(PartialPath(dir / "f.h5")));
  struct stat st1 {}, st2 {};
  ASSERT_EQ(stat((dir / "f.h5").c_str(), &st1), 0);
  auto second = ConvertUpgrade(UpgradeOptions{dir / "f.h5", "", false}, nullptr);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->already_current);
  ASSERT_EQ(stat((dir / "f.h5").c_str(), &st2), 0);
  EXPECT_EQ(st1.st_ino, st2.st_ino) << "a current file is not rewritten";
  WriteRawSet(dir / "raw.h5", 10, "gzip:1");
  auto raw = ConvertUpgrade(UpgradeOptions{dir / "raw.h5", "", false}, nullptr);
  ASSERT_TRUE(raw.ok());
  EXPECT_TRUE(raw->already_current) << "raw pixels are the same in both versions";
}

TEST(UpgradeTest, ADamagedSampleStopsTheUpgradeWithNothingWritten) {
  TempDir dir;
  const EncodedSet set = MakeSet(30);
  WriteEncodedSet(dir / "f.h5", set, 1, false);
  // Change one stored byte of sample 11 through HDF5 (the checksum stays the old one).
  {
    std::lock_guard lock(Hdf5Lock());
    hid_t f = H5Fopen((dir / "f.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "images", H5P_DEFAULT);
    hid_t t = H5Tvlen_create(H5T_NATIVE_UINT8);
    hid_t space = H5Dget_space(d);
    hsize_t start = 11, one = 1;
    H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &one, nullptr);
    hid_t mem = H5Screate_simple(1, &one, nullptr);
    std::vector<uint8_t> changed = set.samples[11];
    changed[0] ^= 1;
    hvl_t vl{changed.size(), changed.data()};
    ASSERT_GE(H5Dwrite(d, t, mem, space, H5P_DEFAULT, &vl), 0);
    H5Sclose(mem);
    H5Sclose(space);
    H5Tclose(t);
    H5Dclose(d);
    H5Fclose(f);
  }
  const std::string out = dir / "out.h5";
  auto report = ConvertUpgrade(UpgradeOptions{dir / "f.h5", out, false}, nullptr);
  ASSERT_FALSE(report.ok());
  ExpectContains(report.status().message(), "sample 11 of " + dir / "f.h5" + " fails its checksum");
  ExpectContains(report.status().message(), "nothing was written");
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(PartialPath(out)));
}

}  // namespace
}  // namespace batchcast::data::read_path_test
