// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/worker_pool.h"

#include <sched.h>

namespace batchcast::pipeline {

int AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

WorkerPool::WorkerPool(int threads) {
  threads_.reserve(threads);
  for (int w = 0; w < threads; ++w) threads_.emplace_back([this, w] { Loop(w); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::Run(int64_t items, const ItemFn& fn) {
  if (items <= 0) return;
  std::unique_lock<std::mutex> lock(mu_);
  fn_ = &fn;
  items_ = items;
  next_.store(0, std::memory_order_relaxed);
  busy_ = threads();
  ++generation_;
  work_cv_.notify_all();
  done_cv_.wait(lock, [this] { return busy_ == 0; });
  fn_ = nullptr;
}

void WorkerPool::Loop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    const ItemFn* fn;
    int64_t items;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
      items = items_;
    }
    for (int64_t i = next_.fetch_add(1, std::memory_order_relaxed); i < items;
         i = next_.fetch_add(1, std::memory_order_relaxed)) {
      (*fn)(worker, i);
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (--busy_ == 0) done_cv_.notify_one();
  }
}

}  // namespace batchcast::pipeline
