// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Consumer: carves this consumer's batches out of the producer batches it acquires
// from the ring, and gives each slot back once every batch carved from it is released.
#include "batchcast/consumer.h"

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <cstdlib>
#include <map>
#include <mutex>

#include "core/errors.h"
#include "core/log.h"
#include "core/random.h"
#include "schedule/resize_schedule.h"
#include "schedule/resize_spec.h"
#include "transport/shm/carving.h"
#include "transport/shm/control.h"
#include "transport/shm/futex.h"
#include "transport/shm/ring_consumer.h"
#include "node/consumer_internal.h"
#include "telemetry/collector.h"
#include "telemetry/metrics.h"

namespace batchcast {
namespace internal {

struct ConsumerCore : std::enable_shared_from_this<ConsumerCore> {
  std::unique_ptr<shm::RingConsumer> ring;
  Options options;
  int rank = -1;

  std::mutex mu;
  shm::AcquiredBatch cur;              // producer batch being carved (cur.desc == null: none)
  shm::CarvePlan plan;
  uint32_t carve_b = 0;                // this consumer's batch size for `cur` (resize-scaled)
  uint32_t next_carve = 0;
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
  uint64_t first_epoch = ~0ULL;
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
  // The epoch is over for this consumer: its last batch was handed out, or its last
  // producer batches were entirely skipped as bad. Counts it; true when this consumer's
  // epochs are complete (then it drains at once, so that a batch kept after the loop never
  // holds the other consumers back; the slot stays ours until that batch is released).
  bool EndEpochLocked() {
    stats.epochs_completed += 1;
    stats.repeats_per_epoch.push_back(epoch_repeats);
    BC_LOG(Info, Node, "consumer: epoch {} complete: {} batches, {} fill repeats", epoch,
           index_in_epoch, epoch_repeats);
    if (collector != nullptr && !epoch_mix.empty()) {
      std::string line = fmt::format("consumer b={}: epoch {}: {} batches, {} fill repeats:",
                                     options.batch_size, epoch, index_in_epoch, epoch_repeats);
      for (const auto& [size, m] : epoch_mix)
        line += fmt::format(" @{} {} x {} lr x{:.3g};", size, m.batches, m.batch, m.lr);
      collector->Annotate(line);
    }
    if (stats.epochs_completed < options.epochs) return false;
    FinishLocked();
    return true;
  }
  std::string HeldList() const {
    std::string out;
    for (const auto& [serial, h] : held)
      out += fmt::format("{}epoch {} batch {} (producer batch {})", out.empty() ? "" : ", ",
                         h.epoch, h.index, h.seq);
    return out;
  }
};

struct BatchRef {
  std::shared_ptr<ConsumerCore> core;
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


telemetry::Collector* ConsumerAccess::GetCollector(const Consumer& c) {
  std::lock_guard<std::mutex> lock(c.core_->mu);
  return c.core_->collector;
}

const shm::SegmentView* ConsumerAccess::Segment(const Consumer& c) {
  return c.core_->ring ? &c.core_->ring->view() : nullptr;
}

void ConsumerAccess::SetCollector(Consumer& c, telemetry::Collector* collector) {
  std::lock_guard<std::mutex> lock(c.core_->mu);
  c.core_->collector = collector;
}

}  // namespace internal

Batch::Batch() = default;
Batch::~Batch() { Release(); }
Batch::Batch(Batch&& o) noexcept
    : ref_(std::move(o.ref_)), images_(o.images_), labels_(o.labels_), ids_(o.ids_), info_(o.info_) {}
Batch& Batch::operator=(Batch&& o) noexcept {
  if (this != &o) {
    Release();
    ref_ = std::move(o.ref_);
    images_ = o.images_;
    labels_ = o.labels_;
    ids_ = o.ids_;
    info_ = o.info_;
  }
  return *this;
}
void Batch::Release() {
  ref_.reset();
  images_ = TensorView();
  labels_ = TensorView();
  ids_ = nullptr;
}
std::shared_ptr<void> Batch::KeepAlive() const { return ref_; }

namespace {

void DefaultErrorHandler(const Status& st) {
  BC_LOG(Error, Node, "consumer: {}", st.ToString());
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

}  // namespace

Result<std::unique_ptr<Consumer>> Consumer::Attach(const std::string& address,
                                                   const Options& options, int rank,
                                                   const std::string& name) {
  BC_RETURN_IF_ERROR(ValidateOptions(options));
  shm::ConsumerConfig cfg;
  cfg.batch_size = static_cast<uint32_t>(options.batch_size);
  cfg.buffer_depth = static_cast<uint32_t>(options.buffer_depth);
  cfg.flags = (options.carve_offset ? uint32_t(shm::kCarveOffset) : 0u) |
              (options.carve_shuffle ? uint32_t(shm::kCarveShuffle) : 0u);
  cfg.order_seed = HashCombine(options.seed, static_cast<uint64_t>(rank + 1), 0xc0ffee);
  cfg.rank = rank;
  cfg.name = name;
  cfg.heartbeat_ms = options.heartbeat_ms;
  cfg.allowed_leader_uid = options.allowed_leader_uid;
  auto ring = shm::RingConsumer::Attach(address, cfg);
  if (!ring.ok()) return ring.status();
  const shm::StreamHeader* h = (*ring)->header();
  if (h->stream_epochs > 0 && options.epochs < kEpochsUntilStreamEnds &&
      static_cast<uint64_t>(options.epochs) > h->stream_epochs)
    return FailedPreconditionError(
        "this consumer asks for {} epochs but the leader at {} produces {}: it would end early "
        "with a silently shorter run. Ask for at most {} epochs, or start the leader with "
        "epochs >= {}", options.epochs, shm::DisplayAddress(address), h->stream_epochs,
        h->stream_epochs, options.epochs);
  std::unique_ptr<Consumer> c(new Consumer());
  c->core_ = std::make_shared<internal::ConsumerCore>();
  c->core_->ring = std::move(ring).value();
  c->core_->options = options;
  c->core_->rank = rank;
  c->core_->error_handler = DefaultErrorHandler;
  return c;
}

Consumer::~Consumer() {
  if (!core_) return;
  std::lock_guard<std::mutex> lock(core_->mu);
  // Batches still alive keep the mapping and their slots: the leader stops addressing
  // this consumer now and reuses its slots only after the last view is released.
  core_->FinishLocked();
}

Status Consumer::Detach() {
  std::lock_guard<std::mutex> lock(core_->mu);
  core_->FinishLocked();
  return Status::Ok();
}

Status Consumer::status() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  return core_->status;
}

ConsumerStats Consumer::stats() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  return core_->stats;
}

void Consumer::SetErrorHandler(std::function<void(const Status&)> handler) {
  std::lock_guard<std::mutex> lock(core_->mu);
  core_->error_handler = std::move(handler);
}

namespace {

// Batches per epoch of a consumer of base batch `b` under the resize schedule in `h`.
std::vector<int64_t> ResizeBatchesPerEpoch(const shm::StreamHeader* h, int64_t b) {
  auto spec = schedule::ParseResizeSpec(std::string(h->resize_spec, strnlen(h->resize_spec,
                                                                           sizeof(h->resize_spec))));
  schedule::ResizeScheduleParams params;
  if (spec.ok()) params.spec = *spec;
  params.num_samples = static_cast<int64_t>(h->epoch_samples);
  params.total_epochs = static_cast<int>(h->stream_epochs);
  params.base_batch_size = h->producer_batch;
  params.carve_unit = h->max_consumer_batch;  // as the leader cuts its producer batches
  auto s = spec.ok() ? schedule::ResizeSchedule::Create(params)
                     : Result<std::unique_ptr<schedule::ResizeSchedule>>(spec.status());
  auto summaries = s.ok() ? (*s)->Summaries() : Result<std::vector<schedule::EpochSummary>>(s.status());
  if (!summaries.ok()) {
    BC_LOG(Warn, Node, "consumer: cannot derive batches per epoch from the leader's resize spec "
           "'{}': {}", h->resize_spec, summaries.status().message());
    return {};
  }
  std::vector<int64_t> out;
  for (const auto& summary : *summaries) out.push_back((*s)->ConsumerBatches(summary, 0, b));
  return out;
}

}  // namespace

int64_t Consumer::BatchesPerEpoch() const {
  uint64_t epoch = 0;
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    if (core_->epoch != ~0ULL) epoch = core_->epoch;
  }
  return BatchesPerEpoch(epoch);
}

int64_t Consumer::BatchesPerEpoch(uint64_t epoch) const {
  const shm::StreamHeader* h = core_->ring->header();
  if (h->resize_spec[0] != '\0') {
    auto& c = *core_;
    std::lock_guard<std::mutex> lock(c.resize_mu);
    if (!c.resize_derived) {
      c.resize_batches = ResizeBatchesPerEpoch(h, c.options.batch_size);
      c.resize_derived = true;
    }
    return epoch < c.resize_batches.size() ? c.resize_batches[epoch] : 0;
  }
  if (h->stream_epochs > 0 && epoch >= h->stream_epochs) return 0;
  int64_t n = static_cast<int64_t>(h->epoch_samples);
  int64_t p = h->producer_batch;
  int64_t b = core_->options.batch_size;
  if (p <= 0) return 0;
  int64_t full = n / p, rem = n % p;
  return full * ((p + b - 1) / b) + (rem + b - 1) / b;
}

namespace {

// The image view and repeat count of carve `carve` of producer batch `d`.
void FillImages(const shm::SlotDesc* d, const uint8_t* data, const shm::CarvePlan& plan,
                uint32_t carve, uint32_t b, TensorView* images, BatchInfo* info) {
  uint64_t start = plan.offset + uint64_t(carve) * b;
  // Positions >= n + offset repeat samples this consumer already got from this batch.
  uint64_t fresh_end = uint64_t(d->num_samples) + plan.offset;
  uint64_t end = start + b;
  info->repeats = static_cast<int32_t>(end > fresh_end ? end - std::max(start, fresh_end) : 0);
  info->size = b;
  info->image_size = d->image_size;
  info->lr_factor = d->lr_factor;
  info->channels_last = d->layout == 1;
  TensorView img;
  img.data = const_cast<uint8_t*>(data + d->images_offset + start * d->sample_bytes);
  img.dtype = static_cast<DType>(d->dtype);
  img.ndim = 4;
  img.shape[0] = b;
  if (d->layout == 1) {
    img.shape[1] = d->height, img.shape[2] = d->width, img.shape[3] = d->channels;
  } else {
    img.shape[1] = d->channels, img.shape[2] = d->height, img.shape[3] = d->width;
  }
  img.nbytes = b * d->sample_bytes;
  *images = img;
}

}  // namespace

Status Consumer::Next(Batch* out) {
  auto& c = *core_;
  out->Release();  // before locking: releasing takes the lock itself
  std::unique_lock<std::mutex> lock(c.mu);
  if (c.in_next)
    return FailedPreconditionError("consumer: Next() is already running in another thread; "
                                   "call it from one thread at a time");
  if (!c.status.ok()) return c.status;
  if (c.finished) {
    c.MaybeDetachLocked();
    return Status(StatusCode::kEndOfStream, "this consumer's epochs are complete");
  }
  if (c.outstanding >= c.options.buffer_depth)
    return FailedPreconditionError(
        "consumer holds {} unreleased batches (buffer_depth={}): {}. Release one (destroy the "
        "Batch or its tensors; keep a copy, e.g. tensor.clone(), of what you need longer) "
        "before asking for the next, or attach with a larger buffer_depth",
        c.outstanding, c.options.buffer_depth, c.HeldList());
  auto fail = [&](Status st) {
    if (c.finished) {  // Detach() or the destructor from another thread while we waited
      c.MaybeDetachLocked();
      return Status(StatusCode::kEndOfStream, "this consumer was detached");
    }
    if (st.code() == StatusCode::kEndOfStream) {
      c.FinishLocked();
      const shm::StreamHeader* h = c.ring->header();
      // A finite stream that ends before a late joiner's epochs are done (it was admitted
      // after the stream started, past the late-join window near the end): a clear error,
      // never a silently shorter run. (A consumer there from the start may legitimately
      // get fewer epochs' batches, e.g. a shard rank with nothing in a short last batch.)
      if (h->stream_epochs > 0 && c.options.epochs < kEpochsUntilStreamEnds &&
          c.start_seq > 0 && c.stats.epochs_completed < c.options.epochs) {
        c.status = FailedPreconditionError(
            "the stream ended after this consumer completed {} of the {} epochs it asked for: "
            "it was admitted {} a stream of {} epochs, after the late-join window. Attach "
            "before the stream starts or within the window, or ask for fewer epochs",
            c.stats.epochs_completed, c.options.epochs,
            c.first_epoch == ~0ULL ? std::string("after the last epoch began, in")
                                   : fmt::format("at epoch {} of", c.first_epoch),
            h->stream_epochs);
        return c.status;
      }
    } else {
      c.status = st;
    }
    return st;
  };
  // Blocking calls run without the lock, so releases (a tensor deleter, another thread)
  // never wait behind a Next() that waits for data.
  auto unlocked = [&](auto&& fn) {
    c.in_next = true;
    lock.unlock();
    auto r = fn();
    lock.lock();
    c.in_next = false;
    return r;
  };
  if (!c.admitted) {
    // No deadline: a late joiner may wait for the next epoch however long it is; the wait
    // fails only if the leader fails, ends, dies or stops beating.
    auto start = unlocked([&] { return c.ring->WaitAdmitted(-1); });
    if (!start.ok()) return fail(start.status());
    if (c.finished) return fail(Status::Ok());
    c.admitted = true;
    c.start_seq = *start;
  }
  const uint32_t base_b = static_cast<uint32_t>(c.options.batch_size);
  while (c.cur.desc == nullptr) {
    int64_t waited = 0;
    auto acquired = unlocked([&] { return c.ring->Acquire(&waited); });
    if (!acquired.ok()) return fail(acquired.status());
    const shm::AcquiredBatch a = *acquired;
    const shm::SlotDesc* d = a.desc;
    c.slot_refs[a.seq] = internal::ConsumerCore::SlotRef{a, 1};
    if (c.finished) {  // detached while we waited: give it back unread
      c.UnrefLocked(a.seq);
      return fail(Status::Ok());
    }
    if (c.first_epoch == ~0ULL) c.first_epoch = d->epoch;
    if (d->epoch >= c.first_epoch + static_cast<uint64_t>(c.options.epochs)) {
      c.UnrefLocked(a.seq);
      c.FinishLocked();
      return Status(StatusCode::kEndOfStream, "this consumer's epochs are complete");
    }
    if (d->epoch != c.epoch) {
      c.epoch = d->epoch;
      c.index_in_epoch = 0;
      c.epoch_repeats = 0;
      c.epoch_mix.clear();
    }
    // Progressive resizing scales this consumer's batch with the batch's image size.
    c.carve_b = shm::ScaledConsumerBatch(base_b, d->scale_num, d->scale_den, d->scale_cap);
    c.plan = shm::PlanCarves(d->seq, d->num_samples, d->tail, c.carve_b,
                             c.ring->config().flags, c.ring->config().order_seed);
    c.next_carve = 0;
    c.stats.wait_ns += waited;
    if (c.collector != nullptr && waited > 0) {
      int64_t now = shm::MonotonicNs();
      c.collector->AddTime(telemetry::Timer::kDataWait, waited);
      c.collector->Span(telemetry::SpanKind::kWait, d->seq, now - waited, now);
    }
    out->info_.wait_ns = waited;
    out->info_.handoff_ns = waited > 0 ? shm::MonotonicNs() - d->publish_ns : 0;
    if (c.plan.count == 0) {  // every sample of this producer batch was skipped
      const bool ends_epoch = (d->flags & shm::kLastInEpoch) != 0 && c.index_in_epoch > 0;
      c.UnrefLocked(a.seq);
      if (ends_epoch && c.EndEpochLocked())
        return Status(StatusCode::kEndOfStream, "this consumer's epochs are complete");
      continue;
    }
    c.cur = a;
  }
  // Evicted (stopped past the heartbeat) while carving: say so now rather than finish a
  // producer batch the others have moved on from.
  if (Status addressed = c.ring->CheckAddressed(); !addressed.ok()) return fail(addressed);
  const shm::SlotDesc* d = c.cur.desc;
  const uint8_t* data = c.cur.data;
  uint32_t carve = c.plan.order[c.next_carve++];
  const uint32_t b = c.carve_b;
  FillImages(d, data, c.plan, carve, b, &out->images_, &out->info_);
  out->info_.lr_factor = shm::ConsumerLrFactor(base_b, b, d->lr_rule, d->lr_factor);
  uint64_t start = c.plan.offset + uint64_t(carve) * b;
  out->labels_.data = const_cast<uint8_t*>(data + d->labels_offset + start * sizeof(int64_t));
  out->labels_.dtype = DType::kInt64;
  out->labels_.ndim = 1;
  out->labels_.shape[0] = b;
  out->labels_.nbytes = b * sizeof(int64_t);
  out->ids_ = reinterpret_cast<const int64_t*>(data + d->ids_offset) + start;
  out->info_.epoch = d->epoch;
  out->info_.producer_seq = d->seq;
  out->info_.producer_batch = d->batch_in_epoch;
  out->info_.index = c.index_in_epoch++;
  bool last_carve = c.next_carve == c.plan.count;
  out->info_.last_in_epoch = last_carve && (d->flags & shm::kLastInEpoch);
  c.slot_refs[d->seq].refs += 1;
  ++c.outstanding;
  auto ref = std::make_shared<internal::BatchRef>();
  ref->core = core_;
  ref->seq = d->seq;
  ref->serial = c.next_serial++;
  c.held[ref->serial] = internal::ConsumerCore::Held{d->epoch, out->info_.index, d->seq};
  ref->acquired_ns = shm::MonotonicNs();
  out->ref_ = std::move(ref);
  if (c.collector != nullptr) {
    c.collector->Add(telemetry::Counter::kBatchesReceived, 1);
    c.collector->Add(telemetry::Counter::kSamplesReceived, b);
    c.collector->SetGauge(telemetry::Gauge::kBufferOccupancy, c.outstanding);
    if (d->scale_den != 0) {  // progressive resizing: what this consumer trains with
      c.collector->SetGauge(telemetry::Gauge::kImageSize, d->image_size);
      c.collector->SetGauge(telemetry::Gauge::kBatchSize, b);
      c.collector->SetGauge(telemetry::Gauge::kLrFactor, out->info_.lr_factor);
      auto& mix = c.epoch_mix[d->image_size];
      mix.batches += 1;
      mix.samples += b;
      mix.batch = b;
      mix.lr = out->info_.lr_factor;
    }
  }
  c.stats.batches += 1;
  c.stats.samples += b;
  c.stats.repeats += out->info_.repeats;
  c.epoch_repeats += out->info_.repeats;
  c.ring->RecordBatch();
  if (last_carve) {
    c.UnrefLocked(d->seq);  // the carving reference
    c.cur = shm::AcquiredBatch();
  }
  if (out->info_.last_in_epoch) c.EndEpochLocked();
  return Status::Ok();
}

Consumer::Iterator Consumer::begin() {
  Iterator it(this, false);
  ++it;
  return it;
}

Consumer::Iterator& Consumer::Iterator::operator++() {
  batch_.Release();
  Status st = consumer_->Next(&batch_);
  if (!st.ok()) {
    done_ = true;
    if (st.code() != StatusCode::kEndOfStream) {
      std::function<void(const Status&)> handler;
      {
        std::lock_guard<std::mutex> lock(consumer_->core_->mu);
        handler = consumer_->core_->error_handler;
      }
      if (handler) handler(st);
    }
  }
  return *this;
}

}  // namespace batchcast
