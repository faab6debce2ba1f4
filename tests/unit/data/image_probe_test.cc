// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "data/image_probe.h"

#include <gtest/gtest.h>

#include "data/image_encode.h"

namespace batchcast::data {
namespace {

std::vector<uint8_t> Gradient(int w, int h, int c) {
  std::vector<uint8_t> px(size_t(w) * h * c);
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(i * 7);
  return px;
}

TEST(ImageProbeTest, PngHeaderGivesSizeAndChannels) {
  auto png = EncodePng(Gradient(37, 21, 3), 37, 21, 3);
  ASSERT_TRUE(png.ok()) << png.status().ToString();
  auto hdr = ProbeImage(*png);
  ASSERT_TRUE(hdr.ok()) << hdr.status().ToString();
  EXPECT_EQ(hdr->encoding, ImageEncoding::kPng);
  EXPECT_EQ(hdr->width, 37);
  EXPECT_EQ(hdr->height, 21);
  EXPECT_EQ(hdr->channels, 3);
}

TEST(ImageProbeTest, GrayJpegHeaderGivesSizeAndOneChannel) {
  auto jpg = EncodeJpeg(Gradient(28, 28, 1), 28, 28, 1, 90);
  ASSERT_TRUE(jpg.ok()) << jpg.status().ToString();
  EXPECT_EQ(SniffEncoding(*jpg), ImageEncoding::kJpeg);
  auto hdr = ProbeImage(*jpg);
  ASSERT_TRUE(hdr.ok()) << hdr.status().ToString();
  EXPECT_EQ(hdr->encoding, ImageEncoding::kJpeg);
  EXPECT_EQ(hdr->width, 28);
  EXPECT_EQ(hdr->height, 28);
  EXPECT_EQ(hdr->channels, 1);
}

TEST(ImageProbeTest, ColorJpegHasThreeChannels) {
  auto jpg = EncodeJpeg(Gradient(65, 33, 3), 65, 33, 3, 75);
  ASSERT_TRUE(jpg.ok());
  auto hdr = ProbeImage(*jpg);
  ASSERT_TRUE(hdr.ok()) << hdr.status().ToString();
  EXPECT_EQ(hdr->channels, 3);
  EXPECT_EQ(hdr->width, 65);
}

TEST(ImageProbeTest, EmptyBytesAreCorrupt) {
  auto hdr = ProbeImage({});
  ASSERT_FALSE(hdr.ok());
  EXPECT_EQ(hdr.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(hdr.status().message().find("empty"), std::string::npos);
}

TEST(ImageProbeTest, UnknownMagicIsNamed) {
  std::vector<uint8_t> gif = {'G', 'I', 'F', '8', '9', 'a', 0, 0};
  auto hdr = ProbeImage(gif);
  ASSERT_FALSE(hdr.ok());
  EXPECT_NE(hdr.status().message().find("not a JPEG or PNG"), std::string::npos)
      << hdr.status().message();
}

TEST(ImageProbeTest, TruncatedJpegIsCorrupt) {
  auto jpg = EncodeJpeg(Gradient(64, 64, 3), 64, 64, 3, 90);
  ASSERT_TRUE(jpg.ok());
  jpg->resize(jpg->size() * 2 / 3);
  auto hdr = ProbeImage(*jpg);
  ASSERT_FALSE(hdr.ok());
  EXPECT_NE(hdr.status().message().find("truncated"), std::string::npos) << hdr.status().message();
}

TEST(ImageProbeTest, TruncatedPngIsCorrupt) {
  auto png = EncodePng(Gradient(64, 64, 3), 64, 64, 3);
  ASSERT_TRUE(png.ok());
  png->resize(png->size() - 5);
  auto hdr = ProbeImage(*png);
  ASSERT_FALSE(hdr.ok());
  EXPECT_NE(hdr.status().message().find("truncated"), std::string::npos) << hdr.status().message();
}

TEST(ImageProbeTest, JpegWithBrokenHeaderIsCorrupt) {
  std::vector<uint8_t> bad = {0xff, 0xd8, 0xff, 0xe0, 0x00, 0x02, 0x12, 0x34, 0xff, 0xd9};
  auto hdr = ProbeImage(bad);
  ASSERT_FALSE(hdr.ok());
  EXPECT_EQ(hdr.status().code(), StatusCode::kCorruptData);
}

TEST(ImageProbeTest, ABadHeaderDoesNotSpoilTheGoodImagesAfterIt) {
  // The converters probe every file on a per-thread decompressor. libjpeg-turbo 2.1 leaves a
  // bad marker unread after an error and reports it again for the next image: one damaged
  // JPEG made every later good one on that thread "bad" (dropped under --skip-bad).
  auto good = EncodeJpeg(Gradient(40, 30, 3), 40, 30, 3, 85);
  ASSERT_TRUE(good.ok());
  std::vector<uint8_t> unknown_marker(good->begin(), good->begin() + 2);  // SOI, then 0xff8a
  unknown_marker.insert(unknown_marker.end(), {0xff, 0x8a, 0x00, 0x04, 0x00, 0x00});
  unknown_marker.insert(unknown_marker.end(), good->begin() + 2, good->end());
  std::vector<uint8_t> garbage_after_soi = {0xff, 0xd8, 0xff, 0x00, 0x12, 0xff, 0xd9};
  for (const auto& bad : {unknown_marker, garbage_after_soi}) {
    EXPECT_EQ(ProbeImage(bad).status().code(), StatusCode::kCorruptData);
    for (int i = 0; i < 3; ++i) {
      auto hdr = ProbeImage(*good);
      ASSERT_TRUE(hdr.ok()) << "good image " << i << " after a bad one: " << hdr.status().ToString();
      EXPECT_EQ(hdr->width, 40);
      EXPECT_EQ(hdr->height, 30);
    }
  }
}

TEST(ImageEncodeTest, RejectsWrongPixelCount) {
  std::vector<uint8_t> px(10);
  EXPECT_FALSE(EncodePng(px, 4, 4, 1).ok());
  EXPECT_FALSE(EncodeJpeg(px, 4, 4, 1, 90).ok());
  EXPECT_FALSE(EncodeJpeg(Gradient(4, 4, 1), 4, 4, 1, 101).ok());
}

}  // namespace
}  // namespace batchcast::data
