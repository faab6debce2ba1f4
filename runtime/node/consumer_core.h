// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The consumer's state (runtime-internal): the producer batch being carved, the batches
// alive (BatchRef), the epoch bookkeeping Next() updates (consumer_next.cc), and the carving
// of producer batches into this consumer's batches (consumer_carving.cc: exact, sharded,
// per producer batch; docs/data-plane.md).
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "batchcast/batch.h"
#include "batchcast/consumer.h"
#include "batchcast/options.h"
#include "core/errors.h"
#include "core/log.h"
#include "telemetry/collector.h"
#include "telemetry/metrics.h"
#include "transport/shm/futex.h"
#include "transport/shm/carving.h"
#include "transport/shm/control.h"
#include "transport/shm/ring_consumer.h"

namespace batchcast::internal {

// The rows of position p of variable-length tensor `t` of producer batch `d` in slot memory
// `data` (shm::TensorDesc): position p >= n (the fill-repeat tail) is sample (p - n) mod n.
struct Rows {
  const uint8_t* first = nullptr;
  uint64_t count = 0;
};
inline Rows RowsAt(const shm::SlotDesc& d, const uint8_t* data, const shm::TensorDesc& t,
                   uint64_t p) {
  const auto* off = reinterpret_cast<const int64_t*>(data + t.offset);
  const uint64_t n = d.num_samples;
  const uint64_t s = p < n ? p : (p - n) % n;
  return {data + t.values_offset + uint64_t(off[s]) * t.sample_bytes,
          uint64_t(off[s + 1] - off[s])};
}

// Samples copied out of the ring: a batch that spans two producer batches (exact carving),
// or the epoch's last batch padded with pad_last. Collected in the vectors below, then
// sealed before it is handed out: moved to pages of its own, mapped read-only and registered
// with the read-only guard, so that a write into it faults with the message a write into a
// slot gets (a batch behaves the same whether or not it was joined).
struct OwnedSamples {
  shm::SlotDesc desc{};                // geometry of the samples (of the first slot)
  std::vector<uint8_t> images;
  std::vector<int64_t> labels, ids;
  uint32_t count = 0;

  OwnedSamples() = default;
  OwnedSamples(const OwnedSamples&) = delete;
  OwnedSamples& operator=(const OwnedSamples&) = delete;
  ~OwnedSamples();  // unregisters and unmaps the sealed pages (consumer_carving.cc)

  // Moves the samples to a private read-only mapping registered with the read-only guard
  // as `what` (once; the vectors are freed). Append, AppendSample and Pad only before.
  Status Seal(const std::string& what);
  bool sealed() const { return sealed_base_ != nullptr; }
  // Where the batch's samples are (the sealed pages, or the vectors before sealing).
  const uint8_t* ImagesData() const { return sealed() ? sealed_images_ : images.data(); }
  const int64_t* LabelsData() const { return sealed() ? sealed_labels_ : labels.data(); }
  const int64_t* IdsData() const { return sealed() ? sealed_ids_ : ids.data(); }
  const uint8_t* TensorData(size_t t) const {
    return sealed() ? sealed_tensors_[t] : tensors[t].data();
  }

  // Appends slot samples [begin, begin + k) of producer batch `d` (slot memory `data`).
  Status Append(const shm::SlotDesc* d, const uint8_t* data, uint32_t begin, uint32_t k) {
    if (k == 0) return Status::Ok();
    if (count == 0) {
      desc = *d;
      StartTensors();
    }
    if (d->sample_bytes != desc.sample_bytes || d->dtype != desc.dtype || !SameTensors(*d))
      return InternalError("consumer: producer batches {} and {} of epoch {} differ in sample "
                           "geometry or named tensors; a batch cannot span them", desc.seq,
                           d->seq, d->epoch);
    const uint64_t sb = d->sample_bytes;
    const uint8_t* img = data + d->images_offset + uint64_t(begin) * sb;
    images.insert(images.end(), img, img + uint64_t(k) * sb);
    const auto* lab = reinterpret_cast<const int64_t*>(data + d->labels_offset) + begin;
    labels.insert(labels.end(), lab, lab + k);
    const auto* id = reinterpret_cast<const int64_t*>(data + d->ids_offset) + begin;
    ids.insert(ids.end(), id, id + k);
    for (uint32_t t = 0; t < desc.num_tensors; ++t) {
      const shm::TensorDesc& td = d->tensors[t];
      const uint64_t tb = td.sample_bytes;
      if (shm::IsVariableLength(td)) {
        for (uint32_t i = begin; i < begin + k; ++i) {
          const Rows r = RowsAt(*d, data, td, i);
          tensors[t].insert(tensors[t].end(), r.first, r.first + r.count * tb);
          offsets[t].push_back(offsets[t].back() + int64_t(r.count));
        }
        continue;
      }
      const uint8_t* src = data + td.offset + uint64_t(begin) * tb;
      tensors[t].insert(tensors[t].end(), src, src + uint64_t(k) * tb);
    }
    count += k;
    return Status::Ok();
  }
  // Appends sample i of `src`.
  void AppendSample(const OwnedSamples& src, uint32_t i) {
    if (count == 0) {
      desc = src.desc;
      StartTensors();
    }
    CopySample(src, i);
    count += 1;
  }
  // Repeats sample j mod count at positions count..b-1 (pad_last).
  void Pad(uint32_t b) {
    const uint32_t n = count;
    images.reserve(uint64_t(b) * desc.sample_bytes);
    for (uint32_t j = n; j < b; ++j) CopySample(*this, j % n);
    count = b;
  }
  std::vector<std::vector<uint8_t>> tensors;  // desc.tensors[t]'s bytes, sample after sample
  // A variable-length tensor's row offsets (count + 1, from 0); empty for a fixed-shape one.
  std::vector<std::vector<int64_t>> offsets;

 private:
  void StartTensors() {
    tensors.assign(desc.num_tensors, {});
    offsets.assign(desc.num_tensors, {});
    for (uint32_t t = 0; t < desc.num_tensors; ++t)
      if (shm::IsVariableLength(desc.tensors[t])) offsets[t] = {0};
  }

  void* sealed_base_ = nullptr;        // the read-only mapping (null: not sealed)
  size_t sealed_bytes_ = 0;
  bool guarded_ = false;               // registered with the read-only guard
  const uint8_t* sealed_images_ = nullptr;
  const int64_t *sealed_labels_ = nullptr, *sealed_ids_ = nullptr;
  const uint8_t* sealed_tensors_[shm::kMaxTensors] = {};

  // Appends the image, label, id and named tensors of sample i of `src` (may be *this).
  void CopySample(const OwnedSamples& src, uint32_t i) {
    const uint64_t sb = src.desc.sample_bytes;
    AppendBytes(&images, src.images, i * sb, sb);
    const int64_t label = src.labels[i], id = src.ids[i];
    labels.push_back(label);
    ids.push_back(id);
    for (size_t t = 0; t < tensors.size(); ++t) {
      const uint64_t tb = src.desc.tensors[t].sample_bytes;
      if (!offsets[t].empty()) {  // variable-length: its rows (read before `offsets` grows)
        const int64_t from = src.offsets[t][i], rows = src.offsets[t][i + 1] - from;
        AppendBytes(&tensors[t], src.tensors[t], uint64_t(from) * tb, uint64_t(rows) * tb);
        offsets[t].push_back(offsets[t].back() + rows);
        continue;
      }
      AppendBytes(&tensors[t], src.tensors[t], i * tb, tb);
    }
  }
  // Appends from[at, at + n) to *to; `from` may be *to (copied first: insert may reallocate).
  static void AppendBytes(std::vector<uint8_t>* to, const std::vector<uint8_t>& from, uint64_t at,
                          uint64_t n) {
    if (n == 0) return;  // e.g. a batch without images: an empty vector's data() may be null
    const size_t old = to->size();
    to->resize(old + n);
    std::memcpy(to->data() + old, from.data() + at, n);
  }
  bool SameTensors(const shm::SlotDesc& d) const {
    if (d.num_tensors != desc.num_tensors) return false;
    for (uint32_t t = 0; t < d.num_tensors; ++t)
      if (d.tensors[t].sample_bytes != desc.tensors[t].sample_bytes ||
          shm::IsVariableLength(d.tensors[t]) != shm::IsVariableLength(desc.tensors[t]) ||
          std::strncmp(d.tensors[t].name, desc.tensors[t].name, shm::kTensorNameBytes) != 0)
        return false;
    return true;
  }
};

// One batch this consumer hands out from the producer batch it carves: `size` samples in
// place at slot position `start`, or `owned` (copied).
struct Piece {
  uint32_t start = 0, size = 0, repeats = 0;
  std::shared_ptr<OwnedSamples> owned;
};

struct ConsumerCore : std::enable_shared_from_this<ConsumerCore> {
  // Declared first, destroyed last: a telemetry the consumer owns (producer::ProcessTelemetry)
  // finishes after everything that records into it.
  std::shared_ptr<void> owned_telemetry;
  std::function<Status()> finish_telemetry;  // writes its files at Detach (OwnTelemetry)
  std::unique_ptr<shm::RingConsumer> ring;
  Options options;
  int rank = -1;

  std::mutex mu;
  shm::AcquiredBatch cur;              // producer batch being carved (cur.desc == null: none)
  std::vector<Piece> pieces;           // this consumer's batches from `cur`, in order
  size_t next_piece = 0;
  // Exact carving: samples of the epoch waiting for the rest of their batch (null: none).
  std::shared_ptr<OwnedSamples> carry;
  // Sharding (mode=shard; carving.h PlanShard): this consumer's rank in a world of
  // shard_world (1: no sharding), the epoch position of the next producer batch, and the
  // epoch's tail global batch collected so far.
  uint32_t shard_world = 1, shard_rank = 0;
  uint64_t epoch_pos = 0;
  std::shared_ptr<OwnedSamples> shard_tail;
  struct SlotRef {
    shm::AcquiredBatch batch;
    int refs = 0;                      // batches alive (+1 while still carving)
  };
  std::map<uint64_t, SlotRef> slot_refs;  // seq -> producer batch held
  struct Held {
    uint64_t epoch = 0, index = 0, seq = 0;
  };
  std::map<uint64_t, Held> held;       // serial -> consumer batch alive (error messages)
  uint64_t next_serial = 0;
  int outstanding = 0;                 // consumer batches alive
  bool in_next = false;                // a Next() is blocked without the lock
  bool admitted = false;
  uint64_t start_seq = 0;              // first stream position (0: there from the start)
  bool finished = false;               // no more batches for this consumer
  bool drained = false;                // the leader was told (it no longer addresses us)
  bool detached = false;               // left the stream: nothing may be released any more
  bool closed = false;                 // Consumer::Detach() was called: Next() is an error
  bool end_returned = false;           // Next() returned kEndOfStream: another is an error
  bool loop_holds_batch = false;       // one batch more than buffer_depth (kLoopHoldsBatch)
  uint64_t first_epoch = ~0ULL;
  uint64_t completed_epoch = ~0ULL;    // the last epoch counted complete
  int64_t epoch_budget = 0;            // epochs this consumer runs (epochs - start run epoch)
  uint64_t run_epoch0 = 0;             // its own epoch at its start position (start_run_epoch)
  int64_t epochs_started = 0;          // epochs it has received batches of
  std::string address;                 // the leader's socket (a resume joins again)
  // Resume (options start_epoch / start_batch): the stream epoch and the epoch position (in
  // samples) this consumer starts at; batches before it are skipped. Cleared once there.
  bool resuming = false;
  // load_state_dict() could not join again with its position: the stream had ended (its
  // rest published into the ring before the position was loaded).
  bool rejoin_after_end = false;
  uint64_t resume_epoch = 0, resume_pos = 0;
  StreamPosition next_position;        // of the batch Next() returns next (SetNextLocked)
  uint64_t epoch = ~0ULL;
  uint64_t index_in_epoch = 0;
  int64_t epoch_repeats = 0;
  Status status;
  ConsumerStats stats;
  telemetry::Collector* collector = nullptr;
  std::function<void(const Status&)> error_handler;
  // What this consumer received per image size in the current epoch (progressive
  // resizing; annotated into telemetry at the epoch's end): size -> batches, samples,
  // batch size, LR factor.
  struct SizeMix {
    int64_t batches = 0, samples = 0, batch = 0;
    float lr = 1.0f;
  };
  std::map<int32_t, SizeMix> epoch_mix;
  // Progressive resizing: this consumer's batches per stream epoch, derived once from the
  // schedule the segment header names (resize_mu guards them; derived = true once tried).
  std::mutex resize_mu;
  bool resize_derived = false;
  std::vector<int64_t> resize_batches;

  // The position of the batch Next() returns next: batch `batch` of stream epoch `epoch`, in
  // this consumer's own epoch run_epoch0 + the epochs it completed since it started.
  void SetNextLocked(uint64_t epoch, uint64_t batch) {
    next_position = {epoch, batch,
                     static_cast<int64_t>(run_epoch0) + stats.epochs_completed};
  }
  // Drops one reference to a producer batch; the last one gives the slot back.
  void UnrefLocked(uint64_t seq) {
    auto it = slot_refs.find(seq);
    if (it == slot_refs.end()) return;
    if (--it->second.refs == 0) {
      if (!detached) ring->Release(it->second.batch);
      slot_refs.erase(it);
    }
  }
  // Lifecycle (docs/data-plane.md): a consumer that is done drains at once (the leader
  // stops addressing it, so it never holds the others back) and leaves only when its last
  // batch view is gone (the leader never reuses a slot it may still read).
  void DrainLocked() {
    if (drained || detached) return;
    drained = true;
    Status st = ring->Drain();
    if (!st.ok()) BC_LOG(Warn, Node, "consumer: drain: {}", st.message());
  }
  void MaybeDetachLocked() {
    if (!finished || detached) return;
    DrainLocked();
    if (outstanding > 0 || !slot_refs.empty() || in_next) return;
    detached = true;
    Status st = ring->Detach();
    if (!st.ok()) BC_LOG(Warn, Node, "consumer: detach: {}", st.message());
  }
  void FinishLocked() {
    finished = true;
    if (cur.desc != nullptr) {  // the rest of the producer batch is not needed any more
      UnrefLocked(cur.seq);
      cur = shm::AcquiredBatch();
    }
    MaybeDetachLocked();
  }
  // A resuming consumer's first producer batch at or after its epoch: the stream must not
  // have passed its position (it then skips to it: ExactPieces / ShardPieces).
  Status CheckResumePoint(const shm::SlotDesc& d) {
    const uint64_t at = d.batch_in_epoch * ring->header()->producer_batch;
    if (d.epoch == resume_epoch && at <= resume_pos) return Status::Ok();
    // A leader that replays, given the position only after this consumer attached: the
    // stream ended, or went past it, before the position could join it.
    if (rejoin_after_end || (ring->leader_features() & shm::kLeaderReplaysResume) != 0)
      return FailedPreconditionError(
          "consumer: resumes at epoch {} batch {} (sample {} of the epoch), but the stream it "
          "attached to {} (it is at epoch {} sample {}) before the position was loaded, which "
          "was after attaching. Give the position when attaching (start_epoch / start_batch; "
          "Python: Consumer(..., **state)): the leader then replays it",
          resume_epoch, options.start_batch, resume_pos,
          rejoin_after_end ? "had published all its batches and ended" : "had passed it",
          d.epoch, at);
    // The leader says why it cannot replay (its join reply); an older one does not.
    const std::string& why = ring->resume_refusal();
    return FailedPreconditionError(
        "consumer: resumes at epoch {} batch {} (sample {} of the epoch), but the stream it "
        "attached to is already at epoch {} sample {}: {}", resume_epoch, options.start_batch,
        resume_pos, d.epoch, at,
        !why.empty() ? why
                     : std::string("this leader does not replay the batches it missed. Start "
                                   "the leader at (or before) this position (its options "
                                   "start_epoch / start_batch)"));
  }
  // Batches per epoch under exact or sharded carving (-1: per-producer-batch carving).
  int64_t ExactBatchesPerEpoch(uint32_t scale_den) const {
    if (shm::CarvesPerProducerBatch(ring->config().flags, scale_den)) return -1;
    const uint64_t n = ring->header()->epoch_samples;
    const auto b = static_cast<uint32_t>(options.batch_size);
    return static_cast<int64_t>(shard_world > 1
                                    ? shm::ShardBatchesPerEpoch(n, b, shard_world, options.drop_last)
                                    : shm::ExactBatchesPerEpoch(n, b, options.drop_last));
  }
  // Resuming: samples of producer batch `d` before this consumer's position (0: none).
  uint64_t SkipInEpoch(const shm::SlotDesc& d) const {
    if (!resuming || d.epoch != resume_epoch || resume_pos <= epoch_pos) return 0;
    return resume_pos - epoch_pos;
  }
  // The first producer batch of epoch d.epoch for this consumer: a new epoch begins.
  void BeginEpochLocked(const shm::SlotDesc& d) {
    if (carry) {  // cannot happen: the epoch's last producer batch ends the carry
      BC_LOG(Warn, Node, "consumer: {} samples of epoch {} were still waiting for their "
             "batch when epoch {} began; dropped", carry->count, epoch, d.epoch);
      carry.reset();
    }
    shard_tail.reset();
    epoch = d.epoch;
    epochs_started += 1;
    epoch_pos = d.batch_in_epoch * ring->header()->producer_batch;
    index_in_epoch = 0;
    if (resuming && d.epoch == resume_epoch) {
      index_in_epoch = static_cast<uint64_t>(options.start_batch);
    } else {
      resuming = false;
    }
    epoch_repeats = 0;
    epoch_mix.clear();
  }
  // Counts the time a Next() waited for producer batch `d` (stats, telemetry, *info).
  void RecordWaitLocked(const shm::SlotDesc& d, int64_t waited, BatchInfo* info) {
    stats.wait_ns += waited;
    if (collector != nullptr && waited > 0) {
      const int64_t now = shm::MonotonicNs();
      collector->AddTime(telemetry::Timer::kDataWait, waited);
      collector->Span(telemetry::SpanKind::kWait, d.seq, now - waited, now);
    }
    info->wait_ns = waited;
    info->handoff_ns = waited > 0 ? shm::MonotonicNs() - d.publish_ns : 0;
  }
  // Counts a batch handed out (stats, telemetry).
  void RecordHandedOut(const shm::SlotDesc& d, const BatchInfo& info) {
    const int64_t b = info.size;
    if (collector != nullptr) {
      collector->Add(telemetry::Counter::kBatchesReceived, 1);
      collector->Add(telemetry::Counter::kSamplesReceived, b);
      collector->SetGauge(telemetry::Gauge::kBufferOccupancy, outstanding);
      if (d.scale_den != 0) {  // progressive resizing: what this consumer trains with
        collector->SetGauge(telemetry::Gauge::kImageSize, d.image_size);
        collector->SetGauge(telemetry::Gauge::kBatchSize, b);
        collector->SetGauge(telemetry::Gauge::kLrFactor, info.lr_factor);
        auto& mix = epoch_mix[d.image_size];
        mix.batches += 1;
        mix.samples += b;
        mix.batch = b;
        mix.lr = info.lr_factor;
      }
    }
    stats.batches += 1;
    stats.samples += b;
    stats.repeats += info.repeats;
    epoch_repeats += info.repeats;
    ring->RecordBatch();
  }
  // The epoch is over for this consumer: its last batch was handed out, or its last
  // producer batches gave it none (entirely skipped as bad, or a dropped remainder). Counts
  // it once; true when this consumer's epochs are complete (then it drains at once, so that
  // a batch kept after the loop never holds the other consumers back).
  bool CompleteEpochLocked(uint64_t e, uint32_t base_b) {
    if (completed_epoch == e) return finished;  // already, at its predicted last batch
    completed_epoch = e;
    stats.epochs_completed += 1;
    SetNextLocked(e + 1, 0);
    stats.repeats_per_epoch.push_back(epoch_repeats);
    BC_LOG(Info, Node, "consumer: epoch {} complete: {} batches, {} fill repeats", e,
           index_in_epoch, epoch_repeats);
    if (collector != nullptr && !epoch_mix.empty()) {
      std::string line = fmt::format("consumer b={}: epoch {}: {} batches, {} fill repeats:",
                                     base_b, e, index_in_epoch, epoch_repeats);
      for (const auto& [size, m] : epoch_mix)
        line += fmt::format(" @{} {} x {} lr x{:.3g};", size, m.batches, m.batch, m.lr);
      collector->Annotate(line);
    }
    // Done: drain now, so that a batch kept after the loop (a loop variable) never holds
    // the other consumers back; the slot stays ours until that batch is released.
    // Its last epoch: the budget's, or the stream's last (a stream of known epochs numbers
    // them 0..stream_epochs-1, a resumed or replayed epoch included), so that a caller
    // knows it is over (Python's `ended`) without asking past the end.
    const uint64_t stream_epochs = ring->header()->stream_epochs;
    if (stats.epochs_completed < epoch_budget && (stream_epochs == 0 || e + 1 < stream_epochs))
      return false;
    FinishLocked();
    return true;
  }
  // A batch asked for after Next() has returned kEndOfStream (consumer_stream.cc): names
  // both epoch counts, the consumer's and the stream's.
  Status PastTheEndLocked() const;
  std::string HeldList() const {
    std::string out;
    for (const auto& [serial, h] : held)
      out += fmt::format("{}epoch {} batch {} (producer batch {})", out.empty() ? "" : ", ",
                         h.epoch, h.index, h.seq);
    return out;
  }
};

// A batch's own row offsets of its variable-length tensors (from 0 for its first sample),
// and the rows of those whose samples are not one run in the slot (fill repeats).
struct RaggedCopies {
  std::vector<int64_t> offsets[shm::kMaxTensors];
  std::vector<uint8_t> values[shm::kMaxTensors];
};

// What keeps one consumer batch alive: its slot (a reference of the producer batch), or
// the samples it owns when they were copied.
struct BatchRef {
  std::shared_ptr<ConsumerCore> core;
  std::shared_ptr<OwnedSamples> owned;  // the batch's samples when they were copied
  std::shared_ptr<RaggedCopies> ragged; // null: no variable-length tensor
  // Further named tensors (views into the slot or `owned`; names in its descriptor); a
  // variable-length one's values, and its row offsets in `offsets` (empty views otherwise).
  uint32_t num_tensors = 0;
  TensorView tensors[shm::kMaxTensors];
  TensorView offsets[shm::kMaxTensors];
  const char* names[shm::kMaxTensors] = {};
  uint64_t seq = 0;
  uint64_t serial = 0;
  int64_t acquired_ns = 0;
  ~BatchRef() {
    if (telemetry::Collector* tc = core->collector) {
      int64_t now = shm::MonotonicNs();
      tc->AddTime(telemetry::Timer::kStep, now - acquired_ns);
      tc->Span(telemetry::SpanKind::kStep, seq, acquired_ns, now);
    }
    std::lock_guard<std::mutex> lock(core->mu);
    --core->outstanding;
    core->held.erase(serial);
    core->UnrefLocked(seq);
    core->MaybeDetachLocked();
  }
};

// This consumer's batches from producer batch `a` (appended to *out), by the carving the
// consumer uses: per producer batch (carve_offset / carve_shuffle / progressive resizing),
// exact (the default), or sharded (mode=shard).
std::vector<Piece> PerBatchPieces(const shm::SlotDesc* d, uint32_t b, uint32_t flags,
                                  uint64_t order_seed);
Status ExactPieces(ConsumerCore& c, const shm::AcquiredBatch& a, uint32_t b,
                   std::vector<Piece>* out);
Status ShardPieces(ConsumerCore& c, const shm::AcquiredBatch& a, uint32_t b,
                   std::vector<Piece>* out);

// Seals the copied pieces (OwnedSamples::Seal), read-only like the slots they came from.
Status SealOwnedPieces(const ConsumerCore& c, std::vector<Piece>* pieces);
// The views and info of `piece` of the producer batch being carved.
struct PieceViews {
  TensorView images, labels;
  const int64_t* ids = nullptr;
  uint32_t num_tensors = 0;                       // further named tensors
  TensorView tensors[shm::kMaxTensors];
  TensorView offsets[shm::kMaxTensors];           // variable-length tensors' row offsets
  const char* names[shm::kMaxTensors] = {};       // in the slot's (or the copy's) descriptor
  std::shared_ptr<RaggedCopies> ragged;           // what `offsets` (and copied rows) view
};
PieceViews ViewPiece(const ConsumerCore& c, const Piece& piece, BatchInfo* info);
// Refuses a descriptor whose named tensors do not fit a slot of slot_bytes or whose names are
// not terminated, or a variable-length tensor whose row offsets in the slot memory `data` do
// not start at 0, decrease or pass its values (a leader of another build, or memory
// corruption), before any view is made.
Status CheckTensorDescs(const shm::SlotDesc& d, const uint8_t* data, uint64_t slot_bytes);

// Where a consumer starts (consumer_start.cc).
// Attaches the ring, waiting up to `timeout_ms` for a leader to listen on `address` (a
// trainer may start before its leader); every other failure returns at once.
Result<std::unique_ptr<shm::RingConsumer>> AttachRing(const std::string& address,
                                                      const shm::ConsumerConfig& cfg,
                                                      int64_t timeout_ms);
// mode=shard: this consumer's rank and world size, from the options or RANK / WORLD_SIZE
// (h: the leader's header, for the carving check; null before attaching).
Status ResolveShard(const Options& o, const shm::StreamHeader* h, uint32_t* world,
                    uint32_t* rank);
// The start position (start_epoch / start_batch / start_run_epoch) and the epoch budget.
Status StartConsumerAt(const Options& o, const shm::StreamHeader* h, ConsumerCore* c);
// The join's resume point (a service replays what its stream has passed).
void SetJoinResume(const Options& o, uint32_t shard_world, shm::ConsumerConfig* cfg);

}  // namespace batchcast::internal
