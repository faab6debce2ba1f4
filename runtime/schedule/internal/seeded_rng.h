// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The schedule's own random numbers. std::shuffle and std::uniform_int_distribution
// are implementation-defined, so a plan computed with them could differ between
// libstdc++ and libc++ builds of the leader; the schedule must be a pure function of
// (spec, seed, num_samples, epoch) everywhere, so it uses SplitMix64 and Lemire's
// bounded draw, both fully specified here.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <utility>

namespace batchcast::schedule::internal {

// One SplitMix64 finalisation step (Steele, Lea, Flood 2014).
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A seed for one purpose: the run seed combined with tags (purpose, epoch, bucket...).
inline uint64_t DeriveSeed(uint64_t seed, std::initializer_list<uint64_t> tags) {
  uint64_t h = Mix64(seed);
  for (uint64_t t : tags) h = Mix64(h ^ Mix64(t + 0x632be59bd9b4e019ULL));
  return h;
}

// Purposes, so two uses of the same (seed, epoch, bucket) never share a stream.
enum Purpose : uint64_t { kUpgradeStream = 1, kShuffleStream = 2, kInterleaveStream = 3 };

class SeededRng {
 public:
  explicit SeededRng(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n), n > 0, without modulo bias (Lemire 2019).
  uint64_t Below(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(Next()) * n;
    auto low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(Next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Fisher-Yates over the whole span.
  template <typename T>
  void Shuffle(std::span<T> items) {
    for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[Below(i)]);
  }

  // Moves a uniformly chosen k-subset to the front of `items` (partial Fisher-Yates).
  template <typename T>
  void ChooseFront(std::span<T> items, size_t k) {
    for (size_t i = 0; i < k && i < items.size(); ++i)
      std::swap(items[i], items[i + Below(items.size() - i)]);
  }

 private:
  uint64_t state_;
};

}  // namespace batchcast::schedule::internal
