// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// What a conformance consumer writes for every batch it receives: one line
//   <epoch> <index> <size> <repeats> <id>:<checksum> ...
// where the checksum is FNV-1a over the sample's image bytes, its label and its named tensors.
// Two front doors conform when every consumer's lines are equal byte for byte.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "batchcast/batch.h"

namespace batchcast::conformance {

inline uint64_t Fnv(const void* data, size_t n, uint64_t h = 1469598103934665603ULL) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

inline std::string DigestLine(const Batch& b) {
  const BatchInfo& info = b.info();
  std::string line = std::to_string(info.epoch) + " " + std::to_string(info.index) + " " +
                     std::to_string(b.size()) + " " + std::to_string(info.repeats);
  const TensorView images = b.images();
  const size_t per = b.size() > 0 ? images.nbytes / size_t(b.size()) : 0;
  const auto* labels = static_cast<const int64_t*>(b.labels().data);
  for (int64_t i = 0; i < b.size(); ++i) {
    uint64_t h = Fnv(static_cast<const uint8_t*>(images.data) + size_t(i) * per, per);
    h = Fnv(&labels[i], sizeof(int64_t), h);
    for (int t = 0; t < b.num_tensors(); ++t) {
      const TensorView v = b.tensor(b.tensor_name(t));
      const size_t bytes = v.nbytes / size_t(b.size());
      h = Fnv(static_cast<const uint8_t*>(v.data) + size_t(i) * bytes, bytes, h);
    }
    char buf[48];
    std::snprintf(buf, sizeof(buf), " %lld:%016llx", static_cast<long long>(b.sample_ids()[i]),
                  static_cast<unsigned long long>(h));
    line += buf;
  }
  return line;
}

}  // namespace batchcast::conformance
