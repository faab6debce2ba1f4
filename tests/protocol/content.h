// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// What every protocol-test producer writes: sample content is a pure function of the
// sample id (tests/unit/node/synthetic_source.h), so a consumer can check every byte it
// receives, and a checksum of a batch's images + labels + ids taken at receipt can be
// compared with one taken at release.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tests/unit/node/synthetic_source.h"

namespace batchcast::protocol_test {

constexpr int kImageSide = 4;      // 4 x 4 x 3 uint8 images: 48 bytes a sample
constexpr int kChannels = 3;
constexpr size_t kSampleBytes = size_t(kImageSide) * kImageSide * kChannels;

inline uint8_t Pixel(int64_t sample, size_t byte) { return node::SyntheticPixel(sample, byte); }
inline int64_t Label(int64_t sample) { return sample % 10; }

// FNV-1a over a byte range, chained.
inline uint64_t Fnv(const void* data, size_t n, uint64_t h = 1469598103934665603ULL) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

}  // namespace batchcast::protocol_test
