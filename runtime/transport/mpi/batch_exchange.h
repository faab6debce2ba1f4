// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// BatchExchange: one producer batch's allgather among the node leaders, as nonblocking
// point-to-point messages straight between slot memories. Every rank owns one part of
// each array (images, and a small metadata block); after completion every rank holds every
// part at the same displacement. Per peer and array it is one contiguous MPI_Isend of this
// rank's part and one MPI_Irecv of the peer's part, all posted at once (one round), so:
//   - the image bytes move with one single-copy transfer per peer (Open MPI: CMA between
//     processes of a host, RDMA/TCP rendezvous between hosts), exactly as a plain
//     MPI_Allgatherv moves them, with no staging buffer on either side;
//   - several batches can be in flight: the caller posts batch b, decodes batch b+1 and
//     progresses b with Test() between decode slices (Open MPI's ob1 progresses only inside
//     MPI calls), and waits only when its window is full or the batch is next to publish.
// Messages of one array carry the same tag on every rank and batches are posted in the same
// order everywhere, so MPI's non-overtaking rule matches them without sequence numbers.
// All calls of one exchange must come from one thread at a time; other threads may use MPI
// meanwhile only under MPI_THREAD_MULTIPLE (the Runtime checks this).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "batchcast/status.h"

namespace batchcast::mpi {

// One array of one exchange: rank j's part is bytes [displs[j], displs[j] + counts[j]) of
// base. Every rank should pass the same counts and displacements; `room` (empty: counts) is
// what a receive of rank j's part may take from displs[j] on, so that a peer that planned a
// larger part than this rank did is seen in received() instead of failing the receive.
// Every part is one message, also an empty one, so messages always match in order.
struct ExchangeArray {
  uint8_t* base = nullptr;
  std::vector<uint64_t> counts, displs, room;
};

class BatchExchange {
 public:
  BatchExchange() = default;
  // Pending requests may only be abandoned after an MPI error (the job is failing then).
  ~BatchExchange() = default;
  BatchExchange(BatchExchange&&) = default;
  BatchExchange& operator=(BatchExchange&&) = default;

  // Posts the receives of every other rank's parts and the sends of this rank's part of
  // each array (array a uses tag tag_base + a). A part over 2 GiB is refused.
  [[nodiscard]] Status Start(MPI_Comm comm, std::span<const ExchangeArray> arrays, int tag_base);
  // Progresses the exchange; *done is true once every send and receive has completed.
  [[nodiscard]] Status Test(bool* done);
  // Blocks until it completes.
  [[nodiscard]] Status Wait();
  bool done() const { return requests_.empty(); }
  // Bytes this rank received from the others (all arrays), once done.
  int64_t bytes_received() const { return bytes_received_; }
  // Bytes of rank j's part of array a that arrived, once done (this rank's own: its count).
  uint64_t received(size_t a, int j) const { return received_[a][size_t(j)]; }

 private:
  // Reads the received sizes from the completed requests' statuses.
  Status Completed();

  std::vector<MPI_Request> requests_;
  std::vector<MPI_Status> statuses_;
  std::vector<std::pair<size_t, int>> receives_;  // (array, rank) of requests_[i], i < size
  std::vector<std::vector<uint64_t>> received_;   // per array and rank
  int64_t bytes_received_ = 0;
};

}  // namespace batchcast::mpi
