// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// libFuzzer target: the image header and decode path the pipeline runs on every encoded
// sample (pipeline::ImageDecoder: format detection, header with the pixel limit, JPEG
// decode at every DCT scale, PNG decode, 1 and 3 channels) and the header probe of
// `inspect` and the converters (data::ProbeImage). One decoder is reused across inputs, as
// a pipeline worker reuses it across samples, so state left behind by a bad image shows up.
#include <cstddef>
#include <cstdint>
#include <span>

#include "data/image_probe.h"
#include "fuzz_util.h"
#include "pipeline/decode.h"

namespace {

// Small enough that a decode stays fast; large enough for every seed.
constexpr int64_t kMaxPixels = 1 << 20;

batchcast::pipeline::ImageDecoder& Decoder() {
  static auto decoder = batchcast::pipeline::ImageDecoder::Create();
  batchcast::fuzz::Check(decoder.ok(), "ImageDecoder::Create");
  return *decoder;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace batchcast;
  std::span<const uint8_t> bytes(data, size);

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
  return 0;
}
