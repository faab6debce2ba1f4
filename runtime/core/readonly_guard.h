// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// A process-wide registry of read-only regions (shared batch memory mapped PROT_READ) and
// the SIGSEGV handler that explains a write into one of them.
//
// A trainer that writes into a shared batch in place (`images.div_(255)`, a C++ write
// through const_cast) faults on the PROT_READ mapping. Without help it dies with a bare
// "Segmentation fault". With the region registered, the handler first writes one line that
// names the shared batch and the fix:
//
//   batchcast: this process wrote into a shared batch (batch memory of the leader at
//   @batchcast-0-service (pid 123), read-only: every trainer on the node reads it); copy it
//   before modifying in place, e.g. images = images.clone() (torch) / np.array(view)
//   (numpy) / std::memcpy to your own buffer (C++)
//
// and then hands the fault on: it reinstalls the handler that was there before (the
// default action when there was none) and returns, so the faulting write repeats and the
// process dies with SIGSEGV (core dump and exit status as usual), after Python's
// faulthandler or any other previous handler saw it too. Faults outside registered
// regions go straight to the previous handler, called in place as a chained handler;
// registered regions cost nothing until they fault.
//
// The handler is installed once, at the first registration (sigaction, SA_SIGINFO |
// SA_ONSTACK: it runs on the thread's alternate stack where one exists, e.g. Python's
// faulthandler's; it never needs one itself, as a write into a read-only page is not a
// stack overflow). It is async-signal-safe: a lock-free lookup in a fixed table of
// kMaxReadOnlyRegions slots and write(2) of text formatted at registration.
#pragma once

#include <cstddef>
#include <string>

#include "batchcast/status.h"

namespace batchcast {

inline constexpr int kMaxReadOnlyRegions = 256;

// Registers [base, base + len) as shared read-only memory described by `what` (e.g.
// "batch memory of the leader at @batchcast-0-service (pid 123)"; long descriptions are
// cut to fit the preformatted message). Thread-safe. Errors: len == 0 or base null
// (invalid argument), base already registered (failed precondition), table full
// (resource exhausted), sigaction failure (i/o error).
[[nodiscard]] Status RegisterReadOnlyRegion(const void* base, size_t len,
                                            const std::string& what);
// Forgets the region that starts at `base` (no-op when none does). Call it before
// unmapping. Thread-safe.
void UnregisterReadOnlyRegion(const void* base);

// The message the handler writes for a region described by `what` (without the line
// with the faulting address), for tests and documentation.
std::string ReadOnlyWriteMessage(const std::string& what);

}  // namespace batchcast
