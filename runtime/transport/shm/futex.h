// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Cross-process futex wait/wake on 32-bit words in shared memory (non-private futexes).
// Waiting costs no CPU: the kernel parks the thread until a wake or the timeout.
#pragma once

#include <atomic>
#include <cstdint>

namespace batchcast::shm {

// Sleeps while *word == expected, at most timeout_ns (< 0: forever). Returns false on
// timeout; spurious returns are possible, so callers re-check their condition.
bool FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns);
// Wakes up to `count` waiters (INT32_MAX: all).
void FutexWake(std::atomic<uint32_t>* word, int count);

int64_t MonotonicNs();

}  // namespace batchcast::shm
