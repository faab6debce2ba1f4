// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The node leader of a job that spans several nodes (docs/multinode.md). It owns the same
// shared-memory ring as node::Leader and lays out slots the same way (images, labels, ids,
// tail copies), so consumers cannot tell the difference; only what goes into a slot and who
// receives it changes:
//   - shard: per global batch, one slot per local trainer holding that trainer's part
//     (multinode_plan.h ShardPart), published to that trainer alone (targeted publish);
//     no MPI while streaming: every leader derives the same plan from (seed, epoch).
//   - replicate: every node publishes every producer batch in full; it decodes only its
//     share straight into slot memory and receives the other shares from the other node
//     leaders with nonblocking point-to-point messages straight into the slot
//     (transport/mpi/batch_exchange.h: per peer one contiguous image transfer plus one
//     small block with labels, ids and the sender's go/fail flags). Up to `exchange_depth`
//     producer batches are in flight at once (each in its own ring slot, acquired ahead and
//     published in order), so the exchange of batch b overlaps the decode of b+1..b+depth-1;
//     it is progressed between decode slices. The agreement rides on the exchange: batch
//     b's flags decide, on every node alike, whether batch b+depth is started (go on; end
//     when no node has a consumer; fail when a leader failed, naming its rank).
// Slot layout, fill, tail, descriptor, publish and telemetry are the producer core's
// (producer::SlotWriter), as in node::Leader; only the policy differs. Progressive resizing
// is not supported across nodes (refused). Late join: a joiner is admitted at once and
// starts at the next epoch (replicate; no replay, as every node must publish the same
// positions); in shard mode every trainer attaches before the stream starts.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "batchcast/status.h"
#include "node/leader.h"
#include "producer/abort_reason.h"
#include "producer/admission.h"
#include "producer/batch_source.h"
#include "producer/slot_writer.h"
#include "producer/stream_plan.h"
#include "transport/mpi/batch_exchange.h"
#include "transport/shm/ring_leader.h"

namespace batchcast::node {

enum class MultinodeMode { kShard, kReplicate };

struct MultinodeConfig {
  MultinodeMode mode = MultinodeMode::kReplicate;
  // shard: the job's trainers (size of the trainers-only communicator) and, for this
  // node's trainers, world rank -> trainer index (its rank in that communicator).
  int total_trainers = 0;
  std::map<int, int> trainer_index;
  // replicate: the node leaders' communicator (not owned; must outlive Run()), this
  // node's index in it and its size.
  MPI_Comm leaders = MPI_COMM_NULL;
  int node_index = 0;
  int num_nodes = 1;
  // Replicate: producer batches whose exchange may be in flight at once (capped at
  // ring slots - 1; agreed as the minimum over the leaders), and the decode slices of a
  // share between which the in-flight exchanges are progressed.
  int exchange_depth = 3;
  int decode_slices = 4;
};

// The slot writer's figures (producer_batches: slots published, shard: one per local
// trainer part; samples_produced: distinct samples published on this node; samples_decoded:
// samples this node's source decoded; ...) and the exchange's.
struct MultinodeStats : producer::WriterStats {
  int64_t exchange_bytes = 0;     // replicate: bytes received from other node leaders
  int64_t exchange_ns = 0;        // replicate: wall time with at least one exchange in flight
  int64_t exchange_wait_ns = 0;   // replicate: time blocked waiting for exchanges
  int exchange_depth = 0;         // replicate: the agreed number of batches in flight
  std::vector<int64_t> epoch_end_ns;  // monotonic time the last batch of each epoch was done
};

class MultinodeLeader {
 public:
  static Result<std::unique_ptr<MultinodeLeader>> Create(const LeaderConfig& config,
                                                         std::unique_ptr<producer::BatchSource> source,
                                                         const MultinodeConfig& multi);
  MultinodeLeader(const MultinodeLeader&) = delete;
  MultinodeLeader& operator=(const MultinodeLeader&) = delete;
  // Produces the stream (options.epochs epochs) and ends it. Returns the first error.
  Status Run();
  void Abort(const std::string& why);
  Status WaitUntilEmpty(int64_t timeout_ms);

  shm::RingLeader& ring() { return *ring_; }
  const std::string& address() const { return config_.socket_name; }
  MultinodeStats stats() const;
  int64_t producer_batch() const { return plan_.producer_batch(); }
  // Whether Run() failed after printing its report (StopTogether): the caller must not
  // print the same cause again.
  bool reported() const { return reported_.load(); }

 private:
  MultinodeLeader(const LeaderConfig& config, std::unique_ptr<producer::BatchSource> source,
                  const MultinodeConfig& multi, int64_t producer_batch, int64_t num_samples);
  Status RunShard();
  Status RunReplicate();
  Result<std::map<int, uint64_t>> MapTrainers();
  std::string DescribeShard() const;
  void WarnLateShardJoiners();
  // Shard: trainer part `part` of global batch g, to the member with bit `target`.
  Status PublishPart(uint64_t epoch, int64_t g, int64_t batches, std::span<const int64_t> part,
                     uint64_t target);
  // Replicate: one producer batch whose exchange is in flight (or done, not yet published).
  struct InFlight {
    shm::SlotWrite w;
    uint64_t epoch = 0;
    int64_t k = 0, bpe = 0, n = 0;
    uint64_t index = 0;              // producer batches started before it in this run
    std::vector<int64_t> meta;       // one block per node: flags, labels, ids of its share
    mpi::BatchExchange exchange;
    bool done = false;
    int64_t posted_ns = 0;
    int64_t wait_ns = 0;             // the leader blocked waiting for this exchange
    producer::BatchRecord record;    // this node's fills of its share (telemetry)
    std::vector<uint8_t> scratch;    // after a local failure: stands in for the slot
    uint8_t* data = nullptr;         // the slot's memory (or scratch)
  };
  // Replicate, before the stream: the exchange window and whether to start. `local` is this
  // leader's own failure (ok: none). When any leader failed, every leader
  // stops together (StopTogether) and gets its cause or "another node leader failed".
  Status Agree(const Status& local, bool* go);
  // The stream stops for a failure every leader knows of: prints `why` (the failing leader
  // its cause, the others the failing leader's node and rank), waits until every leader has
  // printed, and returns `why`. Only then may a leader fail its ring (its trainers exit and
  // the launcher ends the job), so no report is lost to an early exit (docs/multinode.md).
  Status StopTogether(const Status& why);
  Status StartReplicated(uint64_t epoch, int64_t k, int64_t bpe, uint64_t index);
  Status DecodeSlice(InFlight* f, std::span<const int64_t> samples, int64_t pos);
  // Tests every in-flight exchange and finishes the completed ones at the front, in order.
  Status Progress();
  // Waits for the oldest exchange and finishes it (reads the flags, publishes unless stopped).
  Status FinishOldest();
  Status FinishReplicated(InFlight* f);
  void NoteExchangeIdle();
  uint32_t Compact(uint8_t* data, uint32_t n);

  LeaderConfig config_;
  MultinodeConfig multi_;
  std::unique_ptr<producer::BatchSource> source_;
  producer::StreamPlan plan_;
  std::unique_ptr<shm::RingLeader> ring_;
  pipeline::SampleLayout layout_;
  std::unique_ptr<producer::SlotWriter> writer_;
  std::unique_ptr<producer::Admission> admission_;
  producer::AbortReason abort_;  // Abort(): the stop flag and its first reason
  MultinodeStats stats_;             // exchange figures; the rest comes from writer_
  // Replicate.
  std::deque<std::unique_ptr<InFlight>> in_flight_;
  int depth_ = 1;
  Status local_error_;               // this node's first failure (decode, abort)
  uint64_t stop_at_ = UINT64_MAX;    // first batch index whose flags say stop
  std::atomic<bool> reported_{false};
  bool stop_failed_ = false;         // ... because a leader failed (else: no consumers left)
  int failed_rank_ = -1, failed_node_ = -1;
  int64_t busy_since_ = -1;          // an exchange has been in flight since (ns)
  uint64_t warned_joiners_ = 0;      // shard: late joiners already warned about
};

}  // namespace batchcast::node
