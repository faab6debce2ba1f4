// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Batches made by the caller (a Python iterable, feed.h BatchMaker) as a feed. The maker
// holds the batches it has read ahead (at most two): the one a position writes, and the
// next, read before the slot is taken so that the epoch's last batch is known when it is
// published and no slot is held while the iterable makes a batch. The first positions of
// each epoch are kept as copies (Retain): a late joiner gets them replayed byte for byte.
#include <algorithm>
#include <cstring>

#include "core/errors.h"
#include "core/log.h"
#include "producer/feed.h"

namespace batchcast::producer {
namespace {

// A published position kept for replays: its samples' bytes and its descriptor contents.
struct Kept {
  SlotContents contents;
  std::vector<uint8_t> images, labels, ids;
  std::vector<std::vector<uint8_t>> tensors;
};

class ExternalFeed final : public Feed {
 public:
  ExternalFeed(const ExternalFeedConfig& config, std::unique_ptr<BatchMaker> maker)
      : config_(config), maker_(std::move(maker)) {}
  const char* name() const override { return "external iterable"; }
  Replay replay() const override { return Replay::kEpochStart; }
  bool EpochEnded() const override { return ended_; }
  void Retain(int64_t positions) override { retain_ = positions; }
  int64_t DeclaredPositions() const override {
    const int64_t n = config_.epoch_samples, p = config_.producer_batch;
    return n > 0 && p > 0 ? (n + p - 1) / p : -1;
  }

  Status Plan(const Options& o, uint32_t max_consumer_batch, std::string_view who,
              FeedPlan* plan) override {
    const ExternalFeedConfig& c = config_;
    who_ = std::string(who);
    if (c.layout.bytes() == 0 && c.tensors.empty())
      return InvalidArgumentError("{}: empty sample layout {}x{}x{} and no named tensors; "
                                  "every sample needs an image or a named tensor", who,
                                  c.layout.channels, c.layout.height, c.layout.width);
    if (c.producer_batch <= 0)
      return InvalidArgumentError("{}: producer_batch {} must be positive", who, c.producer_batch);
    if (c.max_consumer_batch == 0 || int64_t(c.max_consumer_batch) > c.producer_batch)
      return InvalidArgumentError(
          "{}: largest consumer batch {} must be between 1 and the producer batch {}; "
          "lower max_consumer_batch or publish larger batches", who, c.max_consumer_batch,
          c.producer_batch);
    plan->num_samples = std::max<int64_t>(0, c.epoch_samples);
    plan->producer_batch = c.producer_batch;
    plan->max_consumer_batch = c.max_consumer_batch;
    plan->sample = c.layout;
    plan->tensors = c.tensors;
    plan->stages = false;
    return Status::Ok();
  }

  Result<int64_t> BeginEpoch(uint64_t epoch) override {
    epoch_ = epoch;
    queued_ = 0;
    pass_ended_ = ended_ = false;
    next_k_ = 0;
    epoch_position_ = 0;
    kept_.clear();
    BC_RETURN_IF_ERROR(maker_->BeginEpoch(epoch));
    return int64_t(-1);  // the maker says which batch is the last
  }

  Result<std::optional<uint64_t>> Produce(const Position& p, std::span<const int64_t> part,
                                          uint64_t only, const AcquireWait& wait,
                                          int64_t next_k) override {
    if (!part.empty())
      return FailedPreconditionError("{}: batches from an external iterable cannot be split "
                                     "into parts (mode=shard across nodes)", who_);
    if (p.epoch == epoch_ && p.k < next_k_) return ReplayKept(p, only, wait);
    if (p.epoch != epoch_ || p.k != next_k_)
      return InternalError("{}: position {} of epoch {} asked for, but the iterable is at "
                           "batch {} of epoch {}", who_, p.k, p.epoch, next_k_, epoch_);
    BC_ASSIGN_OR_RETURN(bool last, ReadAhead());
    BC_ASSIGN_OR_RETURN(std::optional<shm::SlotWrite> w, writer_->Acquire(writer_->ring().next_seq(), wait));
    if (!w) return std::optional<uint64_t>();  // the batch stays read ahead
    const SlotLayout& layout = writer_->layout();
    ExternalSlot slot{w->data, layout.labels(w->data), layout.ids(w->data), config_.producer_batch,
                      {}, {}, p.epoch, p.k};
    for (const TensorSlot& t : layout.tensors) {
      const bool variable = t.spec.variable_length();
      slot.tensors.push_back(w->data + (variable ? t.values_offset : t.offset));
      slot.offsets.push_back(variable ? reinterpret_cast<int64_t*>(w->data + t.offset) : nullptr);
    }
    ExternalBatch batch;
    BC_RETURN_IF_ERROR(maker_->Next(slot, &batch));
    queued_ -= 1;
    if (batch.num_samples <= 0 || batch.num_samples > config_.producer_batch)
      return InvalidArgumentError("{}: a batch of {} samples does not fit a slot of {}", who_,
                                  batch.num_samples, config_.producer_batch);
    const uint32_t n = static_cast<uint32_t>(batch.num_samples);
    BC_RETURN_IF_ERROR(CheckOffsets(slot, n));
    if (!batch.ids_written)
      for (uint32_t i = 0; i < n; ++i) slot.ids[i] = epoch_position_ + i;
    SlotContents c = Contents(p.k, n, last, batch.lr_factor);
    if (p.k < retain_) Keep(*w, c);
    BC_ASSIGN_OR_RETURN(uint64_t receivers, writer_->Publish(*w, c, only, BatchRecord{}));
    epoch_position_ += n;
    next_k_ += 1;
    ended_ = last;
    return std::optional<uint64_t>(receivers);
  }

  Status Seek(const Position& p) override {
    while (next_k_ < p.k) {
      BC_ASSIGN_OR_RETURN(bool last, ReadAhead());
      if (last)
        return InvalidArgumentError("{}: the stream resumes at batch {} of epoch {}, but the "
                                    "iterable has only {} batches in it", who_, p.k, p.epoch,
                                    next_k_ + 1);
      epoch_position_ += maker_->Drop();  // default ids stay the running index
      queued_ -= 1;
      next_k_ += 1;
    }
    return Status::Ok();
  }

  Status Skip(const Position& p) override {
    if (p.epoch != epoch_ || p.k != next_k_)
      return InternalError("{}: skip of position {} of epoch {}, but the iterable is at batch "
                           "{} of epoch {}", who_, p.k, p.epoch, next_k_, epoch_);
    BC_ASSIGN_OR_RETURN(bool last, ReadAhead());
    epoch_position_ += maker_->Drop();
    queued_ -= 1;
    next_k_ += 1;
    ended_ = last;
    return writer_->PublishEmpty(p.epoch, p.k);
  }

 private:
  // Reads until the batch of this position and the next one are held (or the pass ended).
  // Returns whether this position's batch is the epoch's last.
  Result<bool> ReadAhead() {
    while (queued_ < 2 && !pass_ended_) {
      bool got = false;
      BC_RETURN_IF_ERROR(maker_->Fetch(&got));
      if (got) queued_ += 1;
      else pass_ended_ = true;
    }
    if (queued_ == 0)
      return InvalidArgumentError("{}: the iterable yielded no batch in epoch {}{}", who_, epoch_,
                                  next_k_ > 0 ? fmt::format(" after batch {}", next_k_ - 1) : "");
    return pass_ended_ && queued_ == 1;
  }

  // The row offsets a maker wrote for its variable-length tensors: from 0, never decreasing,
  // within the tensor's values budget (a maker checks the budget before it writes; this is
  // what every consumer relies on).
  Status CheckOffsets(const ExternalSlot& slot, uint32_t n) const {
    const SlotLayout& layout = writer_->layout();
    for (size_t t = 0; t < layout.tensors.size(); ++t) {
      const TensorSpec& spec = layout.tensors[t].spec;
      if (!spec.variable_length()) continue;
      const int64_t* off = slot.offsets[t];
      bool ok = off[0] == 0;
      for (uint32_t i = 0; i < n && ok; ++i) ok = off[i + 1] >= off[i];
      if (ok && uint64_t(off[n]) * spec.sample_bytes() <= spec.values_bytes) continue;
      return InternalError("{}: batch {} of epoch {}: variable-length tensor '{}' has row "
                           "offsets that do not start at 0, decrease, or pass its budget of {} "
                           "bytes (the batch maker's bug)", who_, slot.batch, slot.epoch,
                           spec.name, spec.values_bytes);
    }
    return Status::Ok();
  }

  SlotContents Contents(int64_t k, uint32_t n, bool last, float lr_factor) const {
    const int64_t p = config_.producer_batch;
    const int64_t epoch_samples = std::max<int64_t>(0, config_.epoch_samples);
    SlotContents c;
    c.epoch = epoch_;
    c.batch = k;
    c.batches_in_epoch = epoch_samples > 0 ? (epoch_samples + p - 1) / p : 0;
    c.last_in_epoch = last;
    c.samples_in_epoch = static_cast<uint64_t>(epoch_samples);
    c.num_samples = n;
    c.layout = config_.layout;
    c.lr_factor = lr_factor;
    return c;
  }

  // Copies position k's n samples (images, labels, ids, named tensors) for replays.
  void Keep(const shm::SlotWrite& w, const SlotContents& c) {
    const SlotLayout& layout = writer_->layout();
    const uint64_t n = c.num_samples;
    Kept kept;
    kept.contents = c;
    kept.images.assign(w.data, w.data + n * config_.layout.bytes());
    const auto* labels = reinterpret_cast<const uint8_t*>(layout.labels(w.data));
    const auto* ids = reinterpret_cast<const uint8_t*>(layout.ids(w.data));
    kept.labels.assign(labels, labels + n * sizeof(int64_t));
    kept.ids.assign(ids, ids + n * sizeof(int64_t));
    for (const TensorSlot& t : layout.tensors) {
      if (t.spec.variable_length()) {  // its n + 1 offsets, then its rows
        const auto* off = reinterpret_cast<const int64_t*>(w.data + t.offset);
        const auto* first = reinterpret_cast<const uint8_t*>(off);
        std::vector<uint8_t> bytes(first, first + (n + 1) * sizeof(int64_t));
        const uint8_t* values = w.data + t.values_offset;
        bytes.insert(bytes.end(), values, values + uint64_t(off[n]) * t.spec.sample_bytes());
        kept.tensors.push_back(std::move(bytes));
        continue;
      }
      kept.tensors.emplace_back(w.data + t.offset, w.data + t.offset + n * t.spec.sample_bytes());
    }
    kept_.push_back(std::move(kept));
  }

  // A late joiner's replay of kept position p.k, to `only` alone.
  Result<std::optional<uint64_t>> ReplayKept(const Position& p, uint64_t only,
                                         const AcquireWait& wait) {
    if (p.k >= static_cast<int64_t>(kept_.size()))
      return InternalError("{}: replay of batch {} of epoch {}, but only {} are kept", who_, p.k,
                           p.epoch, kept_.size());
    const Kept& kept = kept_[static_cast<size_t>(p.k)];
    BC_ASSIGN_OR_RETURN(std::optional<shm::SlotWrite> w, writer_->Acquire(writer_->ring().next_seq(), wait));
    if (!w) return std::optional<uint64_t>();
    const SlotLayout& layout = writer_->layout();
    // (a feed without images keeps none: an empty vector's data() may be null)
    if (!kept.images.empty()) std::memcpy(w->data, kept.images.data(), kept.images.size());
    std::memcpy(layout.labels(w->data), kept.labels.data(), kept.labels.size());
    std::memcpy(layout.ids(w->data), kept.ids.data(), kept.ids.size());
    for (size_t t = 0; t < kept.tensors.size(); ++t) {
      const TensorSlot& ts = layout.tensors[t];
      const std::vector<uint8_t>& bytes = kept.tensors[t];
      // A variable-length tensor's offsets go to `offset`, its rows after them to values_offset.
      const size_t head = ts.spec.variable_length()
                              ? (kept.contents.num_samples + 1) * sizeof(int64_t) : bytes.size();
      std::memcpy(w->data + ts.offset, bytes.data(), head);
      if (bytes.size() > head)
        std::memcpy(w->data + ts.values_offset, bytes.data() + head, bytes.size() - head);
    }
    BC_ASSIGN_OR_RETURN(uint64_t receivers,
                        writer_->Publish(*w, kept.contents, only, BatchRecord{}));
    return std::optional<uint64_t>(receivers);
  }

  ExternalFeedConfig config_;
  std::unique_ptr<BatchMaker> maker_;
  std::string who_;
  uint64_t epoch_ = ~0ULL;
  int64_t next_k_ = 0;           // the position the maker's next batch is for
  int queued_ = 0;               // batches the maker holds, read ahead
  bool pass_ended_ = false;      // the maker's pass over the epoch has no more batches
  bool ended_ = false;           // the last position produced ended the epoch
  int64_t epoch_position_ = 0;   // samples published so far in the epoch (default ids)
  int64_t retain_ = 0;
  std::vector<Kept> kept_;
};

}  // namespace

std::unique_ptr<Feed> MakeExternalFeed(const ExternalFeedConfig& config,
                                       std::unique_ptr<BatchMaker> maker) {
  return std::make_unique<ExternalFeed>(config, std::move(maker));
}

}  // namespace batchcast::producer
