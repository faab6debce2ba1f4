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
//     leaders with in-place MPI_Allgatherv into the slot (images, labels, ids), chunk by
//     chunk on an exchange thread (transport/mpi/chunk_exchange.h) so that the exchange
//     of chunk c overlaps the decode of chunk c+1. Before each producer batch the leaders
//     agree (one small allreduce, on this thread, with the exchange drained) on: go on,
//     end (no consumer left on any node),
//     or fail (a leader failed; its message is on its own rank).
// It is a separate class rather than a branch inside node::Leader so that the single-node
// path is untouched; progressive resizing is not supported across nodes (refused).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "batchcast/status.h"
#include "node/batch_source.h"
#include "node/leader.h"
#include "node/stream.h"
#include "transport/mpi/chunk_exchange.h"
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
  int exchange_chunks = 4;  // decode/exchange pipelining depth inside a producer batch
};

struct MultinodeStats {
  int64_t producer_batches = 0;   // slots published (shard: one per local trainer part)
  int64_t samples_published = 0;  // distinct samples published on this node
  int64_t samples_decoded = 0;    // samples this node's source decoded
  int64_t samples_skipped = 0;
  int64_t exchange_bytes = 0;     // replicate: bytes received from other node leaders
  int64_t exchange_ns = 0;        // replicate: first exchange start to completion, per batch
  int64_t exchange_wait_ns = 0;   // replicate: time blocked waiting for exchanges
  int64_t fill_ns = 0;
  int64_t slot_wait_ns = 0;
};

class MultinodeLeader {
 public:
  static Result<std::unique_ptr<MultinodeLeader>> Create(const LeaderConfig& config,
                                                         std::unique_ptr<BatchSource> source,
                                                         const MultinodeConfig& multi);
  MultinodeLeader(const MultinodeLeader&) = delete;
  MultinodeLeader& operator=(const MultinodeLeader&) = delete;
  // Produces the stream (options.epochs epochs) and ends it. Returns the first error.
  Status Run();
  void Abort(const std::string& why);
  Status WaitUntilEmpty(int64_t timeout_ms);

  shm::RingLeader& ring() { return *ring_; }
  const std::string& address() const { return config_.socket_name; }
  MultinodeStats stats() const { return stats_; }
  int64_t producer_batch() const { return plan_.producer_batch(); }

 private:
  MultinodeLeader(const LeaderConfig& config, std::unique_ptr<BatchSource> source,
                  const MultinodeConfig& multi, int64_t producer_batch, int64_t num_samples);
  Status RunShard();
  Status RunReplicate();
  Result<std::map<int, uint64_t>> MapTrainers();
  // Shard: trainer part `part` of global batch g, to the member with bit `target`.
  Status PublishPart(uint64_t epoch, int64_t g, int64_t batches, std::span<const int64_t> part,
                     uint64_t target);
  // Replicate: agree with the other leaders; *go false ends the stream.
  Status Agree(bool failed, bool* go);
  Status ProduceReplicated(uint64_t epoch, int64_t k, int64_t batches);
  Status DecodeChunk(uint64_t epoch, std::span<const int64_t> samples, int64_t pos,
                     uint8_t* data);
  // Tail copies, descriptor and publish (the same slot layout as node::Leader).
  Result<uint64_t> Finish(const shm::SlotWrite& w, uint64_t epoch, int64_t k, int64_t batches,
                  uint32_t n, uint64_t only);
  void Compact(uint8_t* data, uint32_t* n);

  LeaderConfig config_;
  MultinodeConfig multi_;
  std::unique_ptr<BatchSource> source_;
  StreamPlan plan_;
  std::unique_ptr<shm::RingLeader> ring_;
  pipeline::SampleLayout layout_;
  uint64_t labels_offset_ = 0, ids_offset_ = 0, capacity_samples_ = 0;
  std::atomic<bool> abort_{false};
  MultinodeStats stats_;
  std::unique_ptr<mpi::ChunkExchange> exchange_;  // replicate: the exchange thread
};

}  // namespace batchcast::node
