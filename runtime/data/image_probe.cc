// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "data/image_probe.h"

#include <algorithm>
#include <cstring>

#include "core/errors.h"
#include "data/image_codec_handles.h"

namespace batchcast::data {
namespace {

constexpr uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr uint8_t kPngIendTail[8] = {'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
// An end-of-image marker may be followed by padding some cameras add; look this far back.
constexpr size_t kJpegTrailerWindow = 4096;

bool HasJpegEndMarker(std::span<const uint8_t> b) {
  // In entropy-coded data 0xFF is always followed by 0x00 or a restart marker, so FF D9
  // near the end can only be the end-of-image marker.
  size_t start = b.size() > kJpegTrailerWindow ? b.size() - kJpegTrailerWindow : 0;
  for (size_t i = b.size() - 1; i > start; --i)
    if (b[i - 1] == 0xff && b[i] == 0xd9) return true;
  return false;
}

Result<ImageHeader> ProbeJpeg(std::span<const uint8_t> b) {
  // A new decompressor for every file (about 0.15 us): libjpeg-turbo 2.1's header reader
  // leaves a bad marker unread after an error and reports it again for the next image, so
  // a per-thread handle made every later good file of that thread "bad" after one damaged
  // file (dropped by `convert --skip-bad`; ImageProbeTest.ABadHeaderDoesNotSpoil...).
  TurboJpegHandle handle(tjInitDecompress());
  tjhandle tj = handle.get();
  if (tj == nullptr) return InternalError("jpeg: cannot create a TurboJPEG decompressor");
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj, b.data(), b.size(), &w, &h, &subsamp, &colorspace) != 0)
    return CorruptDataError("jpeg: bad header: {}", tjGetErrorStr2(tj));
  if (w <= 0 || h <= 0) return CorruptDataError("jpeg: bad size {}x{}", w, h);
  if (!HasJpegEndMarker(b)) return CorruptDataError("jpeg: truncated (no end-of-image marker)");
  ImageHeader hdr{ImageEncoding::kJpeg, w, h, 3};
  if (colorspace == TJCS_GRAY) hdr.channels = 1;
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) hdr.channels = 4;
  return hdr;
}

int PngChannels(const spng_ihdr& ihdr) {
  switch (ihdr.color_type) {
    case SPNG_COLOR_TYPE_GRAYSCALE: return 1;
    case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA: return 2;
    case SPNG_COLOR_TYPE_TRUECOLOR_ALPHA: return 4;
    default: return 3;  // truecolour and indexed
  }
}

Result<ImageHeader> ProbePng(std::span<const uint8_t> b) {
  SpngContext ctx(spng_ctx_new(0));
  if (!ctx) return InternalError("png: cannot create a decoder context");
  spng_ihdr ihdr{};
  int rc = spng_set_png_buffer(ctx.get(), b.data(), b.size());
  if (rc == 0) rc = spng_get_ihdr(ctx.get(), &ihdr);
  if (rc != 0) return CorruptDataError("png: bad header: {}", spng_strerror(rc));
  if (b.size() < 8 + 25 + 12 ||
      std::memcmp(b.data() + b.size() - 8, kPngIendTail, sizeof(kPngIendTail)) != 0)
    return CorruptDataError("png: truncated (no IEND chunk at the end)");
  return ImageHeader{ImageEncoding::kPng, static_cast<int>(ihdr.width),
                     static_cast<int>(ihdr.height), PngChannels(ihdr)};
}

}  // namespace

const char* ImageEncodingName(ImageEncoding encoding) {
  switch (encoding) {
    case ImageEncoding::kJpeg: return "jpeg";
    case ImageEncoding::kPng: return "png";
    default: return "unknown";
  }
}

ImageEncoding SniffEncoding(std::span<const uint8_t> b) {
  if (b.size() >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return ImageEncoding::kJpeg;
  if (b.size() >= 8 && std::memcmp(b.data(), kPngMagic, 8) == 0) return ImageEncoding::kPng;
  return ImageEncoding::kUnknown;
}

Result<ImageHeader> ProbeImage(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return CorruptDataError("empty image (0 bytes)");
  switch (SniffEncoding(bytes)) {
    case ImageEncoding::kJpeg: return ProbeJpeg(bytes);
    case ImageEncoding::kPng: return ProbePng(bytes);
    default: break;
  }
  std::string head;
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 4); ++i)
    head += fmt::format("{}{:02x}", i ? " " : "", bytes[i]);
  return CorruptDataError("not a JPEG or PNG image (starts with {})", head);
}

}  // namespace batchcast::data
