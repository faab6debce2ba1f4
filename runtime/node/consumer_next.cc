// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Consumer::Next: one call is a few named steps (NextCall) on the consumer's state under
// its lock. Check that a batch may be asked for, wait for admission, acquire producer
// batches until one gives this consumer batches (screen it, begin its epoch, count the
// wait, carve it), then hand out the next piece.
#include <algorithm>
#include <memory>
#include <mutex>

#include "batchcast/consumer.h"
#include "core/errors.h"
#include "core/log.h"
#include "node/consumer_core.h"
#include "telemetry/collector.h"
#include "telemetry/metrics.h"
#include "transport/shm/carving.h"
#include "transport/shm/control.h"
#include "transport/shm/futex.h"
#include "transport/shm/ring_consumer.h"

namespace batchcast {
namespace {

using internal::ConsumerCore;

constexpr uint64_t kNoEpoch = ~0ULL;

Status EpochsComplete() {
  return Status(StatusCode::kEndOfStream, "this consumer's epochs are complete");
}

// One batch handed out: its views and what keeps them alive.
struct Handout {
  internal::PieceViews views;
  std::shared_ptr<internal::BatchRef> ref;
};

// One Consumer::Next on consumer state `c`, whose lock `lock` holds. Every step returns an
// error or kEndOfStream status to hand to the caller as it is.
class NextCall {
 public:
  NextCall(ConsumerCore& c, std::unique_lock<std::mutex>& lock)
      : c_(c), lock_(lock), base_b_(static_cast<uint32_t>(c.options.batch_size)) {}

  // Whether a batch may be asked for now: one Next() at a time, no earlier failure, epochs
  // left, and a free place in the buffer.
  Status CheckCanAsk() {
    if (c_.in_next)
      return FailedPreconditionError("consumer: Next() is already running in another thread; "
                                     "call it from one thread at a time");
    if (c_.closed)
      return FailedPreconditionError(
          "consumer of {}: Next() after Detach(): this consumer left the stream and hands out "
          "no more batches (batches still held stay valid). Attach a new Consumer (with "
          "start_epoch / start_batch from Position() to go on where it left)",
          shm::DisplayAddress(c_.address));
    if (!c_.status.ok()) return c_.status;
    if (c_.finished) {
      c_.MaybeDetachLocked();
      return c_.end_returned ? c_.PastTheEndLocked() : EpochsComplete();
    }
    if (c_.outstanding >= c_.options.buffer_depth + (c_.loop_holds_batch ? 1 : 0))
      return FailedPreconditionError(
          "consumer holds {} unreleased batches (buffer_depth={}{}): {}. Release one (destroy "
          "the Batch or its tensors; keep a copy, e.g. tensor.clone(), of what you need longer) "
          "before asking for the next, or attach with a larger buffer_depth",
          c_.outstanding, c_.options.buffer_depth,
          c_.loop_holds_batch ? " + the loop's batch" : "",
          c_.HeldList());
    return Status::Ok();
  }

  // The first call waits to be admitted. No deadline: a late joiner may wait for the next
  // epoch however long it is; the wait fails only if the leader fails, ends, dies or stops
  // beating.
  Status WaitAdmitted() {
    if (c_.admitted) return Status::Ok();
    auto start = Unlocked([&] { return c_.ring->WaitAdmitted(-1); });
    if (!start.ok()) return Fail(start.status());
    if (c_.finished) return Fail(Status::Ok());
    c_.admitted = true;
    c_.start_seq = *start;
    return Status::Ok();
  }

  // Acquires producer batches until one gives this consumer batches: then c.cur is it and
  // c.pieces its batches. The last wait is reported in *info.
  Status CarveNextProducerBatch(BatchInfo* info) {
    while (c_.cur.desc == nullptr) {
      int64_t waited = 0;
      auto acquired = Unlocked([&] { return c_.ring->Acquire(&waited); });
      if (!acquired.ok()) return Fail(acquired.status());
      const shm::AcquiredBatch a = *acquired;
      c_.slot_refs[a.seq] = ConsumerCore::SlotRef{a, 1};
      BC_ASSIGN_OR_RETURN(const bool carve, Screen(a));
      if (!carve) continue;
      if (a.desc->epoch != c_.epoch) c_.BeginEpochLocked(*a.desc);
      c_.RecordWaitLocked(*a.desc, waited, info);
      if (Status st = Carve(a); !st.ok()) {
        c_.UnrefLocked(a.seq);
        return Fail(st);
      }
      if (!c_.pieces.empty()) {
        c_.cur = a;
      } else if (GiveBackEmpty(a)) {  // carried on, dropped, or every sample was skipped
        return EpochsComplete();
      }
    }
    // Evicted (stopped past the heartbeat) while carving: say so now rather than finish a
    // producer batch the others have moved on from.
    if (Status addressed = c_.ring->CheckAddressed(); !addressed.ok()) return Fail(addressed);
    return Status::Ok();
  }

  // Hands out the next piece of c.cur as batch `core`'s (its info in *info): views, a
  // reference that keeps its slot, the counts, the position, the end of its epoch.
  Handout HandOutPiece(const std::shared_ptr<ConsumerCore>& core, BatchInfo* info) {
    const shm::SlotDesc* d = c_.cur.desc;
    const internal::Piece piece = c_.pieces[c_.next_piece++];
    const bool last_piece = c_.next_piece == c_.pieces.size();
    Handout h;
    h.views = internal::ViewPiece(c_, piece, info);
    info->lr_factor = shm::ConsumerLrFactor(base_b_, piece.size, d->lr_rule, d->lr_factor);
    info->index = c_.index_in_epoch++;
    // The epoch's last batch: the last piece of its last producer batch, or, for exact and
    // sharded carving, the count the stream definition gives (with drop_last the dropped
    // remainder may arrive in a later producer batch).
    const int64_t expected = c_.ExactBatchesPerEpoch(d->scale_den);
    info->last_in_epoch = (last_piece && (d->flags & shm::kLastInEpoch)) ||
                          (expected > 0 && info->index + 1 == uint64_t(expected));
    c_.slot_refs[d->seq].refs += 1;
    ++c_.outstanding;
    h.ref = MakeRef(core, piece, h.views, d->seq);
    c_.held[h.ref->serial] = ConsumerCore::Held{d->epoch, info->index, d->seq};
    c_.RecordHandedOut(*d, *info);
    c_.SetNextLocked(d->epoch, info->index + 1);
    if (last_piece) {
      c_.UnrefLocked(d->seq);  // the carving reference
      c_.cur = shm::AcquiredBatch();
      c_.pieces.clear();  // joined samples live on in their batches only
    }
    if (info->last_in_epoch) c_.CompleteEpochLocked(info->epoch, base_b_);
    return h;
  }

 private:
  // Ends this call with `st`: the end of the stream finishes the consumer (an error if a
  // late joiner's epochs are not done), any other error is kept as the consumer's status; a
  // consumer detached from another thread while this call waited just ends.
  Status Fail(Status st) {
    if (c_.finished) {
      c_.MaybeDetachLocked();
      return Status(StatusCode::kEndOfStream, "this consumer was detached");
    }
    if (st.code() != StatusCode::kEndOfStream) {
      c_.status = st;
      return st;
    }
    c_.FinishLocked();
    const shm::StreamHeader* h = c_.ring->header();
    // A finite stream that ends before a late joiner's epochs are done (it was admitted
    // after the stream started, past the late-join window near the end): a clear error,
    // never a silently shorter run. (A consumer there from the start may legitimately get
    // fewer epochs' batches, e.g. a shard rank with nothing in a short last batch.)
    if (h->stream_epochs > 0 && c_.options.epochs < kEpochsUntilStreamEnds &&
        c_.start_seq > 0 && c_.stats.epochs_completed < c_.epoch_budget) {
      c_.status = FailedPreconditionError(
          "the stream ended after this consumer completed {} of the {} epochs it asked for: it "
          "was admitted {} a stream of {} epochs, after the late-join window. Attach before "
          "the stream starts or within the window, or ask for fewer epochs",
          c_.stats.epochs_completed, c_.epoch_budget,
          c_.first_epoch == kNoEpoch ? std::string("after the last epoch began, in")
                                     : fmt::format("at epoch {} of", c_.first_epoch),
          h->stream_epochs);
      return c_.status;
    }
    return st;
  }

  // Runs a blocking call without the lock, so that releases (a tensor deleter, another
  // thread) never wait behind a Next() that waits for data.
  template <typename F>
  auto Unlocked(F&& fn) -> decltype(fn()) {
    c_.in_next = true;
    lock_.unlock();
    auto r = fn();
    lock_.lock();
    c_.in_next = false;
    return r;
  }

  // Whether producer batch `a`, just acquired, is carved. Not if this consumer was detached
  // while waiting, nor before its resume point (false: skipped); a stream past the resume
  // point, a malformed descriptor or the end of this consumer's epochs end the call. Every
  // path that does not carve `a` gives it back first: detaching waits for no slot held.
  Result<bool> Screen(const shm::AcquiredBatch& a) {
    const shm::SlotDesc& d = *a.desc;
    auto refuse = [&](Status st) -> Result<bool> {
      c_.UnrefLocked(a.seq);
      return Fail(std::move(st));
    };
    if (c_.finished) return refuse(Status::Ok());  // detached while we waited: unread
    if (c_.resuming && c_.first_epoch == kNoEpoch) {
      if (d.epoch < c_.resume_epoch) {  // a shared stream before this consumer's position
        c_.UnrefLocked(a.seq);
        return false;
      }
      if (Status st = c_.CheckResumePoint(d); !st.ok()) return refuse(st);
    }
    if (Status st = internal::CheckTensorDescs(d, a.data, c_.ring->header()->slot_bytes); !st.ok())
      return refuse(st);
    if (c_.first_epoch == kNoEpoch) c_.first_epoch = d.epoch;
    // Epochs counted, not numbered: a resumed trial's replayed epoch may be followed by a
    // later epoch of the stream (Admission::SettleResumers).
    if (d.epoch != c_.epoch && c_.epochs_started >= c_.epoch_budget) {
      c_.UnrefLocked(a.seq);
      c_.FinishLocked();
      return EpochsComplete();
    }
    return true;
  }

  // This consumer's batches of producer batch `a` into c.pieces, by its carving.
  Status Carve(const shm::AcquiredBatch& a) {
    c_.pieces.clear();
    c_.next_piece = 0;
    const shm::SlotDesc* d = a.desc;
    const uint32_t flags = c_.ring->config().flags;
    if (shm::CarvesPerProducerBatch(flags, d->scale_den)) {
      // Progressive resizing scales this consumer's batch with the batch's image size.
      const uint32_t b = shm::ScaledConsumerBatch(base_b_, d->scale_num, d->scale_den,
                                                  d->scale_cap);
      c_.pieces = internal::PerBatchPieces(d, b, flags, c_.ring->config().order_seed);
      return Status::Ok();
    }
    BC_RETURN_IF_ERROR(c_.shard_world > 1 ? internal::ShardPieces(c_, a, base_b_, &c_.pieces)
                                          : internal::ExactPieces(c_, a, base_b_, &c_.pieces));
    // Handed out read-only, like the slot views (a write faults with the guard's message).
    return internal::SealOwnedPieces(c_, &c_.pieces);
  }

  // Gives back producer batch `a`, which gave this consumer no batch; true when that ends
  // its epochs.
  bool GiveBackEmpty(const shm::AcquiredBatch& a) {
    // Read the descriptor before the slot goes back: the leader may reuse it at once.
    const bool ends_epoch = (a.desc->flags & shm::kLastInEpoch) != 0;
    const uint64_t epoch = a.desc->epoch;
    c_.UnrefLocked(a.seq);
    return ends_epoch && c_.CompleteEpochLocked(epoch, base_b_);
  }

  // The reference of a batch handed out from `piece` of producer batch `seq`.
  std::shared_ptr<internal::BatchRef> MakeRef(const std::shared_ptr<ConsumerCore>& core,
                                              const internal::Piece& piece,
                                              const internal::PieceViews& views, uint64_t seq) {
    auto ref = std::make_shared<internal::BatchRef>();
    ref->core = core;
    ref->owned = piece.owned;
    ref->ragged = views.ragged;
    ref->num_tensors = views.num_tensors;
    std::copy_n(views.tensors, views.num_tensors, ref->tensors);
    std::copy_n(views.offsets, views.num_tensors, ref->offsets);
    std::copy_n(views.names, views.num_tensors, ref->names);
    ref->seq = seq;
    ref->serial = c_.next_serial++;
    ref->acquired_ns = shm::MonotonicNs();
    return ref;
  }

  ConsumerCore& c_;
  std::unique_lock<std::mutex>& lock_;
  const uint32_t base_b_;  // this consumer's batch size before any resize scaling
};

}  // namespace

Status Consumer::Next(Batch* out) {
  out->Release();  // before locking: releasing takes the lock itself
  std::unique_lock<std::mutex> lock(core_->mu);
  NextCall call(*core_, lock);
  // The end of the stream is handed out once; asking again is an error (PastTheEnd).
  auto step = [&](Status st) {
    if (st.code() == StatusCode::kEndOfStream) core_->end_returned = true;
    return st;
  };
  BC_RETURN_IF_ERROR(step(call.CheckCanAsk()));
  BC_RETURN_IF_ERROR(step(call.WaitAdmitted()));
  BC_RETURN_IF_ERROR(step(call.CarveNextProducerBatch(&out->info_)));
  Handout h = call.HandOutPiece(core_, &out->info_);
  out->images_ = h.views.images;
  out->labels_ = h.views.labels;
  out->ids_ = h.views.ids;
  out->ref_ = std::move(h.ref);
  return Status::Ok();
}

}  // namespace batchcast
