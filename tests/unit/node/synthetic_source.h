// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// A BatchSource whose pixels are a pure function of the sample index, so every byte a
// consumer sees can be checked without a decoder.
#pragma once

#include <cstring>

#include "core/random.h"
#include "producer/batch_source.h"

namespace batchcast::node {

inline uint8_t SyntheticPixel(int64_t sample, size_t byte) {
  return static_cast<uint8_t>(Mix64(HashCombine(uint64_t(sample), byte)) & 0xff);
}

class SyntheticSource : public producer::BatchSource {
 public:
  SyntheticSource(int64_t n, int size = 8, int channels = 3) : n_(n) {
    layout_.channels = channels;
    layout_.height = layout_.width = size;
    layout_.dtype = pipeline::DType::kUint8;
  }
  int64_t num_samples() const override { return n_; }
  pipeline::SampleLayout MaxLayout() const override { return layout_; }
  pipeline::SampleLayout Layout(int) const override { return layout_; }
  Status Fill(const pipeline::BatchRequest& req, pipeline::BatchResult* result) override {
    auto* out = static_cast<uint8_t*>(req.images);
    size_t sb = layout_.bytes();
    for (size_t i = 0; i < req.samples.size(); ++i) {
      for (size_t b = 0; b < sb; ++b) out[i * sb + b] = SyntheticPixel(req.samples[i], b);
      req.labels[i] = req.samples[i] % 10;
    }
    result->written = static_cast<int64_t>(req.samples.size());
    result->kept.assign(req.samples.begin(), req.samples.end());
    fills_ += 1;
    return Status::Ok();
  }
  int fills() const { return fills_; }

 private:
  int64_t n_;
  pipeline::SampleLayout layout_;
  int fills_ = 0;
};

}  // namespace batchcast::node
