// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The HDF5 layout: writer/reader round trips, every malformed file the reader must refuse
// with a message naming file, dataset and cause, and concurrent reads. Then the superblock
// check before H5Fopen (data/hdf5_util.h, Hdf5SuperblockTest): every file HDF5 writes passes
// it (superblock versions 0 to 3, 4-byte offsets, a user block), and real files with changed
// or missing superblock bytes are refused with the file, the field and the fix named, before
// HDF5 reads them (the fuzzer's reproducers made HDF5 1.10 allocate 3 GiB, or leak).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "data/convert.h"
#include "data/dataset_inspect.h"
#include "data/dataset_reader.h"
#include "data/dataset_writer.h"
#include "data/hdf5_lock.h"
#include "data/hdf5_util.h"
#include "data/image_encode.h"
#include "tests/unit/data/data_test_util.h"

namespace batchcast::data {
namespace {
using testing::ExpectContains;
using testing::LayoutSpec;
using testing::ReadBytes;
using testing::TempDir;
using testing::WriteBytes;
using testing::WriteLayoutFile;

std::vector<uint8_t> Pixels(int n, int seed) {
  std::vector<uint8_t> px(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) px[size_t(i)] = uint8_t(i * 31 + seed * 17);
  return px;
}

// Writes a raw dataset of `n` 5x3x3 samples; sample i has label i % 3.
void WriteRaw(const std::string& path, int n, bool compress) {
  DatasetSpec spec;
  spec.kind = SampleKind::kRaw;
  spec.raw_height = 5;
  spec.raw_width = 3;
  spec.raw_channels = 3;
  spec.compress = compress;
  spec.class_names = {"a", "b", "c"};
  auto w = DatasetWriter::Create(path, spec);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int i = 0; i < n; ++i) ASSERT_TRUE((*w)->Append(Pixels(45, i), i % 3, 3, 5).ok());
  ASSERT_TRUE((*w)->Finish().ok());
}

// Writes an encoded dataset of `n` PNGs of varying size; sample i has label i % 2.
std::vector<std::vector<uint8_t>> WriteEncoded(const std::string& path, int n) {
  DatasetSpec spec;
  spec.class_names = {"even", "odd"};
  auto w = DatasetWriter::Create(path, spec);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  std::vector<std::vector<uint8_t>> all;
  for (int i = 0; i < n; ++i) {
    int side = 4 + i % 9;
    auto png = EncodePng(Pixels(side * side, i), side, side, 1);
    EXPECT_TRUE(png.ok());
    EXPECT_TRUE((*w)->Append(*png, i % 2, side, side, ImageEncoding::kPng).ok());
    all.push_back(*png);
  }
  EXPECT_TRUE((*w)->Finish().ok());
  return all;
}

std::string OpenError(const std::string& path) {
  auto r = DatasetReader::Open(path);
  EXPECT_FALSE(r.ok()) << path << " opened but should not";
  return r.ok() ? "" : r.status().message();
}

TEST(DatasetLayoutTest, RawRoundTripWithAndWithoutCompression) {
  TempDir dir;
  for (bool compress : {true, false}) {
    std::string path = dir / (compress ? "gz.h5" : "plain.h5");
    WriteRaw(path, 700, compress);
    auto r = DatasetReader::Open(path);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const auto& info = (*r)->info();
    EXPECT_EQ(info.kind, SampleKind::kRaw);
    EXPECT_EQ(info.num_samples, 700);
    EXPECT_EQ(info.raw_height, 5);
    EXPECT_EQ(info.raw_width, 3);
    EXPECT_EQ(info.raw_channels, 3);
    EXPECT_EQ(info.encoding, "raw");
    EXPECT_EQ(info.schema_version, 1);
    EXPECT_EQ(info.class_names, (std::vector<std::string>{"a", "b", "c"}));
    std::vector<uint8_t> px;
    for (int i : {0, 1, 255, 256, 699, 3}) {
      ASSERT_TRUE((*r)->ReadSample(i, &px).ok());
      EXPECT_EQ(px, Pixels(45, i)) << "sample " << i;
      EXPECT_EQ((*r)->Label(i), i % 3);
      EXPECT_EQ((*r)->OriginalWidth(i), 3);
      EXPECT_EQ((*r)->OriginalHeight(i), 5);
    }
    EXPECT_EQ((*r)->ReadSample(700, &px).code(), StatusCode::kOutOfRange);
  }
}

TEST(DatasetLayoutTest, EncodedRoundTripAndBlockReads) {
  TempDir dir;
  auto written = WriteEncoded(dir / "enc.h5", 2100);
  auto r = DatasetReader::Open(dir / "enc.h5");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->info().kind, SampleKind::kEncoded);
  EXPECT_EQ((*r)->info().encoding, "png");
  std::vector<uint8_t> bytes;
  for (int i : {0, 1023, 1024, 2099}) {
    ASSERT_TRUE((*r)->ReadSample(i, &bytes).ok());
    EXPECT_EQ(bytes, written[size_t(i)]);
    EXPECT_EQ((*r)->OriginalWidth(i), 4 + i % 9);
  }
  std::vector<std::vector<uint8_t>> block;
  ASSERT_TRUE((*r)->ReadSamples(1000, 100, &block).ok());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(block[size_t(i)], written[size_t(1000 + i)]);
}

TEST(DatasetLayoutTest, ConcurrentReadsFromEightThreadsEqualSerialReads) {
  TempDir dir;
  WriteEncoded(dir / "enc.h5", 600);
  WriteRaw(dir / "raw.h5", 600, true);
  for (const char* name : {"enc.h5", "raw.h5"}) {
    auto r = DatasetReader::Open(dir / name);
    ASSERT_TRUE(r.ok());
    std::vector<std::vector<uint8_t>> serial(600);
    for (int i = 0; i < 600; ++i) ASSERT_TRUE((*r)->ReadSample(i, &serial[size_t(i)]).ok());
    std::vector<std::vector<uint8_t>> parallel(600);
    std::vector<int> failures(8, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        // Each thread reads every sample in its own scattered order; thread t keeps i%8==t.
        std::vector<uint8_t> buf;
        for (int k = 0; k < 600; ++k) {
          int i = (k * 7 + t * 75) % 600;
          if (!(*r)->ReadSample(i, &buf).ok()) ++failures[size_t(t)];
          if (i % 8 == t) parallel[size_t(i)] = buf;
        }
      });
    }
    for (auto& th : threads) th.join();
    for (int f : failures) EXPECT_EQ(f, 0);
    EXPECT_EQ(parallel, serial) << name;
  }
}

TEST(DatasetLayoutTest, MissingFileIsNotFound) {
  auto r = DatasetReader::Open("/nonexistent/dir/train.h5");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  ExpectContains(r.status().message(), "/nonexistent/dir/train.h5");
}

TEST(DatasetLayoutTest, NotAnHdf5FileIsRefused) {
  TempDir dir;
  testing::WriteBytes(dir / "text.h5", {'h', 'e', 'l', 'l', 'o'});
  std::string msg = OpenError(dir / "text.h5");
  ExpectContains(msg, "is not an HDF5 file");
  ExpectContains(msg, "batchcast convert");
}

TEST(DatasetLayoutTest, MissingImagesOrLabelsIsNamed) {
  TempDir dir;
  WriteLayoutFile(dir / "noimages.h5", LayoutSpec{.images = "none"});
  ExpectContains(OpenError(dir / "noimages.h5"), "dataset 'images' is missing in " + dir / "noimages.h5");
  WriteLayoutFile(dir / "nolabels.h5", LayoutSpec{.labels = false});
  ExpectContains(OpenError(dir / "nolabels.h5"), "dataset 'labels' is missing");
}

TEST(DatasetLayoutTest, WrongImagesDtypeIsNamed) {
  TempDir dir;
  WriteLayoutFile(dir / "float.h5", LayoutSpec{.images = "float32"});
  std::string msg = OpenError(dir / "float.h5");
  ExpectContains(msg, "hdf5: dataset 'images' in " + dir / "float.h5" +
                          " has dtype float32, expected uint8 or vlen uint8");
  ExpectContains(msg, "re-create it with `batchcast convert`");
}

TEST(DatasetLayoutTest, MismatchedLengthsAreNamed) {
  TempDir dir;
  WriteLayoutFile(dir / "short.h5", LayoutSpec{.labels_count = 3});
  ExpectContains(OpenError(dir / "short.h5"), "dataset 'labels' in " + dir / "short.h5" +
                                                  " has 3 entries but 'images' has 4");
}

TEST(DatasetLayoutTest, MissingOrWrongSchemaVersionIsRefused) {
  TempDir dir;
  WriteLayoutFile(dir / "noschema.h5", LayoutSpec{.schema_attr = false});
  ExpectContains(OpenError(dir / "noschema.h5"), "no 'batchcast_schema_version' attribute");
  WriteLayoutFile(dir / "v3.h5", LayoutSpec{.schema_version = 3});
  ExpectContains(OpenError(dir / "v3.h5"), "has schema version 3, this build reads versions 1 to 2");
  // Version 2 stores encoded samples as bytes + index: a vlen `images` there is refused.
  WriteLayoutFile(dir / "v2.h5", LayoutSpec{.schema_version = 2});
  ExpectContains(OpenError(dir / "v2.h5"), "is vlen uint8 (layout version 1) but the file says "
                                           "layout version 2");
}

TEST(DatasetLayoutTest, FileWithoutCompletenessMarkerIsIncomplete) {
  TempDir dir;
  WriteLayoutFile(dir / "partial.h5", LayoutSpec{.complete_attr = false});
  ExpectContains(OpenError(dir / "partial.h5"), "is incomplete");
}

TEST(DatasetLayoutTest, ValidHandMadeFilesOpen) {
  TempDir dir;
  WriteLayoutFile(dir / "vlen.h5", LayoutSpec{});
  WriteLayoutFile(dir / "raw.h5", LayoutSpec{.images = "raw"});
  EXPECT_TRUE(DatasetReader::Open(dir / "vlen.h5").ok());
  auto raw = DatasetReader::Open(dir / "raw.h5");
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  EXPECT_EQ((*raw)->info().encoding, "raw");
}

// h5py writes string attributes as variable-length UTF-8 strings by default; the reader
// takes them wherever it reads a string attribute (here 'encoding' on images).
TEST(DatasetLayoutTest, H5pyVariableLengthStringAttributesAreRead) {
  TempDir dir;
  const std::string path = dir / "handmade.h5";
  const std::string script =
      "import sys, h5py, numpy as np\n"
      "png = np.frombuffer(b'\\x89PNG\\r\\n\\x1a\\n', dtype=np.uint8)\n"
      "with h5py.File(sys.argv[1], 'w') as f:\n"
      "    f.attrs['batchcast_schema_version'] = 1\n"
      "    f.attrs['batchcast_created_by'] = 'h5py by hand'\n"
      "    im = f.create_dataset('images', (3,), dtype=h5py.vlen_dtype(np.uint8))\n"
      "    for i in range(3): im[i] = png\n"
      "    im.attrs['encoding'] = 'png'\n"
      "    f['labels'] = np.array([0, 1, 0], dtype=np.int64)\n"
      "    f['widths'] = np.array([2, 2, 2], dtype=np.int32)\n"
      "    f['heights'] = np.array([2, 2, 2], dtype=np.int32)\n"
      "    f['class_names'] = np.array(['cat', 'dog'], dtype=h5py.string_dtype())\n"
      "    f.attrs['batchcast_complete'] = 1\n";
  testing::WriteBytes(dir / "make.py", std::vector<uint8_t>(script.begin(), script.end()));
  ASSERT_EQ(std::system(("/usr/bin/python3 " + dir / "make.py" + " " + path).c_str()), 0)
      << "h5py (python3-h5py, installed by scripts/deps.sh) could not write " << path;
  auto r = DatasetReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->info().encoding, "png");
  EXPECT_EQ((*r)->info().class_names, (std::vector<std::string>{"cat", "dog"}));
  auto report = InspectDataset(path);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
}

// Flips one byte of `needle`'s only occurrence in the file at `path` (a stored sample).
void FlipStoredByte(const std::string& path, const std::vector<uint8_t>& needle, size_t at) {
  auto file = testing::ReadBytes(path);
  auto it = std::search(file.begin(), file.end(), needle.begin(), needle.end());
  ASSERT_NE(it, file.end()) << "sample bytes not found in " << path;
  ASSERT_EQ(std::search(it + 1, file.end(), needle.begin(), needle.end()), file.end());
  *(it + long(at)) ^= 0x5a;
  testing::WriteBytes(path, file);
}

void SetLabel(const std::string& path, int64_t index, int64_t label) {
  std::lock_guard lock(Hdf5Lock());
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, "labels", H5P_DEFAULT);
  hid_t space = H5Dget_space(d);
  hsize_t start = hsize_t(index), count = 1;
  H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
  hid_t mem = H5Screate_simple(1, &count, nullptr);
  EXPECT_GE(H5Dwrite(d, H5T_NATIVE_INT64, mem, space, H5P_DEFAULT, &label), 0);
  H5Sclose(mem);
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
}

// The writer stores a checksum per sample (over its bytes, seeded with its label); a
// changed byte (raw or encoded) or a changed label fails VerifySample and is listed by
// inspect's verify, every one of them, while the rest still verify.
TEST(DatasetLayoutTest, SampleChecksumsFindEveryChangedSampleAndLabel) {
  TempDir dir;
  auto written = WriteEncoded(dir / "enc.h5", 40);
  WriteRaw(dir / "raw.h5", 20, false);
  FlipStoredByte(dir / "enc.h5", written[7], written[7].size() / 2);
  FlipStoredByte(dir / "enc.h5", written[30], 40);
  SetLabel(dir / "enc.h5", 12, 1 - 12 % 2);
  std::vector<uint8_t> raw5 = Pixels(45, 5);
  FlipStoredByte(dir / "raw.h5", raw5, 44);
  auto enc = InspectDataset(dir / "enc.h5", true);
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  EXPECT_TRUE(enc->info.has_checksums);
  ASSERT_EQ(enc->bad_samples.size(), 3u);
  EXPECT_EQ(enc->bad_samples[0].index, 7);
  EXPECT_EQ(enc->bad_samples[1].index, 12);
  EXPECT_EQ(enc->bad_samples[2].index, 30);
  ExpectContains(enc->bad_samples[1].cause, "sample 12 of " + dir / "enc.h5" + " fails its checksum");
  ExpectContains(SummaryToJson(*enc), "\"bad_samples\"");
  auto raw = InspectDataset(dir / "raw.h5", true);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  ASSERT_EQ(raw->bad_samples.size(), 1u);
  EXPECT_EQ(raw->bad_samples[0].index, 5);
  auto r = DatasetReader::Open(dir / "raw.h5");
  ASSERT_TRUE(r.ok());
  std::vector<uint8_t> px;
  ASSERT_TRUE((*r)->ReadSample(5, &px).ok());
  EXPECT_EQ((*r)->VerifySample(5, px).code(), StatusCode::kCorruptData);
  ASSERT_TRUE((*r)->ReadSample(6, &px).ok());
  EXPECT_TRUE((*r)->VerifySample(6, px).ok());
  EXPECT_EQ(SampleChecksum(px, 0), SampleChecksum(px, 0));
  EXPECT_NE(SampleChecksum(px, 0), SampleChecksum(px, 1));
}

// Files written before checksums existed still open and read; they say they have none.
TEST(DatasetLayoutTest, FilesWithoutChecksumsStillRead) {
  TempDir dir;
  WriteLayoutFile(dir / "old.h5", LayoutSpec{});
  auto r = DatasetReader::Open(dir / "old.h5");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE((*r)->info().has_checksums);
  std::vector<uint8_t> bytes;
  ASSERT_TRUE((*r)->ReadSample(0, &bytes).ok());
  EXPECT_TRUE((*r)->VerifySample(0, bytes).ok());
  auto s = InspectDataset(dir / "old.h5", true);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->bad_samples.empty());
  ExpectContains(SummaryToJson(*s), "\"sample_checksums\": false");
}

// New files use the HDF5 1.8+ format (metadata with checksums): superblock version >= 2.
TEST(DatasetLayoutTest, NewFilesUseTheFormatWithMetadataChecksums) {
  TempDir dir;
  WriteRaw(dir / "x.h5", 3, true);
  std::lock_guard lock(Hdf5Lock());
  hid_t f = H5Fopen((dir / "x.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  H5F_info2_t info{};
  ASSERT_GE(H5Fget_info2(f, &info), 0);
  EXPECT_GE(info.super.version, 2u);
  H5Fclose(f);
}

// A small file declaring absurd dimensions: `images` chunked, of shape `dims` (rank 4 raw,
// or rank 1 vlen), with no data written.
void WriteAbsurdImages(const std::string& path, std::vector<hsize_t> dims) {
  std::lock_guard lock(Hdf5Lock());
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  testing::WriteIntAttr(f, "batchcast_schema_version", 1);
  testing::WriteIntAttr(f, "batchcast_complete", 1);
  const int rank = int(dims.size());
  hid_t space = H5Screate_simple(rank, dims.data(), nullptr);
  std::vector<hsize_t> chunk(dims.size(), 1);
  chunk[0] = 16;
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, rank, chunk.data());
  hid_t type = rank == 4 ? H5Tcopy(H5T_STD_U8LE) : H5Tvlen_create(H5T_STD_U8LE);
  hid_t d = H5Dcreate2(f, "images", type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  H5Dclose(d);
  H5Tclose(type);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(f);
}

// Dimensions come from the file: one above INT_MAX, or a sample count the file does not
// store, is refused at open with the cause (before, inspect aborted or read fill values
// for minutes).
TEST(DatasetLayoutTest, AbsurdDimensionsAreRefusedAtOpen) {
  TempDir dir;
  WriteAbsurdImages(dir / "wide.h5", {16, 2, 3000000000ULL, 1});
  ExpectContains(OpenError(dir / "wide.h5"), "declares raw samples of 2x3000000000x1");
  WriteAbsurdImages(dir / "many.h5", {hsize_t(1) << 34});
  ExpectContains(OpenError(dir / "many.h5"), "stores 0 of the 1073741824 chunks");
  WriteAbsurdImages(dir / "huge.h5", {hsize_t(1) << 50});
  ExpectContains(OpenError(dir / "huge.h5"), "declares 1125899906842624 samples");
  auto inspect = InspectDataset(dir / "many.h5", true);
  EXPECT_FALSE(inspect.ok());
}

TEST(DatasetLayoutTest, ZeroLengthEncodedSampleIsCorruptAtRead) {
  TempDir dir;
  WriteLayoutFile(dir / "empty.h5", LayoutSpec{.zero_length_sample = true});
  auto r = DatasetReader::Open(dir / "empty.h5");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<uint8_t> bytes;
  EXPECT_TRUE((*r)->ReadSample(1, &bytes).ok());
  Status st = (*r)->ReadSample(2, &bytes);
  EXPECT_EQ(st.code(), StatusCode::kCorruptData);
  ExpectContains(st.message(), "sample 2 in " + dir / "empty.h5" + " is empty (0 bytes)");
}

TEST(DatasetLayoutTest, WriterRefusesEmptySampleAndBadLabel) {
  TempDir dir;
  DatasetSpec spec;
  spec.class_names = {"only"};
  auto w = DatasetWriter::Create(dir / "x.h5", spec);
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE((*w)->Append({}, 0, 1, 1, ImageEncoding::kPng).ok());
  std::vector<uint8_t> one = {1};
  EXPECT_FALSE((*w)->Append(one, 1, 1, 1, ImageEncoding::kPng).ok());
}

TEST(DatasetLayoutTest, AbandonedWriterLeavesNoFile) {
  TempDir dir;
  std::string partial;
  {
    DatasetSpec spec;
    spec.class_names = {"a"};
    auto w = DatasetWriter::Create(dir / "out.h5", spec);
    ASSERT_TRUE(w.ok());
    partial = (*w)->partial_path();
    EXPECT_TRUE(std::filesystem::exists(partial));
  }
  EXPECT_FALSE(std::filesystem::exists(partial));
  EXPECT_FALSE(std::filesystem::exists(dir / "out.h5"));
}

TEST(DatasetLayoutTest, ExistingOutputNeedsOverwrite) {
  TempDir dir;
  WriteRaw(dir / "x.h5", 3, false);
  DatasetSpec spec;
  spec.kind = SampleKind::kRaw;
  spec.raw_height = spec.raw_width = spec.raw_channels = 1;
  auto w = DatasetWriter::Create(dir / "x.h5", spec);
  ASSERT_FALSE(w.ok());
  ExpectContains(w.status().message(), "already exists");
}

// A conversion killed with SIGKILL halfway leaves no file at OUT, and its partial file is
// refused by the reader.
TEST(DatasetLayoutTest, KilledConversionLeavesNothingThatLooksComplete) {
  TempDir dir;
  const std::string out = dir / "killed.h5";
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    IdxConvertOptions o;
    o.images_path = testing::FashionPath("t10k-images-idx3-ubyte.gz");
    o.labels_path = testing::FashionPath("t10k-labels-idx1-ubyte.gz");
    o.out_path = out;
    o.threads = 1;
    auto r = ConvertIdx(o, [](int64_t done, int64_t total) {
      if (done == total / 2) kill(getpid(), SIGKILL);
    });
    _exit(r.ok() ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the conversion was not killed (status " << status << ")";
  EXPECT_FALSE(std::filesystem::exists(out));
  std::string partial = out + ".partial-" + std::to_string(child);
  ASSERT_TRUE(std::filesystem::exists(partial));
  std::string msg = OpenError(partial);
  EXPECT_TRUE(msg.find("incomplete") != std::string::npos ||
              msg.find("did not finish") != std::string::npos) << msg;
}

TEST(DatasetLayoutTest, ChecksumDependsOnContentNotOnCompression) {
  TempDir dir;
  WriteRaw(dir / "gz.h5", 300, true);
  WriteRaw(dir / "plain.h5", 300, false);
  WriteRaw(dir / "fewer.h5", 299, false);
  auto a = InspectDataset(dir / "gz.h5");
  auto b = InspectDataset(dir / "plain.h5");
  auto c = InspectDataset(dir / "fewer.h5");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->checksum, b->checksum);
  EXPECT_NE(a->checksum, c->checksum);
  EXPECT_EQ(a->stored_bytes, 300 * 45);
  EXPECT_EQ(a->class_counts, (std::vector<int64_t>{100, 100, 100}));
  EXPECT_LT(a->file_bytes, b->file_bytes);
}

// ------------------------------------------------ the superblock check before H5Fopen

// A dataset written by the project (version 2+ superblock, HDF5 1.8+ format bounds).
void WriteDataset(const std::string& path) {
  DatasetSpec spec;
  spec.kind = SampleKind::kRaw;
  spec.raw_height = 2;
  spec.raw_width = 2;
  spec.raw_channels = 1;
  spec.class_names = {"a"};
  auto w = DatasetWriter::Create(path, spec);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE((*w)->Append(std::vector<uint8_t>(4, uint8_t(i)), 0, 2, 2).ok());
  ASSERT_TRUE((*w)->Finish().ok());
}

// An empty HDF5 file written with HDF5's defaults (version 0 superblock) or the given
// creation settings.
void WritePlain(const std::string& path, hsize_t userblock = 0, size_t offsets = 8,
                bool latest = false) {
  std::lock_guard lock(Hdf5Lock());
  hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (userblock > 0) H5Pset_userblock(fcpl, userblock);
  H5Pset_sizes(fcpl, offsets, offsets);
  if (latest) H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl);
  ASSERT_GE(f, 0) << path;
  hid_t g = H5Gcreate2(f, "group", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Gclose(g);
  H5Fclose(f);
  H5Pclose(fapl);
  H5Pclose(fcpl);
}

void PutLe(std::vector<uint8_t>* bytes, size_t at, uint64_t value, int width) {
  for (int i = 0; i < width; ++i) (*bytes)[at + size_t(i)] = uint8_t(value >> (8 * i));
}

// `bytes` written to `name`, then checked: the error message (empty when accepted).
std::string Check(const TempDir& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  WriteBytes(dir / name, bytes);
  Status st = CheckHdf5Superblock(dir / name);
  if (st.ok()) return "";
  EXPECT_EQ(st.code(), StatusCode::kCorruptData) << st.ToString();
  return st.message();
}

void ExpectRefused(const std::string& msg, const std::string& path, const std::string& field) {
  EXPECT_NE(msg.find(path), std::string::npos) << "file not named: " << msg;
  EXPECT_NE(msg.find(field), std::string::npos) << "'" << field << "' not in: " << msg;
  EXPECT_NE(msg.find("batchcast convert"), std::string::npos) << "no fix in: " << msg;
}

TEST(Hdf5SuperblockTest, EveryFileHdf5WritesPasses) {
  TempDir dir;
  WriteDataset(dir / "dataset.h5");
  WritePlain(dir / "v0.h5");
  WritePlain(dir / "v0-4byte-offsets.h5", 0, 4);
  WritePlain(dir / "v0-userblock.h5", 1024);
  WritePlain(dir / "latest.h5", 0, 8, true);
  WritePlain(dir / "latest-userblock.h5", 512, 8, true);
  for (const char* name : {"dataset.h5", "v0.h5", "v0-4byte-offsets.h5", "v0-userblock.h5",
                           "latest.h5", "latest-userblock.h5"}) {
    Status st = CheckHdf5Superblock(dir / name);
    EXPECT_TRUE(st.ok()) << name << ": " << st.ToString();
  }
  EXPECT_EQ(ReadBytes(dir / "v0.h5")[8], 0) << "HDF5's default superblock is version 0";
  EXPECT_GE(ReadBytes(dir / "latest.h5")[8], 2);
  EXPECT_EQ(ReadBytes(dir / "v0-userblock.h5")[1024], 0x89) << "superblock after the user block";
  EXPECT_TRUE(DatasetReader::Open(dir / "dataset.h5").ok());
}

TEST(Hdf5SuperblockTest, ATruncatedFileIsRefusedBeforeHdf5ReadsIt) {
  TempDir dir;
  WriteDataset(dir / "dataset.h5");
  const std::vector<uint8_t> whole = ReadBytes(dir / "dataset.h5");
  const size_t sb = 16 + 4 * size_t(whole[9]);  // version 2/3: 16 + 4 addresses
  struct Cut {
    size_t keep;
    const char* field;
  };
  for (Cut c : {Cut{9, "cut short"}, Cut{sb - 1, "cut short"}, Cut{sb, "end of file address"},
                Cut{whole.size() / 2, "end of file address"},
                Cut{whole.size() - 1, "end of file address"}}) {
    const std::string name = "cut-" + std::to_string(c.keep) + ".h5";
    std::vector<uint8_t> bytes(whole.begin(), whole.begin() + long(c.keep));
    ExpectRefused(Check(dir, name, bytes), dir / name, c.field);
    // The reader goes through the check: the same message, not HDF5's.
    auto r = DatasetReader::Open(dir / name);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(c.field), std::string::npos) << r.status().ToString();
  }
  EXPECT_EQ(Check(dir, "whole.h5", whole), "");
}

TEST(Hdf5SuperblockTest, ChangedFieldsOfAVersion2SuperblockAreNamed) {
  TempDir dir;
  WriteDataset(dir / "dataset.h5");
  const std::vector<uint8_t> whole = ReadBytes(dir / "dataset.h5");
  ASSERT_GE(whole[8], 2);
  ASSERT_EQ(whole[9], 8);
  const size_t base = 12, ext = 20, eof = 28, root = 36;  // 8-byte addresses
  struct Change {
    size_t at;
    uint64_t value;
    int width;
    const char* field;
  };
  for (Change c : {Change{8, 9, 1, "version"}, Change{9, 3, 1, "size of offsets"},
                   Change{10, 0, 1, "size of lengths"},
                   Change{base, 1ull << 40, 8, "base address"},
                   Change{eof, 1ull << 40, 8, "end of file address"},
                   Change{eof, 20, 8, "end of file address"},
                   Change{root, 1ull << 40, 8, "root group object header address"},
                   Change{root, 3, 8, "root group object header address"},
                   Change{root, ~0ull, 8, "root group object header address"},
                   Change{ext, 1ull << 50, 8, "superblock extension address"}}) {
    std::vector<uint8_t> bytes = whole;
    PutLe(&bytes, c.at, c.value, c.width);
    const std::string name = "field-" + std::to_string(c.at) + "-" + std::to_string(c.value);
    ExpectRefused(Check(dir, name, bytes), dir / name, c.field);
  }
}

uint64_t RootAddress(const std::vector<uint8_t>& bytes, size_t at) {
  uint64_t root = 0;
  for (int i = 0; i < 8; ++i) root |= uint64_t(bytes[at + size_t(i)]) << (8 * i);
  EXPECT_LT(root + 16, bytes.size());
  return root;
}

// The root group's object header is where HDF5 allocates what the file declares before it
// reads (or checksums) it: a first chunk of 3 GiB in a small file is refused first.
TEST(Hdf5SuperblockTest, ARootObjectHeaderDeclaringMoreThanTheFileIsRefused) {
  TempDir dir;
  // Version 2 header ("OHDR"): the flags widened to a 4-byte chunk size of 3 GiB.
  WriteDataset(dir / "dataset.h5");
  std::vector<uint8_t> v2 = ReadBytes(dir / "dataset.h5");
  const uint64_t root = RootAddress(v2, 36);
  ASSERT_EQ(std::memcmp(v2.data() + root, "OHDR", 4), 0);
  const uint8_t flags = uint8_t((v2[root + 5] & ~3) | 2);
  v2[root + 5] = flags;
  const size_t at = root + 6 + ((flags & 0x20) ? 16 : 0) + ((flags & 0x10) ? 4 : 0);
  PutLe(&v2, at, 0xc0000000u, 4);
  ExpectRefused(Check(dir, "v2-root.h5", v2), dir / "v2-root.h5", "root group object header");
  // Version 1 header under a version 0 superblock: the 4-byte header size at byte 8.
  WritePlain(dir / "v0.h5");
  std::vector<uint8_t> v1 = ReadBytes(dir / "v0.h5");
  const uint64_t root1 = RootAddress(v1, 64);
  ASSERT_EQ(v1[root1], 1);
  PutLe(&v1, root1 + 8, 0xc0000000u, 4);
  ExpectRefused(Check(dir, "v1-root.h5", v1), dir / "v1-root.h5", "root group object header");
}

TEST(Hdf5SuperblockTest, ChangedFieldsOfAVersion0SuperblockAreNamed) {
  TempDir dir;
  WritePlain(dir / "v0.h5");
  const std::vector<uint8_t> whole = ReadBytes(dir / "v0.h5");
  ASSERT_EQ(whole[8], 0);
  // 24 fixed bytes, then base, free space, end of file, driver block (8 bytes each), then
  // the root entry: name offset, object header address, cache type.
  const size_t eof = 40, driver = 48, root = 64, cache = 72;
  struct Change {
    size_t at;
    uint64_t value;
    int width;
    const char* field;
  };
  for (Change c : {Change{9, 1, 1, "free-space storage version"},
                   Change{13, 7, 1, "size of offsets"}, Change{16, 0, 2, "K of 0"},
                   Change{eof, 0, 8, "end of file address"},
                   Change{driver, 96, 8, "driver information block"},
                   Change{driver, 1ull << 33, 8, "driver information block address"},
                   Change{root, 4, 8, "root group object header address"},
                   Change{cache, 5, 4, "cache type"}}) {
    std::vector<uint8_t> bytes = whole;
    PutLe(&bytes, c.at, c.value, c.width);
    const std::string name = "v0-" + std::to_string(c.at) + "-" + std::to_string(c.value);
    ExpectRefused(Check(dir, name, bytes), dir / name, c.field);
  }
}

// The fuzzer's reproducers (tests/fuzz/corpus/fuzz_hdf5/regress-*): 50 and 61 bytes whose
// version-0 superblock made H5Fopen allocate and zero 3 GiB. Now refused by the check,
// before HDF5 runs, naming the cut-short superblock.
TEST(Hdf5SuperblockTest, TheFuzzersReproducersAreRefusedBeforeHdf5Allocates) {
  for (const char* name : {"regress-oom-superblock-v0-50-bytes",
                           "regress-slow-superblock-v0-61-bytes"}) {
    const std::string path =
        std::string(BATCHCAST_SOURCE_DIR) + "/tests/fuzz/corpus/fuzz_hdf5/" + name;
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    auto r = DatasetReader::Open(path);
    ASSERT_FALSE(r.ok());
    ExpectRefused(r.status().message(), path, "superblock (version 0, at byte 0) is cut short");
  }
  // Version-1 root headers whose second continuation chunk holds a continuation message (of
  // size 0, which HDF5 decodes all the same) declaring 3 PiB, or one whose address and length
  // lie past the end of its chunk (HDF5 reads them out of bounds): H5Fopen failed and leaked
  // (LeakSanitizer). Refused before, naming the root header and its continuation.
  for (auto [name, part] :
       {std::pair{"regress-leak-root-continuation-3-pib", "whose object header continues at"},
        std::pair{"regress-leak-continuation-past-chunk", "continuation message cut short"}}) {
    const std::string path =
        std::string(BATCHCAST_SOURCE_DIR) + "/tests/fuzz/corpus/fuzz_hdf5/" + name;
    auto r = DatasetReader::Open(path);
    ASSERT_FALSE(r.ok()) << name;
    ExpectRefused(r.status().message(), path, "'root group object header address' 96");
    ExpectRefused(r.status().message(), path, part);
  }
}

}  // namespace
}  // namespace batchcast::data
