// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// A BatchSource whose pixels are a pure function of the sample index, so every byte a
// consumer sees can be checked without a decoder.
#pragma once

#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>

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

// A SyntheticSource that skips the samples `bad(epoch, batch_index, position)` names, as the
// pipeline does under on_bad_sample=skip (compacted, with a reason), and records them.
class SkippingSource : public SyntheticSource {
 public:
  using BadFn = std::function<bool(uint64_t epoch, int64_t fill, size_t pos)>;
  SkippingSource(int64_t n, BadFn bad) : SyntheticSource(n), bad_(std::move(bad)) {}
  Status Fill(const pipeline::BatchRequest& req, pipeline::BatchResult* result) override {
    auto* out = static_cast<uint8_t*>(req.images);
    const size_t sb = MaxLayout().bytes();
    int64_t& fill = fills_in_epoch_[req.epoch];
    *result = pipeline::BatchResult();
    for (size_t i = 0; i < req.samples.size(); ++i) {
      const int64_t id = req.samples[i];
      if (bad_(req.epoch, fill, i)) {
        result->skipped.push_back(id);
        result->skip_reasons.push_back("pipeline: sample " + std::to_string(id) +
                                       " of mem://skips: empty image (0 bytes)");
        skipped_[req.epoch].insert(id);
        continue;
      }
      const size_t w = result->kept.size();
      for (size_t b = 0; b < sb; ++b) out[w * sb + b] = SyntheticPixel(id, b);
      req.labels[w] = id % 10;
      result->kept.push_back(id);
    }
    result->written = static_cast<int64_t>(result->kept.size());
    ++fill;
    return Status::Ok();
  }
  // Sample ids skipped in each epoch (read after the leader finished).
  const std::map<uint64_t, std::set<int64_t>>& skipped() const { return skipped_; }

 private:
  BadFn bad_;
  std::map<uint64_t, int64_t> fills_in_epoch_;
  std::map<uint64_t, std::set<int64_t>> skipped_;
};

}  // namespace batchcast::node
