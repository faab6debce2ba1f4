// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// A fixed pool of worker threads that runs parallel loops. Workers sleep on a condition
// variable when there is nothing to do (no busy-waiting). Loops are queued: a worker takes
// the next item of the oldest loop that has items left, so when one loop's last items are
// in progress the idle workers already work on the next loop (a producer batch's slow last
// sample never idles the others). Threads are named `<name>-N` (top -H, profilers).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/cores.h"

namespace batchcast::pipeline {

// Cores this process may run on (core/cores.h), at least 1.
using batchcast::AvailableCores;

class WorkerPool {
 public:
  using ItemFn = std::function<void(int worker, int64_t item)>;
  using Ticket = uint64_t;

  explicit WorkerPool(int threads, const std::string& name = "bc-decode");
  ~WorkerPool();  // finishes the queued loops first
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return nthreads_; }

  // Queues fn(worker, item) for every item in [0, items) and returns at once. `worker` is
  // in [0, threads()); items of one loop run in any order, loops start in Submit order.
  Ticket Submit(int64_t items, ItemFn fn);
  // Returns when every call of loop `ticket` has returned.
  void Wait(Ticket ticket);
  // Wait for at most timeout_ms; true when loop `ticket` is done.
  bool WaitFor(Ticket ticket, int64_t timeout_ms);
  // Nanoseconds during which every worker had nothing to do (telemetry, benchmarks).
  int64_t idle_ns() const;
  // Submit and Wait.
  void Run(int64_t items, const ItemFn& fn) { Wait(Submit(items, fn)); }

 private:
  struct Loop {
    Ticket ticket = 0;
    int64_t items = 0, next = 0, done = 0;
    ItemFn fn;
  };
  void Work(int worker);
  bool DoneLocked(Ticket ticket) const;

  const int nthreads_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  bool stop_ = false;
  Ticket submitted_ = 0;
  std::deque<std::shared_ptr<Loop>> loops_;  // loops with calls not yet returned, in order
  int waiting_ = 0;                // workers waiting for work
  int64_t idle_since_ns_ = 0;      // all workers waiting since (0: some worker busy)
  int64_t idle_total_ns_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace batchcast::pipeline
