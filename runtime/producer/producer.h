// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// producer::Producer: the one object every front door builds (docs/architecture.md "The
// Producer and its policies"). The MPI Runtime, `batchcast serve`, the Python Leader and
// Producer, the launcher's leader task, the C API's leader and the multi-node leader each
// construct one from their resolved options and add only what is truly theirs (MPI
// agreement, signals, a Python iterator). The Producer owns
//   - the assembly: the options check against the front-door table (core/option_scope.h),
//     batch sizes, slot layout, model stages, ring config, RingLeader, SlotWriter, Admission;
//   - the one epoch loop (epoch_loop.h) over two small policies: where batches come from
//     (feed.h: native pipeline, external iterable, multi-node exchange) and who receives
//     which positions (distribution.h: local, shard across nodes, replicate);
//   - the lifecycle: Run() inline or Start() on a thread, Wait(), Stop() (a clean stop),
//     Abort() (a failure, first reason kept), waiting until every consumer has left;
//   - the loss policy (a lost consumer is counted, or fails the stream naming it);
//   - late join, catch-up and resume replays (Admission, over what the feed can make again);
//   - the telemetry lifecycle (its own ProcessTelemetry, or the front door's collector);
//   - the slot hook (GPU staging: AdoptSlotHook, staging_target());
//   - the stream status `batchcast status` shows, and the statistics.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "batchcast/options.h"
#include "batchcast/status.h"
#include "core/option_scope.h"
#include "producer/abort_reason.h"
#include "producer/admission.h"
#include "producer/distribution.h"
#include "producer/feed.h"
#include "producer/process_telemetry.h"
#include "producer/slot_hook.h"
#include "producer/slot_writer.h"
#include "producer/view_groups.h"
#include "transport/shm/ring_leader.h"

namespace batchcast::producer {

// What a consumer lost without detaching (it died, or stopped heart-beating) means.
enum class LossPolicy {
  kCount,       // a trial or a script may go: counted (stats, telemetry); the others go on
  kFailStream,  // a trainer of the job: the stream fails, naming it (the job cannot go on)
};

struct ProducerConfig {
  // The front door: its options are checked against the table (core/option_scope.h).
  // Unset: a C++ program's own leader, whose options are its code's (no check).
  std::optional<FrontDoor> front_door;
  Options options;                  // resolved
  std::string who = "leader";       // prefix of its messages ("service", "producer", ...)
  std::string socket_name;          // abstract socket name; empty: a unique one (NewSocketName)
  std::string job;                  // identity shown in names and errors
  int rank = -1, local_rank = -1;   // this process's (telemetry, the ring's identity)
  uint32_t max_consumer_batch = 0;  // largest consumer batch admitted (0: options.batch_size)
  int expected_consumers = 0;       // joins to wait for before the first batch
  int64_t join_timeout_ms = 120000;  // < 0: no deadline
  bool until_stopped = false;       // epochs until Stop() (a service); else options.epochs
  bool end_when_empty = true;       // end once every consumer has left; else wait for one
  bool wait_until_empty = false;    // Run() returns once every consumer has detached too
  LossPolicy loss = LossPolicy::kCount;
  // Called on the ring's control thread for each consumer lost without detaching, with
  // "<consumer> died (its connection closed)" or "... stopped heart-beating", before the
  // loss policy acts (a front door reporting losses as they happen: batchcast-run's sweep).
  std::function<void(const std::string& what)> on_loss;
  int64_t handshake_timeout_ms = 5000;
  bool print_plan = true;           // print a resize schedule's plan to stdout
  // The front door's own collector (the MPI Runtime's, gathered over its ranks); else the
  // Producer starts its own from options.telemetry (a process of the kind its front door
  // is: service, producer, else leader), its files named by the one rule
  // (telemetry/run_outputs.h) with `telemetry_tag`, and writes them when Run() ends.
  telemetry::Collector* collector = nullptr;
  std::string telemetry_tag;
  // Its own telemetry started already (StartTelemetry: a front door checks the output paths
  // before it opens its dataset); the Producer finishes it as if it had started it.
  std::shared_ptr<ProcessTelemetry> telemetry;
  // Polled before every position and every 200 ms of a wait for a slot: non-ok stops the
  // stream with it (a Python KeyboardInterrupt).
  std::function<Status()> poll;
};

// The slot writer's figures, the feed's and the Producer's: replays, membership.
struct ProducerStats : WriterStats, FeedStats {
  int64_t epochs_started = 0;
  int64_t replayed_batches = 0;          // late-join replays
  int64_t late_joins = 0;                // consumers caught up by a replay
  int64_t resume_replays = 0;            // resuming consumers behind the stream, replayed to
  int64_t resume_replayed_batches = 0;   // producer batches made again for them alone
  int64_t catch_ups = 0;                 // late joiners after the window given their own epoch
  int64_t catch_up_replayed_batches = 0;  // producer batches made again for them alone
  int64_t catch_up_deferrals = 0;        // joiners deferred to the next epoch by the limit
  int64_t idle_waits = 0;                // times the stream paused with nobody attached
  int64_t consumers_detached = 0;        // consumers that detached normally
  int64_t consumers_lost = 0;            // consumers that died or went silent
};

// The Producer's own telemetry for `config` (null with telemetry off, or when the front
// door gives its collector): files named for its front door's kind of process, every output
// path created or refused now.
Result<std::shared_ptr<ProcessTelemetry>> StartTelemetry(const ProducerConfig& config);

// The checks of `config` that need no dataset (a front door runs them before it opens one):
// the options' values, the front-door table, and what a stream until stopped cannot run.
Status CheckConfig(const ProducerConfig& config);

// "batchcast-<uid>-<pid>-<kind>-<n>": a socket name unique in this process (kind: the front
// door's key, or the producer's `who`).
std::string NewSocketName(const std::string& kind);

class Producer {
 public:
  static Result<std::unique_ptr<Producer>> Create(const ProducerConfig& config,
                                                  std::unique_ptr<Feed> feed,
                                                  std::unique_ptr<Distribution> distribution);
  // The native pipeline (or any BatchSource) to every consumer of this node.
  static Result<std::unique_ptr<Producer>> Create(const ProducerConfig& config,
                                                  std::unique_ptr<BatchSource> source);
  ~Producer();  // aborts a stream still running, joins its thread, ends or fails the ring
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;

  // The whole run, inline: waits for the expected consumers, produces the stream (epochs,
  // or until Stop()), ends it, runs the stream-end steps (slot hook, OnStreamEnd), waits
  // until every consumer has detached (wait_until_empty) and writes its telemetry. Returns
  // the first error: "<who>: aborted: <first reason>" after Abort(), Ok after Stop().
  Status Run();
  // Run() on a thread ("bc-leader"); Wait() returns its status.
  void Start();
  // Waits up to timeout_ms (< 0: until done) for Start()'s run: kDeadlineExceeded while it
  // runs, else Run()'s status.
  Status Wait(int64_t timeout_ms = -1);
  bool done() const;
  // A clean stop: Run() returns Ok; consumers fail with "<who> stopped: <why>".
  void Stop(const std::string& why);
  // A failure: Run() returns "<who>: aborted: <why>"; consumers fail with `why`. The first
  // reason is kept.
  void Abort(const std::string& why);
  // Blocks until no consumer is attached, or fails after timeout_ms (naming who).
  Status WaitUntilEmpty(int64_t timeout_ms);

  // The slot hook (GPU staging): installed, not owned (must outlive Run()); or owned, its
  // Finish() run when the stream ends. Call before Run()/Start().
  void SetSlotHook(SlotHook* hook) { writer_->SetHook(hook); }
  void AdoptSlotHook(std::unique_ptr<SlotHook> hook);
  StagingTarget staging_target();
  // Runs on the run thread when the stream has ended (or failed), before Run() returns: its
  // error becomes Run()'s when the stream was ok. Call before Run()/Start().
  void OnStreamEnd(std::function<Status()> step) { stream_end_.push_back(std::move(step)); }

  // The consumers lost without detaching so far, as given to on_loss (the ring's list: a
  // stream that ended because its last consumer died lists it).
  std::vector<std::string> lost_consumers() const;
  const std::string& address() const { return config_.socket_name; }  // the socket name
  std::string display_address() const;                                // "@name"
  const ProducerConfig& config() const { return config_; }
  shm::RingLeader& ring() { return *ring_; }
  ProducerStats stats() const;
  int64_t producer_batch() const { return plan_.producer_batch; }
  int64_t batches_per_epoch() const;  // of a full epoch (0: unknown)
  const schedule::ResizeSchedule* resize_schedule() const { return feed_->resize_schedule(); }
  telemetry::Collector* collector() const { return collector_; }
  // The telemetry summary written when the run ended ("" before, or with telemetry off).
  std::string telemetry_summary() const;
  // Whether the run failed after its feed printed the report (multi-node leaders): the
  // front door must not print the same cause again.
  bool reported() const { return feed_->reported(); }

 private:
  explicit Producer(const ProducerConfig& config) : config_(config) {}
  Status Assemble(std::unique_ptr<Feed> feed, std::unique_ptr<Distribution> distribution);
  // The view groups' room in every slot (options views_max, view_bytes) and their table;
  // *source: what makes the groups' images (null: the leader's view only).
  Status PlanViews(Feed& feed, SlotLayout* slot, ViewGroupsConfig* groups, BatchSource** source);
  Status RunStream();
  Status WaitForExpected();
  Status RunEpoch(uint64_t epoch, int64_t bpe, int64_t first, bool* ended);
  Status StopStatus() const;
  void Idle(int64_t k);
  void ShowAdmission();
  void InstallHandlers();

  ProducerConfig config_;
  FeedPlan plan_;
  std::shared_ptr<ProcessTelemetry> telemetry_;  // its own (outlives the writer)
  telemetry::Collector* collector_ = nullptr;
  std::unique_ptr<shm::RingLeader> ring_;
  std::unique_ptr<SlotWriter> writer_;
  std::unique_ptr<Admission> admission_;
  std::unique_ptr<ViewGroups> groups_;  // outlives the ring (reset in ~Producer)
  std::unique_ptr<Feed> feed_;
  std::unique_ptr<Distribution> distribution_;
  std::unique_ptr<SlotHook> owned_hook_;
  std::vector<std::function<Status()>> stream_end_;
  AbortReason abort_;
  std::atomic<bool> stop_{false}, stopping_{false};  // stop_: Stop() or Abort() was called
  bool ended_ = false;  // the stream ended (ring End or Fail)
  // Shown by `batchcast status` (read on the ring's control thread).
  std::atomic<uint64_t> epoch_{0}, batch_{0}, bpe_{0}, produced_{0}, replayed_{0};
  std::atomic<uint64_t> resume_replays_{0}, resume_replayed_{0};
  std::atomic<uint64_t> catching_up_{0}, deferred_{0}, catch_ups_{0}, deferrals_{0};
  std::atomic<uint64_t> catch_up_replayed_{0};
  std::atomic<uint32_t> idle_{0};
  std::atomic<int64_t> detached_{0}, lost_{0};  // written by the ring's control thread
  int64_t epochs_started_ = 0, idle_waits_ = 0;
  // Start() / Wait().
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool running_ = false, done_ = false;
  Status status_;
};

}  // namespace batchcast::producer
