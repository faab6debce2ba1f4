// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "core/hdf5_lock.h"

#include "core/clock.h"

namespace batchcast {
namespace {

thread_local Hdf5LockTimes t_times;

}  // namespace

std::mutex& Hdf5Lock() {
  static std::mutex mu;  // function-local: initialised on first use, never destroyed early
  return mu;
}

Hdf5LockTimes ThisThreadHdf5LockTimes() { return t_times; }

Hdf5Guard::Hdf5Guard() {
  std::mutex& mu = Hdf5Lock();
  if (mu.try_lock()) {
    held_since_ns_ = core::SteadyNowNs();
  } else {
    const int64_t t0 = core::SteadyNowNs();
    mu.lock();
    held_since_ns_ = core::SteadyNowNs();
    t_times.wait_ns += held_since_ns_ - t0;
  }
  ++t_times.acquisitions;
}

Hdf5Guard::~Hdf5Guard() {
  t_times.hold_ns += core::SteadyNowNs() - held_since_ns_;
  Hdf5Lock().unlock();
}

}  // namespace batchcast
