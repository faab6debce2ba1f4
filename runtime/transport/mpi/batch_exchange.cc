// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/mpi/batch_exchange.h"

#include <climits>

#include "core/errors.h"
#include "core/mpi_status.h"

namespace batchcast::mpi {

Status BatchExchange::Start(MPI_Comm comm, std::span<const ExchangeArray> arrays,
                            int tag_base) {
  if (!requests_.empty())
    return FailedPreconditionError("batch exchange: started again while still in flight; wait "
                                   "for it first");
  int me = 0, size = 0;
  BC_MPI(MPI_Comm_rank(comm, &me), "MPI_Comm_rank (node leaders)");
  BC_MPI(MPI_Comm_size(comm, &size), "MPI_Comm_size (node leaders)");
  bytes_received_ = 0;
  for (size_t a = 0; a < arrays.size(); ++a) {
    const ExchangeArray& x = arrays[a];
    if (x.counts.size() != size_t(size) || x.displs.size() != size_t(size))
      return InvalidArgumentError("batch exchange: array {} has {} counts for {} ranks", a,
                                  x.counts.size(), size);
    for (int j = 0; j < size; ++j)
      if (x.counts[size_t(j)] > uint64_t(INT_MAX))
        return InvalidArgumentError("batch exchange: rank {}'s part of array {} is {} bytes, over "
                                    "one MPI count (2 GiB); lower producer_batch", j, a,
                                    x.counts[size_t(j)]);
  }
  requests_.reserve(arrays.size() * 2 * size_t(size));
  // Receives first, so that a peer's send finds its match posted.
  for (size_t a = 0; a < arrays.size(); ++a) {
    const ExchangeArray& x = arrays[a];
    for (int j = 0; j < size; ++j) {
      if (j == me || x.counts[size_t(j)] == 0) continue;
      MPI_Request r = MPI_REQUEST_NULL;
      BC_MPI(MPI_Irecv(x.base + x.displs[size_t(j)], static_cast<int>(x.counts[size_t(j)]),
                       MPI_BYTE, j, tag_base + static_cast<int>(a), comm, &r),
             "MPI_Irecv (node leaders: batch exchange)");
      requests_.push_back(r);
      bytes_received_ += static_cast<int64_t>(x.counts[size_t(j)]);
    }
  }
  for (size_t a = 0; a < arrays.size(); ++a) {
    const ExchangeArray& x = arrays[a];
    if (x.counts[size_t(me)] == 0) continue;
    for (int k = 1; k < size; ++k) {  // start with the next rank so senders spread out
      const int j = (me + k) % size;
      MPI_Request r = MPI_REQUEST_NULL;
      BC_MPI(MPI_Isend(x.base + x.displs[size_t(me)], static_cast<int>(x.counts[size_t(me)]),
                       MPI_BYTE, j, tag_base + static_cast<int>(a), comm, &r),
             "MPI_Isend (node leaders: batch exchange)");
      requests_.push_back(r);
    }
  }
  return Status::Ok();
}

Status BatchExchange::Test(bool* done) {
  *done = requests_.empty();
  if (*done) return Status::Ok();
  int flag = 0;
  BC_MPI(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag,
                     MPI_STATUSES_IGNORE),
         "MPI_Testall (node leaders: batch exchange)");
  if (flag) requests_.clear();
  *done = flag != 0;
  return Status::Ok();
}

Status BatchExchange::Wait() {
  if (requests_.empty()) return Status::Ok();
  BC_MPI(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE),
         "MPI_Waitall (node leaders: batch exchange)");
  requests_.clear();
  return Status::Ok();
}

}  // namespace batchcast::mpi
