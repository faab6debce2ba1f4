// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// A consumer of a node leader's batch stream: a range of batches.
//
//   for (batchcast::Batch& batch : consumer) { train(batch.images(), batch.labels()); }
//
// Each iteration releases the previous batch. The range ends after the consumer's
// epochs (Options::epochs) or when the stream ends. An error ends the range and, unless
// you installed another handler, is fatal (the job fails fast with the message); use
// Next() to handle errors yourself.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "batchcast/batch.h"
#include "batchcast/export.h"
#include "batchcast/options.h"
#include "batchcast/status.h"

namespace batchcast {

namespace internal {
struct ConsumerCore;
struct ConsumerAccess;  // runtime-internal hooks (telemetry)
}

// Options::epochs for a consumer that follows the leader to the end of its stream,
// however many epochs it produces (the Python Consumer's epochs=None).
constexpr int kEpochsUntilStreamEnds = 1 << 30;

struct ConsumerStats {
  int64_t batches = 0;
  int64_t samples = 0;           // including fill repeats
  int64_t repeats = 0;           // fill repeats
  int64_t wait_ns = 0;           // blocked waiting for data
  int64_t epochs_completed = 0;
  std::vector<int64_t> repeats_per_epoch;
  // Samples copied out of the ring to join a batch that spans two producer batches, or to
  // pad the last one (exact carving, docs/data-plane.md); 0 when batch_size divides the
  // producer batch and nothing is padded.
  int64_t copied = 0;
};

// A consumer's place in its stream (docs/launch.md "Resume"): the batch Next() returns
// next, as the stream epoch (BatchInfo::epoch) and the batch index within that epoch in
// this consumer's batch size (BatchInfo::index), and this consumer's own epoch there. Save
// all three with a checkpoint; a run started with options start_epoch = epoch, start_batch
// = batch and start_run_epoch = run_epoch (on the leader and the consumer) delivers exactly
// the batches an uninterrupted run delivers from there, and its remaining epochs.
struct StreamPosition {
  uint64_t epoch = 0;
  uint64_t batch = 0;
  // This consumer's own epoch at that batch, counted over its whole run, resumes included
  // (its epochs before it): equal to `epoch` unless a resume replay of a shared stream moved
  // it onto later stream epochs (batchcast serve, docs/service.md "Resuming a trial"); a
  // resume runs options.epochs - run_epoch more epochs. -1 (a position saved without it,
  // or built from epoch and batch only): `epoch`. Position() always sets it.
  int64_t run_epoch = -1;
};

class BATCHCAST_API Consumer {
 public:
  // Attaches to the leader listening on `address` (an abstract socket name, as printed by
  // the leader or `batchcast serve`). Uses options.batch_size, buffer_depth, epochs,
  // drop_last, pad_last, carve_offset, carve_shuffle, seed, heartbeat_ms,
  // allowed_leader_uid and connect_timeout (milliseconds to wait for a leader to listen on
  // `address`: a trainer may start first). Batches are exact, like a DataLoader's: every
  // sample of an epoch once, in batches of batch_size and one partial last batch (dropped
  // with drop_last, padded with pad_last); carve_offset / carve_shuffle and progressive
  // resizing carve each producer batch on its own instead (fill repeats, reported).
  // `rank` is only a label (-1: none). Asking for more epochs than the leader's stream has
  // is an error here (kFailedPrecondition), unless epochs is kEpochsUntilStreamEnds.
  static Result<std::unique_ptr<Consumer>> Attach(const std::string& address,
                                                  const Options& options, int rank = -1,
                                                  const std::string& name = "");
  ~Consumer();
  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

  // The next batch; kEndOfStream after the last one, once: asking again is an error
  // (kFailedPrecondition) naming the epochs completed and the stream's, so that a loop over
  // more epochs than the stream has never trains on nothing. Holding buffer_depth unreleased
  // batches and asking for another is an error (kFailedPrecondition), never a deadlock.
  // After Detach(): an error (kFailedPrecondition) naming Detach().
  Status Next(Batch* out);
  // Leaves the stream; the leader and the other consumers go on. Batches still held stay
  // valid until released. Detach() again does nothing.
  Status Detach();

  // The status that ended iteration (OK after a normal end).
  Status status() const;
  ConsumerStats stats() const;
  // Where to resume: the position of the batch Next() returns next (after the batches
  // returned so far; options start_epoch / start_batch before the first).
  StreamPosition Position() const;
  // Batches this consumer gets per epoch (exact, from the stream definition; samples
  // skipped as bad by on_bad_sample=skip are not foreseen). Under a progressive-resizing
  // schedule the count differs per epoch: this is the count of the epoch of the last batch
  // returned (epoch 0 before the first), and BatchesPerEpoch(epoch) gives any epoch.
  int64_t BatchesPerEpoch() const;
  // Batches this consumer gets in stream epoch `epoch` (BatchInfo::epoch); 0 past the end.
  int64_t BatchesPerEpoch(uint64_t epoch) const;
  // Called when range-for iteration meets an error. Default: log it and exit(1) (a launcher
  // such as mpirun or srun then ends the job); the MPI Runtime's consumer aborts the whole
  // job at once (MPI_Abort).
  void SetErrorHandler(std::function<void(const Status&)> handler);

  class BATCHCAST_API Iterator {
   public:
    Batch& operator*() { return batch_; }
    Batch* operator->() { return &batch_; }
    Iterator& operator++();
    bool operator!=(const Iterator& other) const { return done_ != other.done_; }

   private:
    friend class Consumer;
    Iterator(Consumer* c, bool done) : consumer_(c), done_(done) {}
    Consumer* consumer_;
    bool done_;
    Batch batch_;
  };
  Iterator begin();
  Iterator end() { return Iterator(this, true); }

 private:
  friend struct internal::ConsumerAccess;
  Consumer() = default;
  std::shared_ptr<internal::ConsumerCore> core_;
};

// Attaches to the node leader that `batchcast-run` started (docs/launch.md): the address
// comes from BATCHCAST_ADDRESS and the rank label from RANK (the trainers-only world).
// Waits up to options.connect_timeout for the leader to listen (as Consumer::Attach).
// Options usually come from ResolveOptions(), which reads the BATCHCAST_* variables
// batchcast-run exports.
BATCHCAST_API Result<std::unique_ptr<Consumer>> AttachFromEnvironment(const Options& options);

}  // namespace batchcast
