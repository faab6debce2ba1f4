// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Crop decoding (pipeline/crop_decode.h) against the full decode it replaces: every pixel
// inside the box is the same, for every kind of JPEG the pipeline meets (baseline 4:2:0,
// 4:2:2, 4:4:4, gray, progressive, CMYK), odd sizes, every DCT scale, RGB and gray output,
// boxes at the image's edges; and the pipeline's output bytes with crop_decode on and off.
#include "pipeline/crop_decode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/random.h"
#include "pipeline/pipeline.h"
#include "tests/unit/pipeline/memory_reader.h"
#include "tests/unit/pipeline/test_images.h"

namespace batchcast::pipeline {
namespace {

struct Kind {
  const char* name;
  int channels;  // of the encoded picture: 1 gray, 3 RGB, 4 CMYK
  int subsamp;
  bool progressive;
};

const Kind kKinds[] = {
    {"baseline420", 3, TJSAMP_420, false}, {"baseline422", 3, TJSAMP_422, false},
    {"baseline444", 3, TJSAMP_444, false}, {"gray", 1, TJSAMP_GRAY, false},
    {"progressive420", 3, TJSAMP_420, true}, {"progressive444", 3, TJSAMP_444, true},
    {"cmyk", 4, TJSAMP_420, false},
};

std::vector<uint8_t> Encode(const Kind& k, int w, int h) {
  testing::Image photo = testing::Photo(w, h);
  testing::Image img{w, h, k.channels, std::vector<uint8_t>(size_t(w) * h * k.channels)};
  for (size_t i = 0; i < size_t(w) * h; ++i)
    for (int c = 0; c < k.channels; ++c)  // gray: red; CMYK: K from the other three
      img.pixels[i * k.channels + c] = c < 3 ? photo.pixels[i * 3 + c]
                                             : static_cast<uint8_t>(255 - photo.pixels[i * 3] / 3);
  return testing::EncodeJpeg(img, 87, k.subsamp, k.progressive);
}

// Boxes of the image as decoded at `scale`: random positions and sizes, the four corners
// and edges at iMCU boundaries.
std::vector<CropBox> Boxes(int w, int h, uint64_t seed) {
  std::vector<CropBox> boxes = {{0, 0, std::max(1, w / 3), std::max(1, h / 3)},
                                {w - std::max(1, w / 4), h - std::max(1, h / 5), w / 4, h / 5},
                                {0, h / 2, w, 1},
                                {w - 1, 0, 1, h}};
  // Edges on and next to iMCU boundaries (16 pixels at most): where a region without
  // context would be upsampled as an image edge.
  for (int edge : {16, 17, 33}) {
    if (edge + 2 > w || edge + 2 > h) continue;
    boxes.push_back({edge, edge, w - edge - 1, h - edge - 1});  // starts there
    boxes.push_back({1, 1, edge - 1, edge - 1});                // ends there
  }
  for (int i = 0; i < 6; ++i) {
    const uint64_t r = Mix64(HashCombine(seed, uint64_t(i)));
    const int bw = 1 + int(r % uint64_t(w)), bh = 1 + int((r >> 20) % uint64_t(h));
    boxes.push_back({int((r >> 40) % uint64_t(w - bw + 1)), int((r >> 50) % uint64_t(h - bh + 1)),
                     bw, bh});
  }
  for (auto& b : boxes) {
    b.width = std::max(1, std::min(b.width, w - b.x));
    b.height = std::max(1, std::min(b.height, h - b.y));
  }
  return boxes;
}

TEST(CropDecodeTest, BoxPixelsEqualTheFullDecodeForEveryKindSizeAndScale) {
  auto full_decoder = ImageDecoder::Create();
  auto crop_decoder = JpegCropDecoder::Create();
  ASSERT_TRUE(full_decoder.ok() && crop_decoder.ok());
  const int sizes[][2] = {{173, 131}, {64, 48}, {257, 95}, {33, 200}};
  int compared = 0;
  for (const Kind& kind : kKinds) {
    for (const auto& size : sizes) {
      const auto jpeg = Encode(kind, size[0], size[1]);
      ASSERT_FALSE(jpeg.empty()) << kind.name;
      auto header = full_decoder->ReadHeader(jpeg, 1 << 30);
      ASSERT_TRUE(header.ok()) << kind.name;
      for (int scale : kScaleNums) {
        for (int channels : {3, 1}) {
          DecodedImage full, part;
          ASSERT_TRUE(full_decoder->Decode(jpeg, *header, scale, channels, &full).ok());
          for (const CropBox& box : Boxes(full.width, full.height, uint64_t(scale * 7 + size[0]))) {
            const std::string what = fmt::format("{} {}x{} scale {}/8, {} channels, box {},{} {}x{}",
                                                 kind.name, size[0], size[1], scale, channels,
                                                 box.x, box.y, box.width, box.height);
            CropBox in;
            Status st = crop_decoder->Decode(jpeg, *header, scale, channels, box, &part, &in);
            ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
            ASSERT_EQ(part.channels, channels) << what;
            ASSERT_TRUE(in.x >= 0 && in.y >= 0 && in.x + in.width <= part.width &&
                        in.y + in.height <= part.height) << what;
            for (int y = 0; y < box.height; ++y) {
              const uint8_t* a = full.data() + (size_t(box.y + y) * full.width + box.x) * channels;
              const uint8_t* b = part.data() + (size_t(in.y + y) * part.width + in.x) * channels;
              ASSERT_EQ(std::vector<uint8_t>(a, a + size_t(box.width) * channels),
                        std::vector<uint8_t>(b, b + size_t(box.width) * channels))
                  << what << ", row " << y;
            }
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_GE(compared, 7 * 4 * 4 * 2 * 10);
}

TEST(CropDecodeTest, DecodesLessThanTheWholeImage) {
  // A small box in the middle of a large baseline image: only its rows and the iMCU
  // columns that cover it and one pixel of context each side are produced, not the full
  // 512 x 384.
  const auto jpeg = Encode(kKinds[0], 512, 384);
  auto full_decoder = ImageDecoder::Create();
  auto crop_decoder = JpegCropDecoder::Create();
  auto header = full_decoder->ReadHeader(jpeg, 1 << 30);
  DecodedImage part;
  CropBox in;
  ASSERT_TRUE(crop_decoder->Decode(jpeg, *header, 8, 3, {200, 150, 64, 48}, &part, &in).ok());
  EXPECT_LE(part.width, 64 + 16 + 1);
  EXPECT_EQ(part.height, 48);
}

TEST(CropDecodeTest, CorruptDataInsideTheBoxIsAnErrorAndTheDecoderStaysUsable) {
  // Each failure leaves the decoder as new: the next good image decodes exactly as with a
  // fresh decoder (libjpeg state such as an unread marker must not survive an error).
  const auto good = Encode(kKinds[0], 173, 131);
  auto full_decoder = ImageDecoder::Create();
  auto crop_decoder = JpegCropDecoder::Create();
  auto header = full_decoder->ReadHeader(good, 1 << 30);
  ASSERT_TRUE(header.ok());
  std::vector<uint8_t> unknown_marker(good.begin(), good.begin() + 2);  // SOI, then 0xff8a
  unknown_marker.insert(unknown_marker.end(), {0xff, 0x8a, 0x00, 0x04, 0x00, 0x00});
  unknown_marker.insert(unknown_marker.end(), good.begin() + 2, good.end());
  auto garbage_scan = good;
  for (size_t i = good.size() / 2; i + 2 < good.size(); i += 7) garbage_scan[i] = 0xff;
  const std::vector<std::pair<const char*, std::vector<uint8_t>>> bad = {
      {"truncated", std::vector<uint8_t>(good.begin(), good.begin() + good.size() / 2)},
      {"corrupt scan", garbage_scan},
      {"unknown marker", unknown_marker},
  };
  const CropBox box{0, 100, 173, 31};  // the bottom rows: past the damage of both
  DecodedImage want, got;
  CropBox want_in, got_in;
  ASSERT_TRUE(crop_decoder->Decode(good, *header, 8, 3, box, &want, &want_in).ok());
  for (int round = 0; round < 2; ++round) {
    for (const auto& [name, bytes] : bad) {
      Status st = crop_decoder->Decode(bytes, *header, 8, 3, box, &got, &got_in);
      EXPECT_EQ(st.code(), StatusCode::kCorruptData) << name << ": " << st.ToString();
      EXPECT_NE(st.message().find("jpeg decode failed"), std::string::npos) << st.message();
      ASSERT_TRUE(crop_decoder->Decode(good, *header, 8, 3, box, &got, &got_in).ok()) << name;
      const size_t n = size_t(want.width) * want.height * 3;
      ASSERT_EQ(got.width * got.height, want.width * want.height) << name;
      EXPECT_TRUE(std::equal(got.data(), got.data() + n, want.data())) << "after " << name;
      EXPECT_EQ(got_in, want_in) << "after " << name;
    }
  }
}

TEST(CropDecodeTest, PipelineOutputIsTheSameWithCropDecodeOnAndOff) {
  std::vector<std::vector<uint8_t>> images;
  for (int i = 0; i < 14; ++i) {
    const Kind& k = kKinds[i % 7];
    images.push_back(Encode(k, 150 + 37 * (i % 4), 97 + 51 * (i % 3)));
  }
  for (const char* crop : {"random", "center"}) {
    std::vector<std::vector<uint8_t>> outputs;
    for (bool crop_decode : {false, true}) {
      Options o;
      o.threads = 2;
      o.image_size = 40;
      o.crop = crop;
      o.flip = true;
      o.crop_decode = crop_decode;
      auto p = Pipeline::Create(o, testing::MemoryReader::Encoded(images));
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      std::vector<int64_t> samples(images.size());
      for (size_t i = 0; i < samples.size(); ++i) samples[i] = int64_t(i);
      std::vector<uint8_t> out((*p)->OutputLayout().bytes() * samples.size());
      std::vector<int64_t> labels(samples.size());
      for (uint64_t epoch = 0; epoch < 3; ++epoch) {
        BatchResult r;
        ASSERT_TRUE((*p)->RunBatch({epoch, samples, 0, out.data(), labels.data()}, &r).ok());
        outputs.push_back(out);
      }
    }
    for (size_t e = 0; e < 3; ++e) EXPECT_EQ(outputs[e], outputs[3 + e]) << crop << " epoch " << e;
  }
}

}  // namespace
}  // namespace batchcast::pipeline
