// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// A fixed pool of worker threads that runs one parallel loop at a time. Workers sleep on
// a condition variable between loops (no busy-waiting); within a loop they take items
// from a shared atomic counter, so a slow sample never holds up the others.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace batchcast::pipeline {

// Cores this process may run on (sched_getaffinity), at least 1.
int AvailableCores();

class WorkerPool {
 public:
  using ItemFn = std::function<void(int worker, int64_t item)>;

  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return static_cast<int>(threads_.size()); }

  // Calls fn(worker, item) for every item in [0, items) on the workers; returns when all
  // calls have returned. `worker` is in [0, threads()). One Run at a time.
  void Run(int64_t items, const ItemFn& fn);

 private:
  void Loop(int worker);

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;  // bumped by every Run
  bool stop_ = false;
  int busy_ = 0;             // workers still inside the current loop
  const ItemFn* fn_ = nullptr;
  int64_t items_ = 0;
  std::atomic<int64_t> next_{0};
  std::vector<std::thread> threads_;
};

}  // namespace batchcast::pipeline
