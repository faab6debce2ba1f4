// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// ImageFolder listing and conversion on JPEG and PNG files the test writes itself.
#include "data/image_folder.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "data/convert.h"
#include "data/dataset_reader.h"
#include "data/image_encode.h"
#include "tests/unit/data/data_test_util.h"

namespace batchcast::data {
namespace {
using testing::ReadBytes;
using testing::TempDir;
using testing::WriteBytes;

std::vector<uint8_t> Pattern(int w, int h, int c) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * c);
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t((i * 13) ^ (i >> 5));
  return px;
}

// The first half of a JPEG (the converter's trailer check refuses it).
std::vector<uint8_t> TruncatedJpeg() {
  auto jpg = *EncodeJpeg(Pattern(40, 30, 3), 40, 30, 3, 90);
  jpg.resize(jpg.size() / 2);
  return jpg;
}

// root/cat: 2 JPEGs + 1 PNG; root/ant: 1 PNG (gray) + notes.txt; root/.hidden ignored.
void MakeTree(const TempDir& dir) {
  WriteBytes(dir / "root/cat/b.jpg", *EncodeJpeg(Pattern(40, 30, 3), 40, 30, 3, 90));
  WriteBytes(dir / "root/cat/a.JPEG", *EncodeJpeg(Pattern(17, 23, 1), 17, 23, 1, 80));
  WriteBytes(dir / "root/cat/sub/c.png", *EncodePng(Pattern(9, 11, 3), 9, 11, 3));
  WriteBytes(dir / "root/ant/x.png", *EncodePng(Pattern(64, 8, 1), 64, 8, 1));
  WriteBytes(dir / "root/ant/notes.txt", {'h', 'i'});
  WriteBytes(dir / "root/.hidden/y.png", *EncodePng(Pattern(2, 2, 1), 2, 2, 1));
}

TEST(ImageFolderTest, ListsClassesSortedAndFilesByPath) {
  TempDir dir;
  MakeTree(dir);
  auto l = ListImageFolder(dir / "root");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->class_names, (std::vector<std::string>{"ant", "cat"}));
  ASSERT_EQ(l->files.size(), 4u);
  EXPECT_EQ(l->files[0].path, dir / "root/ant/x.png");
  EXPECT_EQ(l->files[0].label, 0);
  EXPECT_EQ(l->files[1].path, dir / "root/cat/a.JPEG");
  EXPECT_EQ(l->files[3].path, dir / "root/cat/sub/c.png");
  EXPECT_EQ(l->files[3].label, 1);
  ASSERT_EQ(l->ignored.size(), 1u);
  EXPECT_EQ(l->ignored[0].path, dir / "root/ant/notes.txt");
  EXPECT_NE(l->ignored[0].reason.find("unsupported extension '.txt'"), std::string::npos);
  EXPECT_TRUE(l->empty_classes.empty());
}

// One run finds every problem: each bad file with its cause, each ignored file (an
// unsupported extension named) and each empty class; nothing is written, and the error
// lists them all. --check lists the same without writing; the flags let it through.
TEST(ImageFolderTest, EveryProblemIsListedAtOnceAndNothingIsWritten) {
  TempDir dir;
  MakeTree(dir);
  WriteBytes(dir / "root/ant/broken.jpg", TruncatedJpeg());
  WriteBytes(dir / "root/cat/zzz.png", {'n', 'o'});
  WriteBytes(dir / "root/cat/photo.webp", {'R', 'I', 'F', 'F'});
  std::filesystem::create_directories(dir / "root/dog");
  ImageFolderConvertOptions o{.root = dir / "root", .out_path = dir / "out.h5", .threads = 3};
  auto rep = ConvertImageFolder(o, nullptr);
  ASSERT_FALSE(rep.ok());
  const std::string& msg = rep.status().message();
  for (const std::string& want : std::vector<std::string>{
           "has 2 bad images and 1 empty classes", "bad image: " + dir / "root/ant/broken.jpg",
        "bad image: " + dir / "root/cat/zzz.png", "empty class: " + dir / "root/dog",
        "--skip-bad", "--allow-empty-classes"})
    EXPECT_NE(msg.find(want), std::string::npos) << "'" << want << "' not in: " << msg;
  EXPECT_FALSE(std::filesystem::exists(o.out_path));
  o.check_only = true;
  auto check = ConvertImageFolder(o, nullptr);
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  EXPECT_EQ(check->samples, 0);
  ASSERT_EQ(check->skipped.size(), 2u);
  EXPECT_EQ(check->empty_classes, (std::vector<std::string>{"dog"}));
  ASSERT_EQ(check->ignored.size(), 2u);
  EXPECT_NE(check->ignored[1].find("photo.webp: unsupported extension '.webp'"), std::string::npos)
      << check->ignored[1];
  EXPECT_FALSE(std::filesystem::exists(o.out_path));
  EXPECT_EQ(ImageFolderProblems(o, *check), msg);
  o.check_only = false;
  o.skip_bad = true;
  o.allow_empty_classes = true;
  rep = ConvertImageFolder(o, nullptr);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->samples, 4);
  auto r = DatasetReader::Open(o.out_path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->info().class_names, (std::vector<std::string>{"ant", "cat", "dog"}));
}

TEST(ImageFolderTest, ConversionStoresOriginalBytesLabelsAndSizes) {
  TempDir dir;
  MakeTree(dir);
  ImageFolderConvertOptions o;
  o.root = dir / "root";
  o.out_path = dir / "out.h5";
  o.threads = 2;
  auto rep = ConvertImageFolder(o, nullptr);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->samples, 4);
  auto r = DatasetReader::Open(o.out_path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->info().encoding, "mixed");
  EXPECT_EQ((*r)->info().class_names, (std::vector<std::string>{"ant", "cat"}));
  const char* files[] = {"root/ant/x.png", "root/cat/a.JPEG", "root/cat/b.jpg",
                         "root/cat/sub/c.png"};
  const int widths[] = {64, 17, 40, 9}, heights[] = {8, 23, 30, 11}, labels[] = {0, 1, 1, 1};
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE((*r)->ReadSample(i, &bytes).ok());
    EXPECT_EQ(bytes, ReadBytes(dir / files[i])) << files[i];
    EXPECT_EQ((*r)->OriginalWidth(i), widths[i]);
    EXPECT_EQ((*r)->OriginalHeight(i), heights[i]);
    EXPECT_EQ((*r)->Label(i), labels[i]);
  }
}

TEST(ImageFolderTest, JpegOnlyTreeIsMarkedJpeg) {
  TempDir dir;
  WriteBytes(dir / "r/a/1.jpg", *EncodeJpeg(Pattern(8, 8, 3), 8, 8, 3, 90));
  WriteBytes(dir / "r/b/2.jpg", *EncodeJpeg(Pattern(8, 8, 3), 8, 8, 3, 90));
  auto rep = ConvertImageFolder({.root = dir / "r", .out_path = dir / "j.h5"}, nullptr);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  auto r = DatasetReader::Open(dir / "j.h5");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->info().encoding, "jpeg");
}

TEST(ImageFolderTest, CorruptImageFailsConversionWithItsPath) {
  TempDir dir;
  MakeTree(dir);
  WriteBytes(dir / "root/cat/broken.jpg", TruncatedJpeg());
  ImageFolderConvertOptions o{.root = dir / "root", .out_path = dir / "out.h5", .threads = 2};
  auto rep = ConvertImageFolder(o, nullptr);
  ASSERT_FALSE(rep.ok());
  EXPECT_NE(rep.status().message().find(dir / "root/cat/broken.jpg"), std::string::npos)
      << rep.status().message();
  EXPECT_NE(rep.status().message().find("truncated"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(o.out_path));
}

TEST(ImageFolderTest, SkipBadSkipsAndReportsCorruptAndEmptyFiles) {
  TempDir dir;
  MakeTree(dir);
  WriteBytes(dir / "root/cat/empty.png", {});
  WriteBytes(dir / "root/ant/fake.jpg", {'n', 'o', 'p', 'e'});
  ImageFolderConvertOptions o{.root = dir / "root", .out_path = dir / "out.h5", .skip_bad = true};
  auto rep = ConvertImageFolder(o, nullptr);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->samples, 4);
  ASSERT_EQ(rep->skipped.size(), 2u);
  EXPECT_NE(rep->skipped[0].find("fake.jpg"), std::string::npos) << rep->skipped[0];
  EXPECT_NE(rep->skipped[1].find("empty.png: empty image"), std::string::npos) << rep->skipped[1];
  auto r = DatasetReader::Open(o.out_path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->info().num_samples, 4);
}

TEST(ImageFolderTest, ADamagedJpegCostsOnlyItselfUnderSkipBad) {
  // One JPEG with an unsupported marker in its header, sorted before twenty good ones, on
  // one converter thread: only it is skipped, and every good file is stored byte for byte
  // (a per-thread decompressor used to report the bad marker again for every later file).
  TempDir dir;
  const auto good = *EncodeJpeg(Pattern(40, 30, 3), 40, 30, 3, 90);
  // SOI, the bad marker segment, then the rest (built in place: GCC 12's -Warray-bounds
  // misreads a vector insert of an initializer list at -O2 in some unity batches).
  const uint8_t marker[] = {0xff, 0x8a, 0x00, 0x04, 0x00, 0x00};
  std::vector<uint8_t> bad(good.size() + sizeof(marker));
  std::copy(good.begin(), good.begin() + 2, bad.begin());
  std::copy(std::begin(marker), std::end(marker), bad.begin() + 2);
  std::copy(good.begin() + 2, good.end(), bad.begin() + 2 + sizeof(marker));
  WriteBytes(dir / "root/cat/a00-bad.jpg", bad);
  for (int i = 1; i <= 20; ++i) WriteBytes(dir / ((i < 10 ? "root/cat/a0" : "root/cat/a") + std::to_string(i) + ".jpg"), good);
  ImageFolderConvertOptions o{.root = dir / "root", .out_path = dir / "out.h5", .threads = 1,
                              .skip_bad = true};
  auto rep = ConvertImageFolder(o, nullptr);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->skipped.size(), 1u);
  EXPECT_NE(rep->skipped[0].find("a00-bad.jpg"), std::string::npos) << rep->skipped[0];
  EXPECT_EQ(rep->samples, 20);
  auto r = DatasetReader::Open(o.out_path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)->info().num_samples, 20);
  for (int64_t i = 0; i < 20; ++i) {
    std::vector<uint8_t> bytes;
    ASSERT_TRUE((*r)->ReadSample(i, &bytes).ok());
    EXPECT_EQ(bytes, good) << "sample " << i;
  }
}

TEST(ImageFolderTest, MissingOrEmptyRootIsAnError) {
  TempDir dir;
  auto missing = ListImageFolder(dir / "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  std::filesystem::create_directories(dir / "empty/cls");
  auto empty = ListImageFolder(dir / "empty");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("no .jpg"), std::string::npos);
}

}  // namespace
}  // namespace batchcast::data
