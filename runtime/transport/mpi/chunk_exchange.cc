// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/mpi/chunk_exchange.h"

#include "transport/mpi/mpi_status.h"

namespace batchcast::mpi {

ChunkExchange::ChunkExchange(MPI_Comm comm) : comm_(comm), thread_([this] { Loop(); }) {}

ChunkExchange::~ChunkExchange() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ChunkExchange::Post(std::vector<GatherPart> parts) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(parts));
  }
  cv_.notify_all();
}

Status ChunkExchange::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return queue_.empty() && running_ == 0; });
  Status st = status_;
  status_ = Status::Ok();
  return st;
}

void ChunkExchange::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    std::vector<GatherPart> parts = std::move(queue_.front());
    queue_.pop_front();
    running_ = 1;
    const bool skip = !status_.ok();
    lock.unlock();
    Status st;
    for (GatherPart& p : parts) {
      if (skip || !st.ok()) break;
      const int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p.base, p.counts.data(),
                                    p.displs.data(), p.type, comm_);
      if (rc != MPI_SUCCESS) st = FromMpi(rc, "MPI_Allgatherv (node leaders: chunk exchange)");
    }
    lock.lock();
    if (status_.ok() && !st.ok()) status_ = st;
    running_ = 0;
    cv_.notify_all();
  }
}

}  // namespace batchcast::mpi
