// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Decoding real JPEGs and PNGs of every kind against a reference decode.
#include "pipeline/decode.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "tests/unit/pipeline/test_images.h"

namespace batchcast::pipeline {
namespace {

using testing::Image;

DecodedImage MustDecode(const std::vector<uint8_t>& bytes, int scale_num, int channels) {
  auto decoder = ImageDecoder::Create();
  EXPECT_TRUE(decoder.ok());
  auto header = decoder->ReadHeader(bytes, 1 << 30);
  EXPECT_TRUE(header.ok()) << header.status().ToString();
  DecodedImage out;
  Status s = decoder->Decode(bytes, *header, scale_num, channels, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

void ExpectSame(const Image& ref, const DecodedImage& got) {
  ASSERT_EQ(got.width, ref.width);
  ASSERT_EQ(got.height, ref.height);
  ASSERT_EQ(got.channels, ref.channels);
  ASSERT_EQ(got.pixels, ref.pixels);
}

struct JpegCase {
  const char* name;
  int channels, subsamp;
  bool progressive;
};

class JpegDecodeTest : public ::testing::TestWithParam<JpegCase> {};

TEST_P(JpegDecodeTest, MatchesDjpegAtFullAndScaledSizes) {
  const JpegCase& c = GetParam();
  Image photo = testing::Photo(333, 251);
  if (c.channels == 1) {
    DecodedImage gray;
    ConvertChannels(photo.pixels.data(), 333, 251, 3, 1, &gray);
    photo = Image{333, 251, 1, gray.pixels};
  }
  auto jpeg = testing::EncodeJpeg(photo, 90, c.subsamp, c.progressive);
  ASSERT_FALSE(jpeg.empty());
  ExpectSame(testing::DjpegDecode(jpeg), MustDecode(jpeg, 8, c.channels));
  ExpectSame(testing::DjpegDecode(jpeg, "1/2"), MustDecode(jpeg, 4, c.channels));
  ExpectSame(testing::DjpegDecode(jpeg, "1/4"), MustDecode(jpeg, 2, c.channels));
  ExpectSame(testing::DjpegDecode(jpeg, "1/8"), MustDecode(jpeg, 1, c.channels));
  DecodedImage eighth = MustDecode(jpeg, 1, c.channels);
  EXPECT_EQ(eighth.width, 42);   // ceil(333 / 8)
  EXPECT_EQ(eighth.height, 32);  // ceil(251 / 8)
}

INSTANTIATE_TEST_SUITE_P(Kinds, JpegDecodeTest,
                         ::testing::Values(JpegCase{"baseline420", 3, TJSAMP_420, false},
                                           JpegCase{"baseline444", 3, TJSAMP_444, false},
                                           JpegCase{"progressive", 3, TJSAMP_420, true},
                                           JpegCase{"grayscale", 1, TJSAMP_GRAY, false}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(JpegDecodeTest, GrayscaleJpegToRgbReplicatesLuma) {
  Image photo = testing::Photo(64, 48);
  DecodedImage gray;
  ConvertChannels(photo.pixels.data(), 64, 48, 3, 1, &gray);
  auto jpeg = testing::EncodeJpeg(Image{64, 48, 1, gray.pixels}, 90, TJSAMP_GRAY);
  DecodedImage g = MustDecode(jpeg, 8, 1), rgb = MustDecode(jpeg, 8, 3);
  ASSERT_EQ(rgb.pixels.size(), g.pixels.size() * 3);
  for (size_t i = 0; i < g.pixels.size(); ++i)
    for (int c = 0; c < 3; ++c) ASSERT_EQ(rgb.pixels[i * 3 + c], g.pixels[i]);
}

TEST(JpegDecodeTest, CmykJpegDecodesToRgb) {
  // Inverted CMYK of a photo, as libjpeg-turbo's rgb_to_cmyk defines it.
  Image photo = testing::Photo(96, 64);
  Image cmyk{96, 64, 4, std::vector<uint8_t>(96 * 64 * 4)};
  for (int i = 0; i < 96 * 64; ++i) {
    double c = 1 - photo.pixels[i * 3] / 255.0, m = 1 - photo.pixels[i * 3 + 1] / 255.0,
           y = 1 - photo.pixels[i * 3 + 2] / 255.0, k = std::min({c, m, y});
    if (k < 1) {
      c = (c - k) / (1 - k);
      m = (m - k) / (1 - k);
      y = (y - k) / (1 - k);
    } else {
      c = m = y = 0;
    }
    double v[4] = {c, m, y, k};
    for (int j = 0; j < 4; ++j) cmyk.pixels[i * 4 + j] = static_cast<uint8_t>(255 - v[j] * 255 + 0.5);
  }
  auto jpeg = testing::EncodeJpeg(cmyk, 98, TJSAMP_444);
  auto decoder = ImageDecoder::Create();
  auto header = decoder->ReadHeader(jpeg, 1 << 30);
  ASSERT_TRUE(header.ok());
  EXPECT_TRUE(header->cmyk);
  DecodedImage rgb = MustDecode(jpeg, 8, 3);
  ASSERT_EQ(rgb.channels, 3);
  double err = 0;
  for (size_t i = 0; i < rgb.pixels.size(); ++i) err += std::abs(rgb.pixels[i] - photo.pixels[i]);
  EXPECT_LT(err / rgb.pixels.size(), 4.0);  // lossy, but the same picture
  DecodedImage gray = MustDecode(jpeg, 4, 1);
  EXPECT_EQ(gray.channels, 1);
  EXPECT_EQ(gray.width, 48);
}

TEST(PngDecodeTest, EveryColorTypeAndDepth) {
  Image photo = testing::Photo(37, 23);  // odd sizes
  const int n = 37 * 23;
  std::vector<uint8_t> rgb16(n * 6), gray(n), gray_alpha(n * 2), rgba(n * 4), indexed(n);
  DecodedImage luma;
  ConvertChannels(photo.pixels.data(), 37, 23, 3, 1, &luma);
  std::vector<uint8_t> palette;  // 16 entries; pixels take entry i % 16
  for (int i = 0; i < 16; ++i) palette.insert(palette.end(), {uint8_t(i * 16), uint8_t(255 - i * 7), uint8_t(i * 3)});
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) {
      rgb16[i * 6 + c * 2] = rgb16[i * 6 + c * 2 + 1] = photo.pixels[i * 3 + c];  // v * 257
      rgba[i * 4 + c] = photo.pixels[i * 3 + c];
    }
    rgba[i * 4 + 3] = static_cast<uint8_t>(i);
    gray[i] = gray_alpha[i * 2] = luma.pixels[i];
    gray_alpha[i * 2 + 1] = 200;
    indexed[i] = static_cast<uint8_t>(i % 16);
  }
  std::vector<uint8_t> palette_rgb(n * 3);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < 3; ++c) palette_rgb[i * 3 + c] = palette[(i % 16) * 3 + c];

  ExpectSame(photo, MustDecode(testing::EncodePng(37, 23, 2, 8, photo.pixels), 8, 3));
  ExpectSame(photo, MustDecode(testing::EncodePng(37, 23, 2, 16, rgb16), 8, 3));
  ExpectSame(photo, MustDecode(testing::EncodePng(37, 23, 6, 8, rgba), 8, 3));
  ExpectSame(Image{37, 23, 3, palette_rgb},
             MustDecode(testing::EncodePng(37, 23, 3, 8, indexed, palette), 8, 3));
  Image gray_img{37, 23, 1, gray};
  ExpectSame(gray_img, MustDecode(testing::EncodePng(37, 23, 0, 8, gray), 8, 1));
  ExpectSame(gray_img, MustDecode(testing::EncodePng(37, 23, 4, 8, gray_alpha), 8, 1));
  // RGB to gray uses the same BT.601 weights as ConvertChannels.
  ExpectSame(gray_img, MustDecode(testing::EncodePng(37, 23, 2, 8, photo.pixels), 8, 1));
}

// A PNG whose (last) IDAT chunk has a bad CRC is an error, not an image: libspng checks it
// only when the chunks after the image data are read.
TEST(PngDecodeTest, BadIdatCrcIsAnError) {
  auto png = testing::EncodePng(40, 30, 2, 8, testing::Photo(40, 30).pixels);
  const uint8_t idat[] = {'I', 'D', 'A', 'T'};
  auto at = std::search(png.begin(), png.end(), std::begin(idat), std::end(idat));
  ASSERT_NE(at, png.end());
  const size_t len = (size_t(at[-4]) << 24) | (size_t(at[-3]) << 16) | (size_t(at[-2]) << 8) | at[-1];
  auto bad = png;
  bad[size_t(at - png.begin()) + 4 + len] ^= 0xff;  // first CRC byte
  auto decoder = ImageDecoder::Create();
  auto header = decoder->ReadHeader(bad, 1 << 30);
  ASSERT_TRUE(header.ok());
  DecodedImage out;
  Status s = decoder->Decode(bad, *header, 8, 3, &out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("png decode failed: invalid chunk checksum"), std::string::npos)
      << s.message();
  header = decoder->ReadHeader(png, 1 << 30);
  EXPECT_TRUE(decoder->Decode(png, *header, 8, 3, &out).ok());
}

TEST(DecodeTest, DetectsFormatFromMagicBytes) {
  EXPECT_EQ(DetectFormat(std::vector<uint8_t>{0xff, 0xd8, 0xff, 0xe0}), ImageFormat::kJpeg);
  EXPECT_EQ(DetectFormat(std::vector<uint8_t>{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}),
            ImageFormat::kPng);
  EXPECT_EQ(DetectFormat(std::vector<uint8_t>{'G', 'I', 'F', '8'}), ImageFormat::kUnknown);
  EXPECT_EQ(DetectFormat(std::vector<uint8_t>{}), ImageFormat::kUnknown);
}

TEST(DecodeTest, ChoosesSmallestDctScaleThatCoversTheTarget) {
  EXPECT_EQ(ChooseScaleNum(512, 512, 64, 64), 1);   // 1/8: 64 >= 64
  EXPECT_EQ(ChooseScaleNum(512, 512, 65, 65), 2);   // 1/4: 128
  EXPECT_EQ(ChooseScaleNum(512, 512, 128, 128), 2);
  EXPECT_EQ(ChooseScaleNum(512, 512, 129, 129), 4);  // 1/2: 256
  EXPECT_EQ(ChooseScaleNum(512, 512, 257, 257), 8);  // full size
  EXPECT_EQ(ChooseScaleNum(500, 375, 224, 224), 8);  // 1/2 would give 187 rows
  EXPECT_EQ(ChooseScaleNum(500, 375, 112, 112), 4);  // 1/4 gives 125 x 93: too few rows
  EXPECT_EQ(ChooseScaleNum(100, 100, 224, 224), 8);  // enlarging: never scale down
  EXPECT_EQ(ChooseScaleNum(300, 900, 112, 224), 4);  // 1/4 gives 75 columns: both count
  EXPECT_EQ(ChooseScaleNum(900, 300, 224, 112), 4);
}

// A JPEG whose header holds a marker libjpeg does not know ("Unsupported marker type 0x8a").
std::vector<uint8_t> UnknownMarkerJpeg(const std::vector<uint8_t>& good) {
  std::vector<uint8_t> bad(good.begin(), good.begin() + 2);  // SOI
  bad.insert(bad.end(), {0xff, 0x8a, 0x00, 0x04, 0x00, 0x00});
  bad.insert(bad.end(), good.begin() + 2, good.end());
  return bad;
}

// Any failed header or decode leaves the decoder as new: the next (good) image decodes
// exactly as with a fresh decoder. Before the handle was recreated, the unknown marker of
// one sample was reported again for every later sample of the same worker.
TEST(DecodeTest, AFailedImageNeverAffectsTheNextOnTheSameDecoder) {
  auto good = testing::EncodeJpeg(testing::Photo(120, 90), 90, TJSAMP_420);
  auto png = testing::EncodePng(40, 30, 2, 8, testing::Photo(40, 30).pixels);
  auto truncated = std::vector<uint8_t>(good.begin(), good.begin() + good.size() / 2);
  auto garbage_scan = good;
  for (size_t i = good.size() / 2; i + 2 < good.size(); i += 7) garbage_scan[i] = 0xff;
  auto bad_png = std::vector<uint8_t>(png.begin(), png.end() - 20);
  const std::vector<std::pair<const char*, std::vector<uint8_t>>> bad = {
      {"unknown marker", UnknownMarkerJpeg(good)},
      {"truncated", truncated},
      {"corrupt scan", garbage_scan},
      {"truncated png", bad_png},
      {"empty", {}},
  };
  const DecodedImage want = MustDecode(good, 4, 3);
  const DecodedImage want_png = MustDecode(png, 8, 3);
  auto decoder = ImageDecoder::Create();
  ASSERT_TRUE(decoder.ok());
  for (int round = 0; round < 3; ++round) {
    for (const auto& [name, bytes] : bad) {
      auto header = decoder->ReadHeader(bytes, 1 << 30);
      DecodedImage out;
      Status s = header.ok() ? decoder->Decode(bytes, *header, 4, 3, &out) : header.status();
      EXPECT_FALSE(s.ok()) << name;
      for (const auto* next : {&good, &png}) {
        auto h = decoder->ReadHeader(*next, 1 << 30);
        ASSERT_TRUE(h.ok()) << "after " << name << ": " << h.status().ToString();
        ASSERT_TRUE(decoder->Decode(*next, *h, 4, 3, &out).ok()) << "after " << name;
        EXPECT_EQ(out.pixels, (next == &good ? want : want_png).pixels) << "after " << name;
      }
    }
  }
  auto header = decoder->ReadHeader(UnknownMarkerJpeg(good), 1 << 30);
  ASSERT_FALSE(header.ok());
  EXPECT_NE(header.status().message().find("Unsupported marker type 0x8a"), std::string::npos)
      << header.status().message();
}

TEST(DecodeTest, HeaderRefusesImagesOverThePixelLimitBeforeDecoding) {
  auto jpeg = testing::EncodeJpeg(testing::Photo(64, 64), 90, TJSAMP_420);
  auto decoder = ImageDecoder::Create();
  auto header = decoder->ReadHeader(jpeg, 64 * 64 - 1);
  ASSERT_FALSE(header.ok());
  EXPECT_EQ(header.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(header.status().message().find("64x64 = 4096 pixels, over the limit max_pixels=4095"),
            std::string::npos)
      << header.status().message();
  EXPECT_TRUE(decoder->ReadHeader(jpeg, 64 * 64).ok());
  // A PNG header claiming 100000 x 100000 is refused from its 33 header bytes alone.
  auto png = testing::EncodePng(2, 2, 0, 8, {1, 2, 3, 4});
  png[16] = 0, png[17] = 1, png[18] = 0x86, png[19] = 0xa0;  // width 100000
  png[20] = 0, png[21] = 1, png[22] = 0x86, png[23] = 0xa0;  // height 100000
  auto big = decoder->ReadHeader(std::span<const uint8_t>(png.data(), 33), int64_t(128) << 20);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("100000x100000"), std::string::npos);
}

}  // namespace
}  // namespace batchcast::pipeline
