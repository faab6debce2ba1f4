// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "core/hdf5_lock.h"

#include <atomic>

#include "core/clock.h"

namespace batchcast {
namespace {

thread_local Hdf5LockTimes t_times;
std::atomic<int64_t> g_wait_ns{0}, g_hold_ns{0}, g_acquisitions{0};

}  // namespace

std::mutex& Hdf5Lock() {
  static std::mutex mu;  // function-local: initialised on first use, never destroyed early
  return mu;
}

Hdf5LockTimes ThisThreadHdf5LockTimes() { return t_times; }

Hdf5LockTimes ProcessHdf5LockTimes() {
  return Hdf5LockTimes{g_wait_ns.load(std::memory_order_relaxed),
                       g_hold_ns.load(std::memory_order_relaxed),
                       g_acquisitions.load(std::memory_order_relaxed)};
}

Hdf5Guard::Hdf5Guard() {
  std::mutex& mu = Hdf5Lock();
  if (mu.try_lock()) {
    held_since_ns_ = core::SteadyNowNs();
  } else {
    const int64_t t0 = core::SteadyNowNs();
    mu.lock();
    held_since_ns_ = core::SteadyNowNs();
    wait_ns_ = held_since_ns_ - t0;
    t_times.wait_ns += wait_ns_;
  }
  ++t_times.acquisitions;
}

Hdf5Guard::~Hdf5Guard() {
  const int64_t held = core::SteadyNowNs() - held_since_ns_;
  Hdf5Lock().unlock();
  t_times.hold_ns += held;
  g_hold_ns.fetch_add(held, std::memory_order_relaxed);
  g_wait_ns.fetch_add(wait_ns_, std::memory_order_relaxed);
  g_acquisitions.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace batchcast
