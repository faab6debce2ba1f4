// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Replicate across nodes (docs/multinode.md): every node publishes every producer batch in
// full; it decodes only its share straight into slot memory and receives the other shares
// from the other node leaders with nonblocking point-to-point messages straight into the slot
// (transport/mpi/batch_exchange.h: per peer one contiguous image transfer plus one small block
// with labels, ids and the sender's go/fail flags). Up to `exchange_depth` producer batches
// are in flight at once (each in its own ring slot, acquired ahead and published in order),
// so the exchange of batch b overlaps the decode of b+1..b+depth-1; it is progressed between
// decode slices. The agreement rides on the exchange: batch b's flags decide, on every node
// alike, whether batch b+depth is started (go on; end when no node has a consumer; fail when a
// leader failed, naming its rank).
// The producer batches are planned as on one node (batch_plan.h), with option 'resize' by the
// progressive-resizing schedule: each batch has its own samples and image size, so its
// shares and messages are sized per batch, and every message carries what its sender planned
// (epoch, position, samples, image size, bytes per sample), which the receiver checks against
// its own plan before it reads the batch (a mismatch stops every node, naming both plans).
//
// It is a feed (the exchange) and a distribution (every node the same positions; joiners at
// the next epoch; the stream ends when the leaders agree) of producer::Producer's one loop.
#pragma once

#include <mpi.h>

#include <memory>
#include <utility>

#include "producer/batch_source.h"
#include "producer/distribution.h"
#include "producer/feed.h"

namespace batchcast::producer {

struct ExchangeConfig {
  MPI_Comm leaders = MPI_COMM_NULL;  // the node leaders' communicator (not owned)
  int node_index = 0;                // this node's rank in it
  int num_nodes = 1;
  int rank = -1;                     // this leader's world rank (named in failures)
  // Producer batches whose exchange may be in flight at once (capped at ring slots - 1;
  // agreed as the minimum over the leaders), and the decode slices of a share between which
  // the in-flight exchanges are progressed.
  int exchange_depth = 3;
  int decode_slices = 4;
  bool print_plan = true;            // print a resize schedule's plan to stdout
};

// The exchange feed over `source` and its distribution.
std::pair<std::unique_ptr<Feed>, std::unique_ptr<Distribution>> MakeReplicateAcrossNodes(
    std::unique_ptr<BatchSource> source, const ExchangeConfig& config);

// Pure arithmetic of the exchange, shared with the tests and the benchmark.
struct SampleRange {
  int64_t begin = 0;
  int64_t count = 0;
};
// Node j's share of a producer batch of n samples spread over `nodes` node leaders:
// [j*n/N, (j+1)*n/N).
inline SampleRange ReplicateShare(int64_t n, int nodes, int j) {
  const int64_t lo = n * j / nodes, hi = n * (j + 1) / nodes;
  return {lo, hi - lo};
}
// Chunk c of `chunks` of a range (absolute positions in the producer batch).
inline SampleRange ChunkOf(const SampleRange& r, int chunks, int c) {
  const int64_t lo = r.count * c / chunks, hi = r.count * (c + 1) / chunks;
  return {r.begin + lo, hi - lo};
}

}  // namespace batchcast::producer
