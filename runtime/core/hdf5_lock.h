// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The one process-wide lock around HDF5 calls. Debian's libhdf5 is built without
// --enable-threadsafe, so two threads inside the library at once corrupt its state. Every
// module that calls HDF5 (data readers, telemetry sinks, the CLI) holds this mutex for the
// duration of each HDF5 call sequence. It lives in core so that modules which may not
// include each other (data, telemetry) still share one lock.
//
// Hot paths take it through Hdf5Guard, which also counts, per thread, how long the thread
// waited for the lock and how long it held it: the pipeline reports the waits as their own
// telemetry timer (lock_wait), and `bench read` the holds as the read path's serial time.
#pragma once

#include <cstdint>
#include <mutex>

namespace batchcast {

// The mutex every HDF5 user in the process takes: `std::lock_guard lock(Hdf5Lock());`.
std::mutex& Hdf5Lock();

// What the calling thread spent on Hdf5Guard sections so far (monotonic totals).
struct Hdf5LockTimes {
  int64_t wait_ns = 0;       // blocked before the lock was ours (0 when it was free)
  int64_t hold_ns = 0;       // from taking the lock to releasing it
  int64_t acquisitions = 0;  // guards taken
};
Hdf5LockTimes ThisThreadHdf5LockTimes();
// The same summed over every thread of the process (relaxed atomics, updated only when a
// guard is released): what `bench scaling` counts as the HDF5 lock's serial time.
Hdf5LockTimes ProcessHdf5LockTimes();

// Holds Hdf5Lock() for its scope and adds the wait and hold times to the calling thread's
// totals. An uncontended lock costs one try_lock and two clock reads.
class Hdf5Guard {
 public:
  Hdf5Guard();
  ~Hdf5Guard();
  Hdf5Guard(const Hdf5Guard&) = delete;
  Hdf5Guard& operator=(const Hdf5Guard&) = delete;

 private:
  int64_t held_since_ns_ = 0;
  int64_t wait_ns_ = 0;
};

}  // namespace batchcast
