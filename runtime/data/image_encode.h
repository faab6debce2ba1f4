// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Encoders used by the converters (raw IDX pixels to PNG or JPEG). Pixels are
// interleaved uint8, height x width x channels, channels 1 (gray) or 3 (RGB).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "batchcast/status.h"

namespace batchcast::data {

// Lossless PNG (libspng), 8-bit gray or RGB.
Result<std::vector<uint8_t>> EncodePng(std::span<const uint8_t> pixels, int width, int height,
                                       int channels);

// Baseline JPEG (TurboJPEG) at `quality` 1..100; gray stays gray, RGB uses 4:2:0.
Result<std::vector<uint8_t>> EncodeJpeg(std::span<const uint8_t> pixels, int width, int height,
                                        int channels, int quality);

}  // namespace batchcast::data
