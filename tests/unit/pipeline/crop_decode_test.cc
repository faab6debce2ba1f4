// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Crop decoding (pipeline/crop_decode.h) against the full decode it replaces: every pixel
// inside the box is the same, for every kind of JPEG the pipeline meets (baseline 4:2:0,
// 4:2:2, 4:4:4, gray, progressive, CMYK), odd sizes, every DCT scale, RGB and gray output,
// boxes at the image's edges; and the pipeline's output bytes with crop_decode on and off.
// The same for files with a restart marker at every MCU row (jpeg_rewrite.h), which the
// crop decoder enters at the restart interval above the box: box rows on and next to every
// iMCU row, damage in the intervals it skips, damaged restart markers.
#include "pipeline/crop_decode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/random.h"
#include "core/sanitizers.h"
#include "pipeline/pipeline.h"
#include "pipeline/views.h"
#include "tests/unit/pipeline/memory_reader.h"
#include "tests/unit/pipeline/jpeg_rewrite.h"
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

std::vector<uint8_t> Encode(const Kind& k, int w, int h);

// The kind's file re-coded with a restart marker at every MCU row (not for progressive kinds).
std::vector<uint8_t> EncodeWithRestarts(const Kind& k, int w, int h) {
  std::string why;
  auto bytes = testing::AddRestartMarkers(Encode(k, w, h), &why);
  EXPECT_FALSE(bytes.empty()) << k.name << " " << w << "x" << h << ": " << why;
  return bytes;
}

// Every pixel of `box` (of the image decoded at `scale`) as the crop decoder gives it, against
// the full decode `full`; "" when they are equal.
std::string CompareBox(JpegCropDecoder& crop, const std::vector<uint8_t>& jpeg,
                       const ImageHeader& header, int scale, int channels, const DecodedImage& full,
                       const CropBox& box) {
  DecodedImage part;
  CropBox in;
  Status st = crop.Decode(jpeg, header, scale, channels, box, &part, &in);
  if (!st.ok()) return st.ToString();
  if (part.channels != channels) return "channels";
  if (in.x < 0 || in.y < 0 || in.x + in.width > part.width || in.y + in.height > part.height)
    return fmt::format("box {},{} {}x{} outside the decoded {}x{}", in.x, in.y, in.width,
                       in.height, part.width, part.height);
  for (int y = 0; y < box.height; ++y) {
    const uint8_t* a = full.data() + (size_t(box.y + y) * full.width + box.x) * channels;
    const uint8_t* b = part.data() + (size_t(in.y + y) * part.width + in.x) * channels;
    if (!std::equal(a, a + size_t(box.width) * channels, b)) return fmt::format("row {} differs", y);
  }
  return "";
}

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
                                {w - 1, 0, 1, h},
                                // Narrow boxes at the left edge and on iMCU columns: a region
                                // of under 3 chroma samples is upsampled by another filter.
                                {0, 0, 1, 2},
                                {0, 1, 2, h - 1},
                                {std::min(w - 1, 16), 0, 1, h},
                                {std::min(w - 1, 31), 2, 1, 3}};
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
  EXPECT_GE(compared, 7 * 4 * 4 * 2 * 14);
}

// Images under 8 pixels on a side: TurboJPEG 2 takes the scale from the output size, and two
// of its factors can give one size (a 2x4 image is 1x1 at 1/8 and at 1/4), so the full decoder
// decoded some of them at another scale than asked (fuzz_image found a 2x4 CMYK image whose 1/8
// pixel was 127 from the full decoder and 102 from the crop decoder). Every kind, sizes where
// TurboJPEG would take another factor at some scale (counted: the test must meet such cases)
// and sizes where it would not, every scale and channel count: the full decode has the scale's
// size and the crop decoder's pixels.
TEST(CropDecodeTest, TinyImagesDecodeAtTheScaleAskedForByBothDecoders) {
  auto full_decoder = ImageDecoder::Create();
  auto crop_decoder = JpegCropDecoder::Create();
  ASSERT_TRUE(full_decoder.ok() && crop_decoder.ok());
  const int sizes[][2] = {{1, 1}, {2, 4}, {4, 2}, {3, 3}, {5, 7}, {7, 6}, {1, 9}, {9, 9}};
  int factors_n = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&factors_n);  // largest first
  ASSERT_NE(factors, nullptr);
  int other_factor = 0, compared = 0;
  for (const auto& size : sizes) {
    const int w = size[0], h = size[1];
    for (int scale : kScaleNums) {
      for (int i = 0; i < factors_n; ++i) {  // what tjDecompress2 takes for this output size
        if (TJSCALED(w, factors[i]) <= ScaledDim(w, scale) &&
            TJSCALED(h, factors[i]) <= ScaledDim(h, scale)) {
          other_factor += factors[i].num * kScaleDenom != scale * factors[i].denom;
          break;
        }
      }
    }
    for (const Kind& kind : kKinds) {
      const auto jpeg = Encode(kind, w, h);
      ASSERT_FALSE(jpeg.empty()) << kind.name << " " << w << "x" << h;
      auto header = full_decoder->ReadHeader(jpeg, 1 << 30);
      ASSERT_TRUE(header.ok()) << kind.name << " " << w << "x" << h;
      for (int scale : kScaleNums) {
        for (int channels : {3, 1}) {
          const std::string what = fmt::format("{} {}x{} scale {}/8, {} channels", kind.name, w,
                                               h, scale, channels);
          DecodedImage full;
          Status st = full_decoder->Decode(jpeg, *header, scale, channels, &full);
          ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
          ASSERT_EQ(full.width, ScaledDim(w, scale)) << what;
          ASSERT_EQ(full.height, ScaledDim(h, scale)) << what;
          ASSERT_EQ(full.pixels.size(), size_t(full.width) * full.height * channels) << what;
          EXPECT_EQ(CompareBox(*crop_decoder, jpeg, *header, scale, channels, full,
                               CropBox{0, 0, full.width, full.height}),
                    "")
              << what;
          ++compared;
        }
      }
    }
  }
  EXPECT_GE(other_factor, 4);  // 2x4 and 4x2 at 1/8, 3x3 at 1/8 and 2/8, ...
  EXPECT_EQ(compared, 8 * 7 * 4 * 2);
}

// Views (docs/pipeline.md, "Views"): groups whose boxes need one DCT scale share a crop decode
// of the union of their boxes. Inside each box that decode must give the pixels of the box's
// own crop decode (what a one-group pipeline decodes), whatever the union adds around it: box
// pairs and triples of every kind (restart-marker files too, which are entered at another
// interval for the union than for a lower box), odd sizes, every scale, with edges on and next
// to iMCU boundaries.
TEST(CropDecodeTest, AUnionOfBoxesGivesEachBoxTheBytesOfItsOwnCropDecode) {
  auto decoder = ImageDecoder::Create();
  auto own = JpegCropDecoder::Create(), shared = JpegCropDecoder::Create();
  ASSERT_TRUE(decoder.ok() && own.ok() && shared.ok());
  int compared = 0;
  // Under a sanitizer one odd size of the three (the same paths; 21 s of TSan CPU for all).
  const std::vector<std::pair<int, int>> sizes =
      BC_SANITIZED
          ? std::vector<std::pair<int, int>>{{257, 95}}
          : std::vector<std::pair<int, int>>{{173, 131}, {257, 95}, {500, 375}};
  for (const Kind& kind : kKinds) {
    for (const auto& size : sizes) {
      for (bool restarts : {false, true}) {
        if (restarts && kind.progressive) continue;
        const auto jpeg = restarts ? EncodeWithRestarts(kind, size.first, size.second)
                                   : Encode(kind, size.first, size.second);
        auto header = decoder->ReadHeader(jpeg, 1 << 30);
        ASSERT_TRUE(header.ok()) << kind.name;
        for (int scale : kScaleNums) {
          const int w = ScaledDim(size.first, scale), h = ScaledDim(size.second, scale);
          const std::vector<CropBox> boxes = Boxes(w, h, uint64_t(scale * 131 + size.first));
          for (size_t i = 0; i < boxes.size(); ++i) {
            // Box i with the next one or two (the union then reaches above, below and beside).
            const CropBox& a = boxes[i];
            const CropBox& b = boxes[(i + 1) % boxes.size()];
            const CropBox& c = boxes[(i + 5) % boxes.size()];
            for (const CropBox& region : {UnionBox(a, b), UnionBox(UnionBox(a, b), c)}) {
              DecodedImage whole;
              CropBox region_in;
              ASSERT_TRUE(
                  shared->Decode(jpeg, *header, scale, 3, region, &whole, &region_in).ok());
              for (const CropBox& box : {a, b}) {
                const std::string what = fmt::format(
                    "{}{} {}x{} scale {}/8, box {},{} {}x{} in region {},{} {}x{}", kind.name,
                    restarts ? " with restart markers" : "", size.first, size.second, scale,
                    box.x, box.y, box.width, box.height, region.x, region.y, region.width,
                    region.height);
                DecodedImage part;
                CropBox in;
                ASSERT_TRUE(own->Decode(jpeg, *header, scale, 3, box, &part, &in).ok()) << what;
                // The box's place in the region's pixels.
                const int rx = region_in.x + box.x - region.x, ry = region_in.y + box.y - region.y;
                for (int y = 0; y < box.height; ++y) {
                  const uint8_t* p = part.data() + (size_t(in.y + y) * part.width + in.x) * 3;
                  const uint8_t* q = whole.data() + (size_t(ry + y) * whole.width + rx) * 3;
                  ASSERT_TRUE(std::equal(p, p + size_t(box.width) * 3, q)) << what << ", row " << y;
                }
                ++compared;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GE(compared, 7 * int(sizes.size()) * 4 * 14 * 2 * 2);
}

TEST(CropDecodeTest, NarrowBoxesOfNoisyChromaEqualTheFullDecode) {
  // Every box 1 to 3 columns wide, at every column, of small images whose colour changes
  // from pixel to pixel (the smooth test photo hides upsampling differences), for 4:2:0,
  // 4:2:2, 4:1:1 and 4:4:0 (vertical only) subsampling: libjpeg-turbo
  // upsamples a component of 2 or fewer samples per row without its smoothing filter, so a
  // decoded region that narrow differs from the full decode (fuzz_image found it).
  auto full_decoder = ImageDecoder::Create();
  auto crop = JpegCropDecoder::Create();
  ASSERT_TRUE(full_decoder.ok() && crop.ok());
  int compared = 0;
  for (int subsamp : {TJSAMP_420, TJSAMP_422, TJSAMP_411, TJSAMP_440}) {
    for (const auto& size : {std::pair{16, 12}, {37, 21}}) {
      const int w = size.first, h = size.second;
      testing::Image img{w, h, 3, std::vector<uint8_t>(size_t(w) * h * 3)};
      for (size_t i = 0; i < img.pixels.size(); ++i)
        img.pixels[i] = static_cast<uint8_t>(Mix64(HashCombine(uint64_t(subsamp), i)));
      const auto jpeg = testing::EncodeJpeg(img, 95, subsamp);
      auto header = full_decoder->ReadHeader(jpeg, 1 << 30);
      ASSERT_TRUE(header.ok());
      for (int scale : kScaleNums) {
        DecodedImage full;
        ASSERT_TRUE(full_decoder->Decode(jpeg, *header, scale, 3, &full).ok());
        for (int x = 0; x < full.width; ++x) {
          for (int bw = 1; bw <= 3 && x + bw <= full.width; ++bw) {
            const CropBox box{x, 0, bw, std::min(full.height, 3)};
            ASSERT_EQ(CompareBox(*crop, jpeg, *header, scale, 3, full, box), "")
                << "subsampling " << subsamp << ", " << w << "x" << h << " scale " << scale
                << ", box " << box.x << "," << box.y << " " << box.width << "x" << box.height;
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_GE(compared, 300);
}

TEST(CropDecodeTest, RestartMarkersKeepEveryPixelAtEveryScale) {
  // The files the restart tests use are the plain files' pixels, so that a difference in
  // the crop decoder's box is the crop decoder's.
  auto decoder = ImageDecoder::Create();
  ASSERT_TRUE(decoder.ok());
  for (const Kind& kind : kKinds) {
    if (kind.progressive) continue;
    for (const auto& size : {std::pair{173, 131}, {33, 200}, {8, 8}}) {
      const auto plain = Encode(kind, size.first, size.second);
      const auto marked = EncodeWithRestarts(kind, size.first, size.second);
      auto header = decoder->ReadHeader(marked, 1 << 30);
      ASSERT_TRUE(header.ok()) << kind.name;
      for (int scale : kScaleNums) {
        for (int channels : {3, 1}) {
          DecodedImage a, b;
          ASSERT_TRUE(decoder->Decode(plain, *header, scale, channels, &a).ok());
          ASSERT_TRUE(decoder->Decode(marked, *header, scale, channels, &b).ok());
          ASSERT_EQ(a.width * a.height, b.width * b.height);
          EXPECT_TRUE(std::equal(a.data(), a.data() + size_t(a.width) * a.height * channels, b.data()))
              << kind.name << " " << size.first << "x" << size.second << " scale " << scale;
        }
      }
    }
  }
}

TEST(CropDecodeTest, RestartMarkedFilesGiveTheFullDecodesBoxOnEveryRowBoundary) {
  // Tall images, so that boxes start in every restart interval (the marker numbers wrap
  // at 8, so the renumbering is exercised with every offset), a box starting on, just
  // before and just after every iMCU row boundary, at every scale, RGB and gray output.
  auto full_decoder = ImageDecoder::Create();
  auto crop = JpegCropDecoder::Create();
  ASSERT_TRUE(full_decoder.ok() && crop.ok());
  int compared = 0;
  for (const Kind& kind : kKinds) {
    if (kind.progressive) continue;
    for (const auto& size : {std::pair{150, 333}, {41, 290}}) {
      const auto jpeg = EncodeWithRestarts(kind, size.first, size.second);
      auto header = full_decoder->ReadHeader(jpeg, 1 << 30);
      ASSERT_TRUE(header.ok()) << kind.name;
      for (int scale : kScaleNums) {
        for (int channels : {3, 1}) {
          DecodedImage full;
          ASSERT_TRUE(full_decoder->Decode(jpeg, *header, scale, channels, &full).ok());
          // Every boundary of 8-row blocks at this scale (MCU rows are 8 or 16 rows high).
          for (int boundary = 0; boundary < full.height; boundary += scale) {
            for (int dy : {-1, 0, 1}) {
              const int top = boundary + dy;
              if (top < 0 || top >= full.height) continue;
              const int x = (top * 7) % std::max(1, full.width / 2);
              const CropBox box{x, top, std::max(1, full.width / 3),
                                std::max(1, std::min(full.height - top, 3 + top % 23))};
              const std::string diff = CompareBox(*crop, jpeg, *header, scale, channels, full, box);
              ASSERT_EQ(diff, "") << kind.name << " " << size.first << "x" << size.second
                                  << " scale " << scale << ", " << channels << " channels, box "
                                  << box.x << "," << box.y << " " << box.width << "x" << box.height;
              ++compared;
            }
          }
        }
      }
    }
  }
  EXPECT_GE(compared, 5000);
}

TEST(CropDecodeTest, RestartMarkedFilesAreEnteredAboveTheBox) {
  // Damage in the first rows' intervals: the box far below them decodes as from the good
  // file (those intervals are never read), while the same damage in a file without markers,
  // and the damaged file's full decode, fail. This is how the test sees that the decoder
  // started at the box's interval.
  const Kind& kind = kKinds[0];
  const auto good = EncodeWithRestarts(kind, 160, 320);  // 20 MCU rows of 16
  auto full_decoder = ImageDecoder::Create();
  auto crop = JpegCropDecoder::Create();
  auto header = full_decoder->ReadHeader(good, 1 << 30);
  ASSERT_TRUE(header.ok());
  const auto starts = testing::RestartIntervalStarts(good);
  ASSERT_EQ(starts.size(), 19u);
  auto damaged = good;
  // Intervals 1 and 2: data bytes changed to 0x12, never making or breaking a marker.
  for (size_t i = starts[0] + 4; i + 4 < starts[2]; i += 5)
    if (damaged[i] != 0xff && damaged[i - 1] != 0xff) damaged[i] = 0x12;
  DecodedImage full;
  ASSERT_TRUE(full_decoder->Decode(good, *header, 8, 3, &full).ok());
  DecodedImage damaged_full;
  EXPECT_FALSE(full_decoder->Decode(damaged, *header, 8, 3, &damaged_full).ok())
      << "the damage must be visible to a full decode for this test to mean anything";
  const CropBox below{10, 16 * 10 + 3, 100, 40};  // iMCU row 10: entered at interval 9
  EXPECT_EQ(CompareBox(*crop, damaged, *header, 8, 3, full, below), "");
  const CropBox inside{10, 16 * 2 + 3, 100, 40};  // iMCU row 2: reads the damage
  EXPECT_NE(CompareBox(*crop, damaged, *header, 8, 3, full, inside).find("jpeg decode failed"),
            std::string::npos);
  // A restart marker with the wrong number, above the box: found while looking for the
  // box's interval, so the decoder reads the file from the top and fails as a full decode.
  auto renumbered = good;
  renumbered[starts[4] - 1] = 0xd0 + ((renumbered[starts[4] - 1] - 0xd0 + 3) & 7);
  EXPECT_FALSE(full_decoder->Decode(renumbered, *header, 8, 3, &damaged_full).ok());
  EXPECT_NE(CompareBox(*crop, renumbered, *header, 8, 3, full, below).find("jpeg decode failed"),
            std::string::npos);
  // ... and one inside the box's rows: a warning, so an error, after the renumbering too.
  renumbered = good;
  renumbered[starts[10] - 1] = 0xd0 + ((renumbered[starts[10] - 1] - 0xd0 + 1) & 7);
  EXPECT_NE(CompareBox(*crop, renumbered, *header, 8, 3, full, below).find("jpeg decode failed"),
            std::string::npos);
  // Cut short inside the box's rows: an error, as in a full decode; cut short below them:
  // the box, from its interval on (the rest is never read).
  const std::vector<uint8_t> cut_in_box(good.begin(), good.begin() + starts[11]);
  EXPECT_NE(CompareBox(*crop, cut_in_box, *header, 8, 3, full, below).find("jpeg decode failed"),
            std::string::npos);
  const std::vector<uint8_t> cut_below(good.begin(), good.begin() + starts[15]);
  EXPECT_FALSE(full_decoder->Decode(cut_below, *header, 8, 3, &damaged_full).ok());
  EXPECT_EQ(CompareBox(*crop, cut_below, *header, 8, 3, full, below), "");
  // The decoder is as new after every error.
  EXPECT_EQ(CompareBox(*crop, good, *header, 8, 3, full, below), "");
  EXPECT_EQ(CompareBox(*crop, good, *header, 8, 3, full, inside), "");
}

TEST(CropDecodeTest, ImagesDoNotInheritTablesFromTheImagesBefore) {
  // libjpeg keeps tables in their slots from one image to the next on the same decoder. A
  // file without its DQT must fail in every worker, whatever that worker decoded before,
  // and a file without its DHT (a Motion-JPEG frame) must use the standard tables, not the
  // previous image's optimised ones (fuzz_image found both decoders doing so).
  const Kind& kind = kKinds[0];
  const auto previous = testing::AddRestartMarkers(Encode(kind, 96, 64));  // optimised DHT
  const auto plain = Encode(kind, 96, 64);  // the standard Huffman tables
  ASSERT_FALSE(previous.empty());
  const auto no_dqt = testing::WithoutSegments(plain, 0xdb);
  const auto no_dht = testing::WithoutSegments(plain, 0xc4);
  ASSERT_LT(no_dqt.size(), plain.size());
  ASSERT_LT(no_dht.size(), plain.size());
  for (bool after_previous : {false, true}) {
    auto full = ImageDecoder::Create();
    auto crop = JpegCropDecoder::Create();
    ASSERT_TRUE(full.ok() && crop.ok());
    auto header = full->ReadHeader(plain, 1 << 30);
    ASSERT_TRUE(header.ok());
    DecodedImage want, got;
    CropBox in;
    const CropBox box{8, 40, 60, 20};
    ASSERT_TRUE(full->Decode(plain, *header, 8, 3, &want).ok());
    const char* when = after_previous ? "after another image" : "first";
    // Each stripped file right after `previous`: its optimised DHT (and its DQT) in the slots.
    auto prime = [&] {
      if (!after_previous) return;
      ASSERT_TRUE(full->Decode(previous, *header, 8, 3, &got).ok());
      ASSERT_TRUE(crop->Decode(previous, *header, 8, 3, box, &got, &in).ok());
    };
    prime();
    Status st = full->Decode(no_dqt, *header, 8, 3, &got);
    EXPECT_EQ(st.code(), StatusCode::kCorruptData) << when << ": " << st.ToString();
    prime();
    st = crop->Decode(no_dqt, *header, 8, 3, box, &got, &in);
    EXPECT_EQ(st.code(), StatusCode::kCorruptData) << when << ": " << st.ToString();
    prime();
    st = full->Decode(no_dht, *header, 8, 3, &got);
    ASSERT_TRUE(st.ok()) << when << ": " << st.ToString();
    EXPECT_EQ(got.pixels, want.pixels) << when;
    prime();
    EXPECT_EQ(CompareBox(*crop, no_dht, *header, 8, 3, want, box), "") << when;
  }
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
  for (int i = 0; i < 21; ++i) {  // the last 7: with restart markers at every MCU row
    const Kind& k = kKinds[i % 7];
    images.push_back(i < 14 ? Encode(k, 150 + 37 * (i % 4), 97 + 51 * (i % 3))
                            : k.progressive ? Encode(k, 150, 240 + 51 * (i % 3))
                                            : EncodeWithRestarts(k, 150 + 37 * (i % 4), 240 + 51 * (i % 3)));
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
