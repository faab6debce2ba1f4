// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/worker_pool.h"

#include <algorithm>
#include <chrono>

#include "core/clock.h"
#include "core/thread_name.h"

namespace batchcast::pipeline {

WorkerPool::WorkerPool(int threads, const std::string& name) : nthreads_(threads) {
  threads_.reserve(threads);
  for (int w = 0; w < threads; ++w)
    threads_.emplace_back([this, w, name] {
      NameThread(name + "-" + std::to_string(w));
      Work(w);
    });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

WorkerPool::Ticket WorkerPool::Submit(int64_t items, ItemFn fn) {
  std::lock_guard<std::mutex> lock(mu_);
  auto loop = std::make_shared<Loop>();
  loop->ticket = ++submitted_;
  loop->items = std::max<int64_t>(items, 0);
  loop->fn = std::move(fn);
  if (loop->items > 0) {
    loops_.push_back(std::move(loop));
    if (idle_since_ns_ != 0) {
      idle_total_ns_ += core::SteadyNowNs() - idle_since_ns_;
      idle_since_ns_ = 0;
    }
    work_cv_.notify_all();
  }
  return submitted_;
}

bool WorkerPool::DoneLocked(Ticket ticket) const {
  for (const auto& l : loops_)
    if (l->ticket == ticket) return false;
  return true;
}

void WorkerPool::Wait(Ticket ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return DoneLocked(ticket); });
}

bool WorkerPool::WaitFor(Ticket ticket, int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  return done_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                           [&] { return DoneLocked(ticket); });
}

int64_t WorkerPool::idle_ns() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_total_ns_ + (idle_since_ns_ != 0 ? core::SteadyNowNs() - idle_since_ns_ : 0);
}

void WorkerPool::Work(int worker) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // The oldest loop with an item nobody took yet.
    std::shared_ptr<Loop> loop;
    for (const auto& l : loops_)
      if (l->next < l->items) {
        loop = l;
        break;
      }
    if (!loop) {
      if (stop_) return;  // queued loops are finished before the threads end
      if (++waiting_ == threads() && idle_since_ns_ == 0) idle_since_ns_ = core::SteadyNowNs();
      work_cv_.wait(lock);
      --waiting_;
      continue;
    }
    const int64_t item = loop->next++;
    lock.unlock();
    loop->fn(worker, item);
    lock.lock();
    if (++loop->done == loop->items) {
      loops_.erase(std::find(loops_.begin(), loops_.end(), loop));
      done_cv_.notify_all();
    }
  }
}

}  // namespace batchcast::pipeline
