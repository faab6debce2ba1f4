// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The multi-node leader (docs/multinode.md): the MPI Runtime's node leader when the job
// spans several nodes (mode=replicate) or shards its epochs (mode=shard). What is its own is
// the plan every rank agrees on (the job's trainer table, each local trainer's index in the
// trainers-only communicator); the rest is a producer::Producer whose distribution is the
// shard (producer/distribution.h: one part of each global batch per local trainer, no MPI while
// streaming) or the exchange between node leaders (producer/exchange_feed.h).
#pragma once

#include <mpi.h>

#include <map>
#include <memory>

#include "batchcast/status.h"
#include "producer/batch_source.h"
#include "producer/producer.h"

namespace batchcast::node {

enum class MultinodeMode { kShard, kReplicate };

struct MultinodeConfig {
  MultinodeMode mode = MultinodeMode::kReplicate;
  // shard: the job's trainers (size of the trainers-only communicator) and, for this node's
  // trainers, world rank -> trainer index (its rank in that communicator).
  int total_trainers = 0;
  std::map<int, int> trainer_index;
  // replicate: the node leaders' communicator (not owned; must outlive the run), this
  // node's index in it and its size.
  MPI_Comm leaders = MPI_COMM_NULL;
  int node_index = 0;
  int num_nodes = 1;
  // replicate: producer batches whose exchange may be in flight at once, and the decode
  // slices of a share between which the exchanges are progressed (exchange_feed.h).
  int exchange_depth = 3;
  int decode_slices = 4;
};

// The multi-node leader's Producer over `source` (config.who defaults to "multinode leader").
Result<std::unique_ptr<producer::Producer>> CreateMultinodeProducer(
    producer::ProducerConfig config, std::unique_ptr<producer::BatchSource> source,
    const MultinodeConfig& multi);

}  // namespace batchcast::node
