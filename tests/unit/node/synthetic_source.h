// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// A BatchSource whose pixels are a pure function of the sample index, so every byte a
// consumer sees can be checked without a decoder. It overlaps like the native pipeline
// (SlotWriter's look-ahead runs) but writes a started batch only when it is finished: a
// slot published before its fill was finished would show the consumer wrong bytes.
#pragma once

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "batchcast/consumer.h"
#include "core/errors.h"
#include "core/random.h"
#include "producer/batch_source.h"
#include "producer/feed.h"

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
  // req.samples and req.groups may go away once Start returns: kept here until Finish.
  void Start(const pipeline::BatchRequest& req) override {
    Started& s = started_.emplace_back();
    s.req = req;
    s.samples.assign(req.samples.begin(), req.samples.end());
    s.groups.assign(req.groups.begin(), req.groups.end());
    s.req.samples = s.samples;
    s.req.groups = s.groups;
  }
  Status Finish(pipeline::BatchResult* result) override {
    if (started_.empty()) return FailedPreconditionError("synthetic source: nothing started");
    Status st = Fill(started_.front().req, result);
    started_.pop_front();
    return st;
  }
  bool overlaps() const override { return true; }
  int fills() const { return fills_; }

 private:
  int64_t n_;
  pipeline::SampleLayout layout_;
  int fills_ = 0;
  struct Started {
    pipeline::BatchRequest req;
    std::vector<int64_t> samples;
    std::vector<pipeline::GroupTarget> groups;
  };
  std::deque<Started> started_;
};

// Pixels that are a function of (sample, image size): a SizedSource sample proves the size it
// was produced at.
inline uint8_t SizedPixel(int64_t sample, int size, size_t byte) {
  return SyntheticPixel(sample * 131 + size, byte);
}

// A source that honours BatchRequest::image_size (like the decode pipeline does), for
// progressive resizing.
class SizedSource : public producer::BatchSource {
 public:
  SizedSource(int64_t n, int full, int channels) : n_(n), full_(full), channels_(channels) {}
  int64_t num_samples() const override { return n_; }
  pipeline::SampleLayout MaxLayout() const override { return Layout(full_); }
  pipeline::SampleLayout Layout(int size) const override {
    pipeline::SampleLayout l;
    l.channels = channels_;
    l.height = l.width = size > 0 ? size : full_;
    return l;
  }
  Status Fill(const pipeline::BatchRequest& req, pipeline::BatchResult* result) override {
    const int size = req.image_size > 0 ? req.image_size : full_;
    const size_t sb = Layout(size).bytes();
    auto* out = static_cast<uint8_t*>(req.images);
    for (size_t i = 0; i < req.samples.size(); ++i) {
      for (size_t b = 0; b < sb; ++b) out[i * sb + b] = SizedPixel(req.samples[i], size, b);
      req.labels[i] = req.samples[i] % 10;
    }
    result->written = static_cast<int64_t>(req.samples.size());
    result->kept.assign(req.samples.begin(), req.samples.end());
    return Status::Ok();
  }

 private:
  int64_t n_;
  int full_, channels_;
};

// A SyntheticSource that also makes views (docs/pipeline.md "Views through the Producer"):
// its own view is its size; a view of size s has SizedPixel(sample, s, byte) pixels, so a
// consumer of a view can check every byte of its group's images.
class ViewedSource : public SyntheticSource {
 public:
  ViewedSource(int64_t n, int size, int channels)
      : SyntheticSource(n, size, channels), channels_(channels) {
    own_.image_size = size;
    own_.draw = core::kLeaderDraw;
    sizes_.push_back(0);  // view id 0: the source's own pixels
  }
  const core::View* own_view() const override { return &own_; }
  Result<pipeline::SampleLayout> CheckView(const core::View& v) const override {
    if (v.image_size < 1 || v.image_size > 64 || v.normalize || v.crop != core::ViewCrop::kNone)
      return InvalidArgumentError("the test source makes uint8 views of size 1..64 only");
    pipeline::SampleLayout l;
    l.channels = channels_;
    l.height = l.width = v.image_size;
    return l;
  }
  Result<int> AddView(const core::View& v) override {
    BC_RETURN_IF_ERROR(CheckView(v).status());
    sizes_.push_back(v.image_size);
    return static_cast<int>(sizes_.size() - 1);
  }
  Status Fill(const pipeline::BatchRequest& req, pipeline::BatchResult* result) override {
    if (req.groups.empty()) return SyntheticSource::Fill(req, result);
    for (const pipeline::GroupTarget& g : req.groups) {
      // A scheduled view's group is made at its epoch's size (GroupTarget::image_size).
      const int size = g.image_size > 0 ? g.image_size : sizes_.at(size_t(g.view));
      const size_t sb = size == 0 ? MaxLayout().bytes() : size_t(channels_) * size * size;
      auto* out = static_cast<uint8_t*>(g.images);
      for (size_t i = 0; i < req.samples.size(); ++i)
        for (size_t b = 0; b < sb; ++b)
          out[i * sb + b] = size == 0 ? SyntheticPixel(req.samples[i], b)
                                      : SizedPixel(req.samples[i], size, b);
    }
    for (size_t i = 0; i < req.samples.size(); ++i) req.labels[i] = req.samples[i] % 10;
    result->written = static_cast<int64_t>(req.samples.size());
    result->kept.assign(req.samples.begin(), req.samples.end());
    return Status::Ok();
  }

 private:
  int channels_;
  core::View own_;
  std::vector<int> sizes_;  // view id -> size (0: the own view)
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

// An external feed's batch maker over batches a test lists per epoch (as a Python iterable
// would yield them): `batches(epoch)` gives the epoch's batches of sample ids, `write` puts
// sample `id` at slot position `pos` (images, labels, named tensors); the ids are written.
class ListMaker : public producer::BatchMaker {
 public:
  using Batches = std::function<std::vector<std::vector<int64_t>>(uint64_t epoch)>;
  using Write = std::function<void(const producer::ExternalSlot&, int64_t pos, int64_t id)>;
  ListMaker(Batches batches, Write write) : batches_(std::move(batches)), write_(std::move(write)) {}
  Status BeginEpoch(uint64_t epoch) override {
    epoch_ = batches_(epoch);
    next_ = 0;
    held_.clear();
    return Status::Ok();
  }
  Status Fetch(bool* got) override {
    *got = next_ < epoch_.size();
    if (*got) held_.push_back(next_++);
    return Status::Ok();
  }
  Status Next(const producer::ExternalSlot& slot, producer::ExternalBatch* batch) override {
    const std::vector<int64_t>& ids = epoch_[held_.front()];
    held_.pop_front();
    for (size_t i = 0; i < ids.size(); ++i) {
      write_(slot, int64_t(i), ids[i]);
      slot.ids[i] = ids[i];
    }
    batch->num_samples = static_cast<int64_t>(ids.size());
    batch->ids_written = true;
    return Status::Ok();
  }
  int64_t Drop() override {
    const int64_t n = static_cast<int64_t>(epoch_[held_.front()].size());
    held_.pop_front();
    return n;
  }

 private:
  Batches batches_;
  Write write_;
  std::vector<std::vector<int64_t>> epoch_;
  size_t next_ = 0;
  std::deque<size_t> held_;
};

// Synthetic pixels and labels (as SyntheticSource writes them) for a ListMaker.
inline ListMaker::Write SyntheticWrite(size_t sample_bytes) {
  return [sample_bytes](const producer::ExternalSlot& s, int64_t pos, int64_t id) {
    for (size_t b = 0; b < sample_bytes; ++b) s.images[size_t(pos) * sample_bytes + b] = SyntheticPixel(id, b);
    s.labels[pos] = id % 10;
  };
}

// Randomized carving tests over an external feed (named_tensor_test.cc,
// ragged_tensor_test.cc): per epoch, ids 1000 e .. 1000 e + n - 1 in a random order, in
// producer batches of p (the last partial).
inline std::vector<std::vector<std::vector<int64_t>>> RandomEpochBatches(CounterRng& rng,
                                                                         int64_t n, int64_t p,
                                                                         int epochs) {
  std::vector<std::vector<std::vector<int64_t>>> out(static_cast<size_t>(epochs));
  for (int e = 0; e < epochs; ++e) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[i] = 1000 * e + i;
    for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng.Below(uint64_t(i) + 1)]);
    for (int64_t at = 0; at < n; at += p)
      out[e].emplace_back(order.begin() + at, order.begin() + std::min(n, at + p));
  }
  return out;
}

// The carvings a randomized test draws from: exact, drop_last, pad_last, shard (2 ranks),
// carve_offset, carve_shuffle (the first `modes` of them). Sets them in *o; returns the mode.
enum CarveMode {
  kModeExact = 0, kModeDropLast, kModePadLast, kModeShard, kModeOffset, kModeShuffle
};
inline int RandomCarve(CounterRng& rng, int modes, Options* o) {
  const int mode = int(rng.Below(uint64_t(modes)));
  o->drop_last = mode == kModeDropLast;
  o->pad_last = mode == kModePadLast;
  if (mode == kModeShard) o->mode = "shard", o->world_size = 2, o->rank = int(rng.Below(2));
  o->carve_offset = mode == kModeOffset;
  o->carve_shuffle = mode == kModeShuffle;
  return mode;
}

// Every batch of `c` to `each`, then the status that ended them (OK at the end of stream).
inline Status ForEachBatch(Consumer* c, const std::function<void(const Batch&)>& each) {
  Batch b;
  for (;;) {
    Status st = c->Next(&b);
    if (st.code() == StatusCode::kEndOfStream) return Status::Ok();
    if (!st.ok()) return st;
    each(b);
  }
}

}  // namespace batchcast::node
