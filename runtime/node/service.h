// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The always-on per-node service (`batchcast serve`, docs/service.md): one long-lived
// leader that runs epochs for whoever is attached. Consumers (trials) attach and leave at
// any time through the node-local control socket; the service
//   - decodes only while someone is attached (it blocks, without polling, when nobody is),
//   - admits newcomers as every producer does (producer/admission.h): at once, starting at
//     the next epoch, or, within the late-join window (at least the ring depth in batches),
//     with the start of the epoch replayed to them alone; a trial resuming at a position
//     the stream has passed gets the rest of its epoch replayed to it alone,
//   - loses a dead or silent consumer within heartbeat_ms (the ring reaps it), and
//   - fails the stream with "service stopped: ..." when stopped, so attached consumers
//     get a clear error instead of a hang.
// It is one process per node; an MPI-spanning service comes with the multi-node work.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "batchcast/options.h"
#include "batchcast/status.h"
#include "producer/admission.h"
#include "producer/batch_source.h"
#include "producer/slot_hook.h"
#include "producer/slot_writer.h"
#include "producer/stream_plan.h"
#include "telemetry/collector.h"
#include "transport/shm/ring_leader.h"

namespace batchcast::node {

struct ServiceConfig {
  Options options;                   // seed, shuffle, producer_batch, ring_slots, heartbeat_ms
  std::string socket_name;           // empty: DefaultServiceSocket()
  int64_t epochs = 0;                // 0: run epochs until stopped
  double late_join_window = 0.02;    // fraction of an epoch within which a joiner is caught up
                                     // (at least the ring depth in batches, never 0)
  bool join_mid_epoch = false;       // later joiners start at once (mid-epoch) instead of waiting
  uint32_t max_consumer_batch = 0;   // largest batch a consumer may ask for (0: options.batch_size)
  int64_t handshake_timeout_ms = 5000;
  telemetry::Collector* collector = nullptr;  // optional (the `telemetry` option); not owned
};

struct ServiceStats {
  int64_t epochs_started = 0;
  int64_t producer_batches = 0;      // decoded and published (replays included)
  int64_t replayed_batches = 0;      // late-join replays
  int64_t resume_replays = 0;        // resuming consumers behind the stream, replayed to
  int64_t resume_replayed_batches = 0;  // producer batches decoded for them alone
  int64_t skipped_positions = 0;     // positions published to nobody (no decode)
  int64_t late_joins = 0;            // consumers caught up by a replay
  int64_t idle_waits = 0;            // times the service paused with nobody attached
  int64_t max_slot_wait_ns = 0;      // longest wait for a free slot (a stalled consumer)
  int64_t consumers_detached = 0;    // consumers that detached normally
  int64_t consumers_lost = 0;        // consumers reaped: died (socket closed) or silent
};

// "batchcast-<uid>-service": the socket name `batchcast serve` and consumers default to.
std::string DefaultServiceSocket();

class Service {
 public:
  static Result<std::unique_ptr<Service>> Create(const ServiceConfig& config,
                                                 std::unique_ptr<producer::BatchSource> source);
  ~Service();
  // Runs epochs (forever, or config.epochs) until Stop(). Ok when stopped or complete.
  Status Run();
  // Stops Run() and fails the stream with "service stopped: <why>" (thread-safe; not
  // async-signal-safe: call it from a signal-waiting thread).
  void Stop(const std::string& why);

  std::string address() const;  // "@name"
  const std::string& socket_name() const { return config_.socket_name; }
  ServiceStats stats() const;
  shm::RingLeader& ring() { return *ring_; }
  int64_t batches_per_epoch() const { return plan_.BatchesPerEpoch(); }
  // Installs `hook` around every filled slot, as Leader::SetSlotHook (not owned; must
  // outlive Run()). Call before Run().
  void SetSlotHook(producer::SlotHook* hook) { writer_->SetHook(hook); }
  // What GPU staging attaches to (gpu/gpu_stager.h).
  producer::StagingTarget staging_target();

 private:
  Service(const ServiceConfig& config, std::unique_ptr<producer::BatchSource> source, int64_t p);
  Status RunEpoch(uint64_t epoch, int64_t first);  // first: the first position (resume)
  // What batch k of `epoch` holds.
  producer::ProduceRequest Request(uint64_t epoch, int64_t k);
  // Produces batch k of `epoch` for the consumers in `only` (nullopt: the slot wait was
  // interrupted by a joiner; membership is settled again first), filling batch next_k
  // ahead when >= 0; a replay also counts in *replays.
  Result<std::optional<uint64_t>> Produce(uint64_t epoch, int64_t k, uint64_t only,
                                          const producer::AcquireWait& wait, int64_t next_k,
                                          std::atomic<uint64_t>* replays);
  // Blocks until a consumer is attached or joining, or the service stops.
  void WaitForMembers();

  ServiceConfig config_;
  std::unique_ptr<producer::BatchSource> source_;
  producer::StreamPlan plan_;
  std::unique_ptr<shm::RingLeader> ring_;
  pipeline::SampleLayout layout_;
  std::unique_ptr<producer::SlotWriter> writer_;
  std::unique_ptr<producer::Admission> admission_;
  std::atomic<bool> stop_{false};
  // Shown by `batchcast status` (read on the control thread).
  std::atomic<uint64_t> epoch_{0}, batch_{0}, produced_{0}, replayed_{0};
  std::atomic<uint64_t> resume_replays_{0}, resume_replayed_{0};
  std::atomic<uint32_t> idle_{0};
  ServiceStats stats_;               // epochs_started, idle_waits (the Run thread)
  std::atomic<int64_t> detached_{0}, lost_{0};  // written by the ring's control thread
};

}  // namespace batchcast::node
