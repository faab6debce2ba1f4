// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The device path's canary (docs/gpu.md "The safe device path"): besides its slots, every
// device ring holds one small allocation whose bytes the leader copied in from host memory
// when it created the ring. A consumer checks it once before its first batch: it maps the
// allocation and imports its events by IPC, reads the bytes back and compares their
// checksum with the host bytes' (gpu/gpu_check.h). The bytes follow from a seed in the
// handle table, so both sides can produce them; no CUDA types here.
#pragma once

#include <cstddef>
#include <cstdint>

namespace batchcast::cuda {

constexpr uint64_t kCanaryBytes = 256 * 1024;

// The canary's bytes for `seed` (splitmix64 words).
inline void FillCanary(uint64_t seed, uint8_t* out, size_t n) {
  uint64_t x = seed;
  for (size_t i = 0; i < n; i += 8) {
    x += 0x9E3779B97F4A7C15ULL;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    for (size_t k = 0; k < 8 && i + k < n; ++k) out[i + k] = uint8_t(z >> (8 * k));
  }
}

// FNV-1a over `n` bytes: what the leader publishes and the consumer recomputes.
inline uint64_t CanaryChecksum(const uint8_t* p, size_t n) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ULL;
  return h;
}

}  // namespace batchcast::cuda
