// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/mpi/batch_exchange.h"

#include <algorithm>
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
  receives_.clear();
  received_.assign(arrays.size(), std::vector<uint64_t>(size_t(size), 0));
  // Receives first, so that a peer's send finds its match posted.
  for (size_t a = 0; a < arrays.size(); ++a) {
    const ExchangeArray& x = arrays[a];
    for (int j = 0; j < size; ++j) {
      if (j == me) {
        received_[a][size_t(j)] = x.counts[size_t(j)];
        continue;
      }
      const uint64_t room = x.room.empty() ? x.counts[size_t(j)]
                                           : std::max(x.counts[size_t(j)], x.room[size_t(j)]);
      MPI_Request r = MPI_REQUEST_NULL;
      BC_MPI(MPI_Irecv(x.base + x.displs[size_t(j)],
                       static_cast<int>(std::min<uint64_t>(room, uint64_t(INT_MAX))), MPI_BYTE, j,
                       tag_base + static_cast<int>(a), comm, &r),
             "MPI_Irecv (node leaders: batch exchange)");
      requests_.push_back(r);
      receives_.emplace_back(a, j);
    }
  }
  for (size_t a = 0; a < arrays.size(); ++a) {
    const ExchangeArray& x = arrays[a];
    for (int k = 1; k < size; ++k) {  // start with the next rank so senders spread out
      const int j = (me + k) % size;
      MPI_Request r = MPI_REQUEST_NULL;
      BC_MPI(MPI_Isend(x.base + x.displs[size_t(me)], static_cast<int>(x.counts[size_t(me)]),
                       MPI_BYTE, j, tag_base + static_cast<int>(a), comm, &r),
             "MPI_Isend (node leaders: batch exchange)");
      requests_.push_back(r);
    }
  }
  statuses_.resize(requests_.size());
  return Status::Ok();
}

Status BatchExchange::Completed() {
  for (size_t i = 0; i < receives_.size(); ++i) {
    int count = 0;
    BC_MPI(MPI_Get_count(&statuses_[i], MPI_BYTE, &count), "MPI_Get_count (batch exchange)");
    const auto [a, j] = receives_[i];
    received_[a][size_t(j)] = uint64_t(count);
    bytes_received_ += count;
  }
  requests_.clear();
  return Status::Ok();
}

Status BatchExchange::Test(bool* done) {
  *done = requests_.empty();
  if (*done) return Status::Ok();
  int flag = 0;
  BC_MPI(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag,
                     statuses_.data()),
         "MPI_Testall (node leaders: batch exchange)");
  *done = flag != 0;
  return flag ? Completed() : Status::Ok();
}

Status BatchExchange::Wait() {
  if (requests_.empty()) return Status::Ok();
  BC_MPI(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), statuses_.data()),
         "MPI_Waitall (node leaders: batch exchange)");
  return Completed();
}

}  // namespace batchcast::mpi
