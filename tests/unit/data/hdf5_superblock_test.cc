// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The superblock check before H5Fopen (data/hdf5_util.h): every file HDF5 writes passes it
// (superblock versions 0 to 3, 4-byte offsets, a user block), and real files with changed
// or missing superblock bytes are refused with the file, the field and the fix named,
// before HDF5 reads them (the fuzzer's reproducers made HDF5 1.10 allocate 3 GiB).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstring>
#include <filesystem>

#include "data/dataset_reader.h"
#include "data/dataset_writer.h"
#include "data/hdf5_lock.h"
#include "data/hdf5_util.h"
#include "tests/unit/data/data_test_util.h"

namespace batchcast::data {
namespace {
using testing::ReadBytes;
using testing::TempDir;
using testing::WriteBytes;

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
