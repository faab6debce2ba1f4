// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// libFuzzer target: the image header and decode path the pipeline runs on every encoded
// sample (pipeline::ImageDecoder: format detection, header with the pixel limit, JPEG
// decode at every DCT scale, PNG decode, 1 and 3 channels) and the header probe of
// `inspect` and the converters (data::ProbeImage). One decoder is reused across inputs, as
// a pipeline worker reuses it across samples, so state left behind by a bad image shows up.
// A JPEG is also crop-decoded (pipeline::JpegCropDecoder, which enters a file with restart
// markers at every MCU row at the box's interval) on a box the input's last bytes pick:
// where the full decode succeeds too, the crop decoder's box must hold its pixels. After
// every input a canary (a small JPEG without its Huffman tables, which libjpeg then takes
// from the standard ones) is probed and decoded by the same decoders and must come out as it
// did in a fresh process: state an input leaves behind (a table, an unread marker) shows up.
// The canary runs after every input (it costs about 4/5 of the executions per second), so
// that a crash artifact reproduces alone: that input, then the canary, in a fresh process.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <turbojpeg.h>

#include "data/image_probe.h"
#include "fuzz_util.h"
#include "pipeline/crop_decode.h"
#include "pipeline/decode.h"
#include "tests/unit/pipeline/jpeg_rewrite.h"

namespace {

// Small enough that a decode stays fast; large enough for every seed.
constexpr int64_t kMaxPixels = 1 << 20;

batchcast::pipeline::ImageDecoder& Decoder() {
  static auto decoder = batchcast::pipeline::ImageDecoder::Create();
  batchcast::fuzz::Check(decoder.ok(), "ImageDecoder::Create");
  return *decoder;
}

batchcast::pipeline::JpegCropDecoder& CropDecoder() {
  static auto decoder = batchcast::pipeline::JpegCropDecoder::Create();
  batchcast::fuzz::Check(decoder.ok(), "JpegCropDecoder::Create");
  return *decoder;
}

bool SameBox(const batchcast::pipeline::DecodedImage& full, const batchcast::pipeline::CropBox& box,
             const batchcast::pipeline::DecodedImage& part, const batchcast::pipeline::CropBox& in) {
  const int c = full.channels;
  for (int y = 0; y < box.height; ++y) {
    const uint8_t* a = full.data() + (size_t(box.y + y) * full.width + box.x) * c;
    const uint8_t* b = part.data() + (size_t(in.y + y) * part.width + in.x) * c;
    if (!std::equal(a, a + size_t(box.width) * c, b)) return false;
  }
  return true;
}

// The canary: a 48x32 4:2:0 JPEG with its DHT segments taken out.
std::vector<uint8_t> MakeCanary() {
  constexpr int w = 48, h = 32;
  std::vector<uint8_t> px(size_t(w) * h * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * 37) ^ (i >> 4));
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;  // NOLINT(runtime/int): TurboJPEG's type
  batchcast::fuzz::Check(tjCompress2(tj, px.data(), w, 0, h, TJPF_RGB, &buf, &size, TJSAMP_420, 80, 0) == 0,
                         "canary: encode");
  std::vector<uint8_t> jpeg(buf, buf + size);
  tjFree(buf);
  tjDestroy(tj);
  return batchcast::testing::WithoutSegments(jpeg, 0xc4);
}

// Probes and decodes the canary with the shared decoders; its pixels (whole, then the box
// 5,9 20x14 crop-decoded).
std::vector<uint8_t> DecodeCanary(const std::vector<uint8_t>& canary,
                                  batchcast::pipeline::ImageDecoder& full,
                                  batchcast::pipeline::JpegCropDecoder& crop) {
  using namespace batchcast;
  auto probed = data::ProbeImage(canary);
  fuzz::Check(probed.ok() && probed->width == 48 && probed->height == 32, "canary: probe");
  auto header = full.ReadHeader(canary, kMaxPixels);
  fuzz::Check(header.ok(), "canary: header");
  pipeline::DecodedImage image, part;
  fuzz::Check(full.Decode(canary, *header, 8, 3, &image).ok(), "canary: decode");
  pipeline::CropBox in;
  const pipeline::CropBox box{5, 9, 20, 14};
  fuzz::Check(crop.Decode(canary, *header, 8, 3, box, &part, &in).ok(), "canary: crop decode");
  std::vector<uint8_t> pixels(image.data(), image.data() + image.stride() * size_t(image.height));
  for (int y = 0; y < box.height; ++y) {
    const uint8_t* row = part.data() + (size_t(in.y + y) * part.width + in.x) * 3;
    pixels.insert(pixels.end(), row, row + size_t(box.width) * 3);
  }
  return pixels;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace batchcast;
  std::span<const uint8_t> bytes(data, size);
  static const std::vector<uint8_t> canary = MakeCanary();
  static const std::vector<uint8_t> canary_pixels = [] {
    auto full = pipeline::ImageDecoder::Create();
    auto crop = pipeline::JpegCropDecoder::Create();
    fuzz::Check(full.ok() && crop.ok(), "canary: decoders");
    return DecodeCanary(canary, *full, *crop);
  }();
  struct CanaryCheck {  // after the input, whichever way this function returns
    ~CanaryCheck() {
      fuzz::Check(DecodeCanary(canary, Decoder(), CropDecoder()) == canary_pixels,
                  "canary: decoded as in a fresh process after the input");
    }
  } canary_check;

  auto probed = data::ProbeImage(bytes);
  if (probed.ok()) {
    fuzz::Check(probed->width > 0 && probed->height > 0, "ProbeImage: positive dimensions");
    fuzz::Check(probed->channels >= 1 && probed->channels <= 4, "ProbeImage: 1..4 channels");
  }

  pipeline::DetectFormat(bytes);
  auto& decoder = Decoder();
  auto header = decoder.ReadHeader(bytes, kMaxPixels);
  if (!header.ok()) return 0;
  fuzz::Check(int64_t(header->width) * header->height <= kMaxPixels, "ReadHeader: pixel limit");
  // The last byte picks the scale and the channels, so one input covers one combination
  // and the fuzzer explores the others by mutating it.
  const uint8_t pick = size > 0 ? data[size - 1] : 0;
  const int scale = pipeline::kScaleNums[pick & 3];
  const int channels = (pick & 4) ? 1 : 3;
  pipeline::DecodedImage out;
  Status st = decoder.Decode(bytes, *header, scale, channels, &out);
  if (st.ok()) {
    fuzz::Check(out.channels == channels, "Decode: requested channels");
    fuzz::Check(out.pixels.size() >= out.stride() * size_t(out.height), "Decode: buffer size");
    fuzz::Check(out.width <= header->width && out.height <= header->height, "Decode: size");
  }
  if (header->format != pipeline::ImageFormat::kJpeg || size < 8) return 0;
  // The box: bytes size-2 .. size-5 pick its corner and size within the decoded image.
  const int dw = pipeline::ScaledDim(header->width, scale), dh = pipeline::ScaledDim(header->height, scale);
  pipeline::CropBox box;
  box.x = data[size - 2] % dw;
  box.y = data[size - 3] % dh;
  box.width = 1 + data[size - 4] % (dw - box.x);
  box.height = 1 + data[size - 5] % (dh - box.y);
  pipeline::DecodedImage part;
  pipeline::CropBox in;
  Status crop = CropDecoder().Decode(bytes, *header, scale, channels, box, &part, &in);
  if (crop.ok()) {
    fuzz::Check(in.x >= 0 && in.y >= 0 && in.x + in.width <= part.width &&
                in.y + in.height <= part.height, "crop decode: box inside the decoded region");
    fuzz::Check(part.pixels.size() >= part.stride() * size_t(part.height), "crop decode: buffer size");
    if (st.ok()) fuzz::Check(SameBox(out, box, part, in), "crop decode: the full decode's pixels");
  }
  return 0;
}
