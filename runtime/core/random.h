// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Counter-based randomness: every random choice in Batchcast is a pure function of
// its coordinates (seed, epoch, sample, ...), so results never depend on threads,
// scheduling or how many nodes a run got.
#pragma once

#include <cstdint>
#include <vector>

namespace batchcast {

// SplitMix64 finaliser: a bijective, well-mixed 64-bit hash.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t HashCombine(uint64_t a, uint64_t b) { return Mix64(a ^ Mix64(b + 0x632be59bd9b4e019ULL)); }
inline uint64_t HashCombine(uint64_t a, uint64_t b, uint64_t c) { return HashCombine(HashCombine(a, b), c); }

// A small deterministic generator (SplitMix64 stream) with unbiased bounded draws.
class CounterRng {
 public:
  explicit CounterRng(uint64_t key) : state_(key) {}
  uint64_t Next() { return Mix64(state_++); }
  // Uniform in [0, bound), bound > 0 (Lemire's multiply-shift with rejection).
  uint64_t Below(uint64_t bound) {
    for (;;) {
      __uint128_t m = static_cast<__uint128_t>(Next()) * bound;
      uint64_t low = static_cast<uint64_t>(m);
      if (low >= bound || low >= (-bound) % bound) return static_cast<uint64_t>(m >> 64);
    }
  }
  // Uniform double in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  uint64_t state_;
};

// Fisher-Yates permutation of [0, n) keyed by `key`.
inline void Permutation(uint64_t key, int64_t n, std::vector<int64_t>* out) {
  out->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) (*out)[i] = i;
  CounterRng rng(key);
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap((*out)[i], (*out)[j]);
  }
}

}  // namespace batchcast
