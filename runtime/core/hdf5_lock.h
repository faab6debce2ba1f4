// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The one process-wide lock around HDF5 calls. Debian's libhdf5 is built without
// --enable-threadsafe, so two threads inside the library at once corrupt its state. Every
// module that calls HDF5 (data readers, telemetry sinks, the CLI) holds this mutex for the
// duration of each HDF5 call sequence. It lives in core so that modules which may not
// include each other (data, telemetry) still share one lock.
#pragma once

#include <mutex>

namespace batchcast {

// The mutex every HDF5 user in the process takes: `std::lock_guard lock(Hdf5Lock());`.
std::mutex& Hdf5Lock();

}  // namespace batchcast
