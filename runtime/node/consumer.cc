// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Consumer: carves this consumer's batches out of the producer batches it acquires
// from the ring, and gives each slot back once every batch carved from it is released.
#include "batchcast/consumer.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
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
#include "node/consumer_core.h"
#include "node/consumer_internal.h"
#include "telemetry/collector.h"
#include "telemetry/metrics.h"

namespace batchcast {
namespace internal {

struct BatchRef {
  std::shared_ptr<ConsumerCore> core;
  std::shared_ptr<OwnedSamples> owned;  // the batch's samples when they were copied
  // Further named tensors (views into the slot or `owned`; names in its descriptor).
  uint32_t num_tensors = 0;
  TensorView tensors[shm::kMaxTensors];
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


telemetry::Collector* ConsumerAccess::GetCollector(const Consumer& c) {
  std::lock_guard<std::mutex> lock(c.core_->mu);
  return c.core_->collector;
}

const shm::SegmentView* ConsumerAccess::Segment(const Consumer& c) {
  return c.core_->ring ? &c.core_->ring->view() : nullptr;
}

Status ConsumerAccess::CheckDeviceCarving(const Consumer& consumer) {
  const internal::ConsumerCore& c = *consumer.core_;
  if (!c.ring) return FailedPreconditionError("gpu: the consumer has no mapped ring; attach it first");
  const shm::StreamHeader* h = c.ring->header();
  // Per-producer-batch carving (carve_offset, carve_shuffle, progressive resizing) never joins.
  if ((c.ring->config().flags & (shm::kCarveOffset | shm::kCarveShuffle)) || h->resize_spec[0])
    return Status::Ok();
  const auto b = static_cast<uint32_t>(c.options.batch_size);
  const char* why = c.shard_world > 1 ? "mode=shard collects each epoch's tail batch"
                    : c.options.pad_last ? "pad_last pads the epoch's last batch"
                    : (b == 0 || h->producer_batch % b != 0)
                        ? "batch_size does not divide the producer batch, so batches span two"
                        : nullptr;
  if (why == nullptr) return Status::Ok();
  return FailedPreconditionError(
      "gpu: this consumer (batch_size {}, producer batch {}) would get batches joined in private "
      "host memory, which the device path cannot map: {}. Use a batch_size that divides the "
      "producer batch (or a producer_batch that is a multiple of it), no pad_last and "
      "mode=replicate, or carve_offset=true (per-producer-batch carving with fill repeats), "
      "or gpu=off (docs/gpu.md)", b, h->producer_batch, why);
}

void ConsumerAccess::OwnTelemetry(Consumer& c, std::shared_ptr<void> owned,
                                  std::function<Status()> finish) {
  std::lock_guard<std::mutex> lock(c.core_->mu);
  c.core_->owned_telemetry = std::move(owned);
  c.core_->finish_telemetry = std::move(finish);
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

int Batch::num_tensors() const { return ref_ ? static_cast<int>(ref_->num_tensors) : 0; }

const char* Batch::tensor_name(int i) const {
  if (!ref_ || i < 0 || uint32_t(i) >= ref_->num_tensors) return nullptr;
  return ref_->names[i];
}

TensorView Batch::tensor(const char* name) const {
  if (!ref_ || name == nullptr) return TensorView();
  const std::string_view n(name);
  // No images (a model stage's keep_input=false, a Producer's dict batches without them): no
  // such tensor, as for any other name the batch lacks.
  if (n == "images") return images_.nbytes > 0 || ref_->num_tensors == 0 ? images_ : TensorView();
  if (n == "labels") return labels_;
  if (n == "sample_ids") {
    TensorView v;
    v.data = const_cast<int64_t*>(ids_);
    v.dtype = DType::kInt64;
    v.ndim = 1;
    v.shape[0] = info_.size;
    v.nbytes = size_t(info_.size) * sizeof(int64_t);
    return v;
  }
  for (uint32_t i = 0; i < ref_->num_tensors; ++i)
    if (n == ref_->names[i]) return ref_->tensors[i];
  return TensorView();
}

namespace {

void DefaultErrorHandler(const Status& st) {
  BC_LOG(Error, Node, "consumer: {}", st.ToString());
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

// Attaches the ring, waiting up to `timeout_ms` for a leader to listen on `address` (a
// trainer may start before its leader); every other failure returns at once.
Result<std::unique_ptr<shm::RingConsumer>> AttachRing(const std::string& address,
                                                      const shm::ConsumerConfig& cfg,
                                                      int64_t timeout_ms) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  auto pause = std::chrono::milliseconds(5);
  for (int attempt = 1;; ++attempt) {
    auto ring = shm::RingConsumer::Attach(address, cfg);
    if (ring.ok() || !shm::NoListener(ring.status())) return ring;
    if (std::chrono::steady_clock::now() >= deadline) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                          start).count();
      return MakeError(StatusCode::kUnavailable,
                       "consumer: waited {:.1f}s ({} attempts, connect_timeout={}ms) for a "
                       "Batchcast leader at {}: {}. Start the leader (or batchcast serve) "
                       "first, check the address, or raise connect_timeout",
                       waited, attempt, timeout_ms, shm::DisplayAddress(address),
                       ring.status().message());
    }
    std::this_thread::sleep_for(pause);  // a retry interval, not synchronisation
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

// mode=shard: this consumer's rank and world size, from the options or RANK / WORLD_SIZE
// (h: the leader's header, for the carving check; null before attaching).
Status ResolveShard(const Options& o, const shm::StreamHeader* h, uint32_t* world,
                    uint32_t* rank) {
  *world = 1, *rank = 0;
  if (o.mode != "shard") {
    if (o.rank >= 0 || o.world_size > 0)
      return InvalidArgumentError(
          "options 'rank'/'world_size' are set but mode={}: they only choose a shard. Set "
          "mode=shard for data-parallel training, or unset them", o.mode);
    return Status::Ok();
  }
  auto from_env = [](const char* var, int given, int* out) -> Status {
    if (given >= 0) {
      *out = given;
      return Status::Ok();
    }
    const char* v = std::getenv(var);
    char* end = nullptr;
    const long x = v == nullptr ? -1 : std::strtol(v, &end, 10);
    if (v == nullptr || *v == '\0' || *end != '\0' || x < 0 || x > (1L << 30))
      return InvalidArgumentError(
          "mode=shard needs this consumer's rank and world size: set options 'rank' and "
          "'world_size', or RANK and WORLD_SIZE in the environment (torchrun and batchcast-run "
          "set them); {} is {}", var, v == nullptr ? "not set" : fmt::format("'{}'", v));
    *out = static_cast<int>(x);
    return Status::Ok();
  };
  int w = 0, r = 0;
  BC_RETURN_IF_ERROR(from_env("WORLD_SIZE", o.world_size > 0 ? o.world_size : -1, &w));
  BC_RETURN_IF_ERROR(from_env("RANK", o.rank, &r));
  if (w < 1 || r >= w)
    return InvalidArgumentError("mode=shard: rank {} is not in a world of {} ranks", r, w);
  if (w > 1 && (o.carve_offset || o.carve_shuffle || (h != nullptr && h->resize_spec[0])))
    return InvalidArgumentError(
        "mode=shard cuts the epoch into global batches of world_size x batch_size and cannot "
        "be combined with {}; unset it", h != nullptr && h->resize_spec[0] ? "the leader's progressive "
        "resizing" : "carve_offset / carve_shuffle");
  *world = static_cast<uint32_t>(w), *rank = static_cast<uint32_t>(r);
  return Status::Ok();
}

// Resume: the sample of the epoch's global order this consumer starts at.
uint64_t ResumeSample(const Options& o, uint32_t shard_world) {
  return static_cast<uint64_t>(o.start_batch) * static_cast<uint64_t>(o.batch_size) *
         shard_world;
}

// Resume (options start_epoch / start_batch) and this consumer's epoch budget.
Status StartAt(const Options& o, const shm::StreamHeader* h, internal::ConsumerCore* c) {
  c->epoch_budget = o.epochs >= kEpochsUntilStreamEnds ? o.epochs : o.epochs - o.start_epoch;
  c->next_position = {static_cast<uint64_t>(o.start_epoch), static_cast<uint64_t>(o.start_batch)};
  if (o.start_epoch == 0 && o.start_batch == 0) return Status::Ok();
  if (c->epoch_budget <= 0)
    return InvalidArgumentError("option 'start_epoch' ({}) must be below 'epochs' ({}): epochs "
                                "counts the whole run, start_epoch where it resumes",
                                o.start_epoch, o.epochs);
  if (o.start_batch > 0 && (o.carve_offset || o.carve_shuffle || h->resize_spec[0]))
    return InvalidArgumentError(
        "option 'start_batch' counts exact batches of batch_size, but {} carves each producer "
        "batch on its own; resume these at an epoch start (start_batch=0)",
        h->resize_spec[0] ? "progressive resizing" : "carve_offset / carve_shuffle");
  c->resuming = true;
  c->resume_epoch = static_cast<uint64_t>(o.start_epoch);
  c->resume_pos = ResumeSample(o, c->shard_world);
  return Status::Ok();
}

// The join's resume point (a service replays what its stream has passed).
void SetJoinResume(const Options& o, uint32_t shard_world, shm::ConsumerConfig* cfg) {
  cfg->resumes = o.start_epoch != 0 || o.start_batch != 0;
  cfg->resume_epoch = static_cast<uint64_t>(o.start_epoch);
  cfg->resume_sample = ResumeSample(o, shard_world);
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
  uint32_t shard_world = 1, shard_rank = 0;
  BC_RETURN_IF_ERROR(ResolveShard(options, nullptr, &shard_world, &shard_rank));
  SetJoinResume(options, shard_world, &cfg);
  BC_ASSIGN_OR_RETURN(std::unique_ptr<shm::RingConsumer> attached,
                      AttachRing(address, cfg, options.connect_timeout));
  Result<std::unique_ptr<shm::RingConsumer>> ring(std::move(attached));
  const shm::StreamHeader* h = (*ring)->header();
  if (h->stream_epochs > 0 && options.epochs < kEpochsUntilStreamEnds &&
      static_cast<uint64_t>(options.epochs) > h->stream_epochs)
    return FailedPreconditionError(
        "this consumer asks for {} epochs but the leader at {} produces {}: it would end early "
        "with a silently shorter run. Ask for at most {} epochs, or start the leader with "
        "epochs >= {}", options.epochs, shm::DisplayAddress(address), h->stream_epochs,
        h->stream_epochs, options.epochs);
  if (options.drop_last && (options.carve_offset || options.carve_shuffle || h->resize_spec[0]))
    return InvalidArgumentError(
        "option 'drop_last' needs exact carving, but {} carves each producer batch on its own "
        "(fill repeats complete its last batch; there is no partial batch to drop). Unset "
        "drop_last, or {}", h->resize_spec[0] ? "the leader's progressive-resizing schedule"
                                              : "carve_offset / carve_shuffle",
        h->resize_spec[0] ? "attach to a leader without resize" : "unset carve_offset and "
                                                                  "carve_shuffle");
  BC_RETURN_IF_ERROR(ResolveShard(options, h, &shard_world, &shard_rank));
  std::unique_ptr<Consumer> c(new Consumer());
  c->core_ = std::make_shared<internal::ConsumerCore>();
  c->core_->address = address;
  c->core_->shard_world = shard_world;
  c->core_->shard_rank = shard_rank;
  BC_RETURN_IF_ERROR(StartAt(options, h, c->core_.get()));
  c->core_->ring = std::move(ring).value();
  c->core_->options = options;
  c->core_->rank = rank;
  c->core_->error_handler = DefaultErrorHandler;
  return c;
}

namespace internal {

Status ConsumerAccess::StartAt(Consumer& consumer, StreamPosition position) {
  internal::ConsumerCore& c = *consumer.core_;
  if (const int64_t n = consumer.BatchesPerEpoch(position.epoch);
      n > 0 && position.batch >= static_cast<uint64_t>(n))
    return InvalidArgumentError(
        "consumer: position epoch {} batch {} does not exist: that epoch has {} batches of "
        "batch_size {} (batches 0..{}); a position saved by this consumer's options is always "
        "inside its epoch", position.epoch, position.batch, n, c.options.batch_size, n - 1);
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.in_next || c.admitted || c.first_epoch != ~0ULL || c.finished)
    return FailedPreconditionError(
        "consumer: cannot move to epoch {} batch {}: it has already {} (next: epoch {} batch "
        "{}), and a shared stream does not rewind or jump for one consumer. Load a saved "
        "position before the first batch (right after attaching), or attach a new consumer "
        "with it (start_epoch / start_batch; Python: Consumer(..., **state))",
        position.epoch, position.batch, c.finished ? "left the stream" : "asked for batches",
        c.next_position.epoch, c.next_position.batch);
  Options o = c.options;
  o.start_epoch = static_cast<int>(position.epoch);
  o.start_batch = static_cast<int64_t>(position.batch);
  BC_RETURN_IF_ERROR(ValidateOptions(o));
  const auto budget = c.epoch_budget;
  const auto next = c.next_position;
  c.resuming = false;
  if (Status st = batchcast::StartAt(o, c.ring->header(), &c); !st.ok()) {
    c.epoch_budget = budget;  // unchanged: still at its attach position
    c.next_position = next;
    c.resuming = c.options.start_epoch != 0 || c.options.start_batch != 0;
    return st;
  }
  if ((c.ring->leader_features() & shm::kLeaderReplaysResume) != 0) {
    // The leader settles a resume point at admission (it may replay what its stream has
    // passed): join again with it. Nothing was received yet, so nothing is lost.
    shm::ConsumerConfig cfg = c.ring->config();
    SetJoinResume(o, c.shard_world, &cfg);
    auto ring = AttachRing(c.address, cfg, o.connect_timeout);
    if (!ring.ok()) {
      c.status = ring.status().WithContext("consumer: joining again at the loaded position");
      return c.status;
    }
    c.ring = std::move(ring).value();
  }
  c.options = o;
  return Status::Ok();
}

}  // namespace internal

Consumer::~Consumer() {
  if (!core_) return;
  std::lock_guard<std::mutex> lock(core_->mu);
  // Batches still alive keep the mapping and their slots: the leader stops addressing
  // this consumer now and reuses its slots only after the last view is released.
  core_->FinishLocked();
}

Status Consumer::Detach() {
  std::function<Status()> finish;
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->FinishLocked();
    finish = std::move(core_->finish_telemetry);  // once: the files are written now
    core_->finish_telemetry = nullptr;
  }
  return finish ? finish() : Status::Ok();
}

Status Consumer::status() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  return core_->status;
}

StreamPosition Consumer::Position() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  return core_->next_position;
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
  const int64_t n = static_cast<int64_t>(h->epoch_samples);
  const int64_t p = h->producer_batch;
  const int64_t b = core_->options.batch_size;
  if (p <= 0) return 0;
  if (const int64_t exact = core_->ExactBatchesPerEpoch(0); exact >= 0) return exact;
  const int64_t full = n / p, rem = n % p;
  return full * ((p + b - 1) / b) + (rem + b - 1) / b;
}

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
          c.start_seq > 0 && c.stats.epochs_completed < c.epoch_budget) {
        c.status = FailedPreconditionError(
            "the stream ended after this consumer completed {} of the {} epochs it asked for: "
            "it was admitted {} a stream of {} epochs, after the late-join window. Attach "
            "before the stream starts or within the window, or ask for fewer epochs",
            c.stats.epochs_completed, c.epoch_budget,
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
    if (c.resuming && c.first_epoch == ~0ULL) {
      if (d->epoch < c.resume_epoch) {  // a shared stream before this consumer's position
        c.UnrefLocked(a.seq);
        continue;
      }
      if (Status st = c.CheckResumePoint(*d); !st.ok()) {
        c.UnrefLocked(a.seq);
        return fail(st);
      }
    }
    if (Status st = internal::CheckTensorDescs(*d, c.ring->header()->slot_bytes); !st.ok()) {
      c.UnrefLocked(a.seq);
      return fail(st);
    }
    if (c.first_epoch == ~0ULL) c.first_epoch = d->epoch;
    // Epochs counted, not numbered: a resumed trial's replayed epoch may be followed by a
    // later epoch of the stream (Admission::SettleResumers).
    if (d->epoch != c.epoch && c.epochs_started >= c.epoch_budget) {
      c.UnrefLocked(a.seq);
      c.FinishLocked();
      return Status(StatusCode::kEndOfStream, "this consumer's epochs are complete");
    }
    if (d->epoch != c.epoch) {
      if (c.carry) {  // cannot happen: the epoch's last producer batch ends the carry
        BC_LOG(Warn, Node, "consumer: {} samples of epoch {} were still waiting for their "
               "batch when epoch {} began; dropped", c.carry->count, c.epoch, d->epoch);
        c.carry.reset();
      }
      c.shard_tail.reset();
      c.epoch = d->epoch;
      c.epochs_started += 1;
      c.epoch_pos = d->batch_in_epoch * c.ring->header()->producer_batch;
      c.index_in_epoch = 0;
      if (c.resuming && d->epoch == c.resume_epoch) {
        c.index_in_epoch = static_cast<uint64_t>(c.options.start_batch);
      } else {
        c.resuming = false;
      }
      c.epoch_repeats = 0;
      c.epoch_mix.clear();
    }
    c.stats.wait_ns += waited;
    if (c.collector != nullptr && waited > 0) {
      int64_t now = shm::MonotonicNs();
      c.collector->AddTime(telemetry::Timer::kDataWait, waited);
      c.collector->Span(telemetry::SpanKind::kWait, d->seq, now - waited, now);
    }
    out->info_.wait_ns = waited;
    out->info_.handoff_ns = waited > 0 ? shm::MonotonicNs() - d->publish_ns : 0;
    c.pieces.clear();
    c.next_piece = 0;
    const uint32_t flags = c.ring->config().flags;
    if (shm::CarvesPerProducerBatch(flags, d->scale_den)) {
      // Progressive resizing scales this consumer's batch with the batch's image size.
      const uint32_t b = shm::ScaledConsumerBatch(base_b, d->scale_num, d->scale_den,
                                                  d->scale_cap);
      c.pieces = internal::PerBatchPieces(d, b, flags, c.ring->config().order_seed);
    } else if (Status st = c.shard_world > 1 ? internal::ShardPieces(c, a, base_b, &c.pieces)
                                             : internal::ExactPieces(c, a, base_b, &c.pieces);
               !st.ok()) {
      c.UnrefLocked(a.seq);
      return fail(st);
    }
    if (c.pieces.empty()) {  // carried on, dropped, or every sample was skipped
      // Read the descriptor before the slot goes back: the leader may reuse it at once.
      const bool ends_epoch = (d->flags & shm::kLastInEpoch) != 0;
      const uint64_t epoch = d->epoch;
      c.UnrefLocked(a.seq);
      if (ends_epoch && c.CompleteEpochLocked(epoch, base_b))
        return Status(StatusCode::kEndOfStream, "this consumer's epochs are complete");
      continue;
    }
    c.cur = a;
  }
  // Evicted (stopped past the heartbeat) while carving: say so now rather than finish a
  // producer batch the others have moved on from.
  if (Status addressed = c.ring->CheckAddressed(); !addressed.ok()) return fail(addressed);
  const shm::SlotDesc* d = c.cur.desc;
  const internal::Piece piece = c.pieces[c.next_piece++];
  const bool last_piece = c.next_piece == c.pieces.size();
  const internal::PieceViews views = internal::ViewPiece(c, piece, &out->info_);
  out->images_ = views.images;
  out->labels_ = views.labels;
  out->ids_ = views.ids;
  out->info_.lr_factor = shm::ConsumerLrFactor(base_b, piece.size, d->lr_rule, d->lr_factor);
  out->info_.index = c.index_in_epoch++;
  // The epoch's last batch: the last piece of its last producer batch, or, for exact and
  // sharded carving, the count the stream definition gives (with drop_last the dropped
  // remainder may arrive in a later producer batch).
  const int64_t expected = c.ExactBatchesPerEpoch(d->scale_den);
  out->info_.last_in_epoch = (last_piece && (d->flags & shm::kLastInEpoch)) ||
                             (expected > 0 && out->info_.index + 1 == uint64_t(expected));
  c.slot_refs[d->seq].refs += 1;
  ++c.outstanding;
  auto ref = std::make_shared<internal::BatchRef>();
  ref->core = core_;
  ref->owned = piece.owned;
  ref->num_tensors = views.num_tensors;
  std::copy_n(views.tensors, views.num_tensors, ref->tensors);
  std::copy_n(views.names, views.num_tensors, ref->names);
  ref->seq = d->seq;
  ref->serial = c.next_serial++;
  c.held[ref->serial] = internal::ConsumerCore::Held{d->epoch, out->info_.index, d->seq};
  ref->acquired_ns = shm::MonotonicNs();
  out->ref_ = std::move(ref);
  c.RecordHandedOut(*d, out->info_);
  c.next_position = {d->epoch, out->info_.index + 1};
  if (last_piece) {
    c.UnrefLocked(d->seq);  // the carving reference
    c.cur = shm::AcquiredBatch();
    c.pieces.clear();       // joined samples live on in their batches only
  }
  if (out->info_.last_in_epoch) c.CompleteEpochLocked(out->info_.epoch, base_b);
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
