// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Image header probing: width, height, channels and encoding from JPEG or PNG bytes,
// without decoding pixels. Also a cheap completeness check (a JPEG must end with its
// end-of-image marker, a PNG with its IEND chunk) that catches truncated files.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "batchcast/status.h"

namespace batchcast::data {

enum class ImageEncoding { kUnknown, kJpeg, kPng };

// "jpeg", "png" or "unknown".
const char* ImageEncodingName(ImageEncoding encoding);

// The encoding from the leading magic bytes only (no validation).
ImageEncoding SniffEncoding(std::span<const uint8_t> bytes);

struct ImageHeader {
  ImageEncoding encoding = ImageEncoding::kUnknown;
  int width = 0;
  int height = 0;
  int channels = 0;  // 1 gray, 2 gray+alpha, 3 colour, 4 colour+alpha or CMYK
};

// Parses the header and checks the trailer. Errors (kCorruptData) name the cause only;
// the caller adds the file path or sample index: "empty image (0 bytes)",
// "jpeg: truncated (no end-of-image marker)", "not a JPEG or PNG image (starts with 47 49 46)".
Result<ImageHeader> ProbeImage(std::span<const uint8_t> bytes);

}  // namespace batchcast::data
