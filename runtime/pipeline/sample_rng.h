// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Counter-based randomness for per-sample augmentation. A SampleRng is a pure function
// of (seed, epoch, sample index, stream): the n-th draw is SplitMix64(key + n * golden),
// so no state is shared between samples and the output never depends on which worker
// thread handles a sample, on the number of threads or on the order of the work.
#pragma once

#include <cstdint>

namespace batchcast::pipeline {

// One round of SplitMix64 (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Independent streams of one sample, so adding draws to one does not shift another.
enum class RngStream : uint64_t { kCrop = 1, kFlip = 2 };

class SampleRng {
 public:
  SampleRng(uint64_t seed, uint64_t epoch, uint64_t index, RngStream stream)
      : key_(SplitMix64(SplitMix64(SplitMix64(SplitMix64(seed) ^ epoch) ^ index) ^
                        static_cast<uint64_t>(stream))) {}

  uint64_t Next() { return SplitMix64(key_ + 0x9e3779b97f4a7c15ULL * counter_++); }
  // Uniform in [0, 1) with 53 bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [lo, hi] (Lemire's multiply-shift; bias below 2^-32 for our ranges).
  int64_t UniformInt(int64_t lo, int64_t hi) {
    uint64_t range = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>((static_cast<unsigned __int128>(Next()) * range) >> 64);
  }
  bool Bernoulli(double p) { return Uniform() < p; }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

}  // namespace batchcast::pipeline
