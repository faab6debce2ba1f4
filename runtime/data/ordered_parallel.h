// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// OrderedParallelMap: `threads` workers produce items 0..n-1 in any order; the calling
// thread consumes them strictly in index order (e.g. HDF5 writes, which must stay on one
// thread). At most `window` items are produced ahead of the consumer, bounding memory.
// A consumer error stops the workers and is returned.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "batchcast/status.h"

namespace batchcast::data {

template <typename Item>
Status OrderedParallelMap(int64_t n, int threads, int64_t window,
                          const std::function<Item(int64_t)>& produce,
                          const std::function<Status(int64_t, Item&&)>& consume) {
  window = std::max<int64_t>(window, 1);
  std::mutex mu;
  std::condition_variable can_produce, ready;
  std::vector<std::optional<Item>> slots(static_cast<size_t>(window));
  int64_t next = 0, consumed = 0;
  bool stop = false;
  auto worker = [&] {
    std::unique_lock lock(mu);
    while (true) {
      can_produce.wait(lock, [&] { return stop || next >= n || next < consumed + window; });
      if (stop || next >= n) return;
      int64_t i = next++;
      lock.unlock();
      Item item = produce(i);
      lock.lock();
      slots[size_t(i % window)].emplace(std::move(item));
      ready.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(threads, 1); ++t) pool.emplace_back(worker);
  Status st;
  for (int64_t i = 0; i < n && st.ok(); ++i) {
    std::optional<Item> item;
    {
      std::unique_lock lock(mu);
      ready.wait(lock, [&] { return slots[size_t(i % window)].has_value(); });
      item = std::move(slots[size_t(i % window)]);
      slots[size_t(i % window)].reset();
      consumed = i + 1;
    }
    can_produce.notify_all();
    st = consume(i, std::move(*item));
  }
  {
    std::lock_guard lock(mu);
    stop = true;
  }
  can_produce.notify_all();
  for (auto& t : pool) t.join();
  return st;
}

}  // namespace batchcast::data
