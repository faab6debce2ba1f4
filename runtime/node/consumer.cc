// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Consumer: carves this consumer's batches out of the producer batches it acquires
// from the ring, and gives each slot back once every batch carved from it is released.
// This file: attaching, leaving, and range-for iteration; where a consumer starts (its
// shard, resume point and epoch budget, load_state_dict) is in consumer_start.cc;
// Next() is in consumer_next.cc, Batch in consumer_batch.cc, what a consumer knows of its
// stream in consumer_stream.cc, the carving in consumer_carving.cc.
#include "batchcast/consumer.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "core/environment.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/random.h"
#include "node/consumer_core.h"
#include "node/consumer_internal.h"
#include "transport/shm/control.h"
#include "transport/shm/ring_consumer.h"

namespace batchcast {
namespace {

// Range-for iteration met an error: fail the process. (Under mpirun or srun the launcher
// ends the job when a rank exits with an error; the MPI Runtime installs its own handler,
// which aborts the job at once: MPI_Abort is the MPI front door's decision.)
void DefaultErrorHandler(const Status& st) {
  BC_LOG(Error, Node, "consumer: {}", st.ToString());
  std::exit(1);
}

}  // namespace

Result<std::unique_ptr<Consumer>> Consumer::Attach(const std::string& address,
                                                   const Options& options, int rank,
                                                   const std::string& name) {
  return internal::ConsumerAccess::Attach(address, options, rank, name, false);
}

namespace internal {

Result<std::unique_ptr<Consumer>> ConsumerAccess::Attach(const std::string& address,
                                                         const Options& options, int rank,
                                                         const std::string& name,
                                                         bool loop_holds_batch) {
  BC_RETURN_IF_ERROR(ValidateOptions(options));
  shm::ConsumerConfig cfg;
  cfg.batch_size = static_cast<uint32_t>(options.batch_size);
  cfg.buffer_depth = static_cast<uint32_t>(options.buffer_depth);
  cfg.flags = (options.carve_offset ? uint32_t(shm::kCarveOffset) : 0u) |
              (options.carve_shuffle ? uint32_t(shm::kCarveShuffle) : 0u) |
              (loop_holds_batch ? uint32_t(shm::kLoopHoldsBatch) : 0u);
  cfg.order_seed = HashCombine(options.seed, static_cast<uint64_t>(rank + 1), 0xc0ffee);
  cfg.rank = rank;
  cfg.name = name;
  cfg.heartbeat_ms = options.heartbeat_ms;
  cfg.allowed_leader_uid = options.allowed_leader_uid;
  cfg.view = options.view;
  uint32_t shard_world = 1, shard_rank = 0;
  BC_RETURN_IF_ERROR(internal::ResolveShard(options, nullptr, &shard_world, &shard_rank));
  internal::SetJoinResume(options, shard_world, &cfg);
  BC_ASSIGN_OR_RETURN(std::unique_ptr<shm::RingConsumer> attached,
                      internal::AttachRing(address, cfg, options.connect_timeout));
  Result<std::unique_ptr<shm::RingConsumer>> ring(std::move(attached));
  const shm::StreamHeader* h = (*ring)->header();
  if ((*ring)->group() != 0)
    BC_LOG(Info, Node, "consumer: view group {} at {}: {}", (*ring)->group(),
           shm::DisplayAddress(address), (*ring)->view_spec());
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
  BC_RETURN_IF_ERROR(internal::ResolveShard(options, h, &shard_world, &shard_rank));
  std::unique_ptr<Consumer> c(new Consumer());
  c->core_ = std::make_shared<internal::ConsumerCore>();
  c->core_->address = address;
  c->core_->shard_world = shard_world;
  c->core_->shard_rank = shard_rank;
  // The ring first: a refused start position leaves the stream through the destructor.
  c->core_->ring = std::move(ring).value();
  BC_RETURN_IF_ERROR(internal::StartConsumerAt(options, h, c->core_.get()));
  c->core_->options = options;
  c->core_->rank = rank;
  c->core_->loop_holds_batch = loop_holds_batch;
  c->core_->error_handler = DefaultErrorHandler;
  return c;
}

bool ConsumerAccess::Finished(const Consumer& consumer) {
  std::lock_guard<std::mutex> lock(consumer.core_->mu);
  return consumer.core_->finished;
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
    core_->closed = true;  // a later Next() is an error naming Detach(); Detach() again: no-op
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
