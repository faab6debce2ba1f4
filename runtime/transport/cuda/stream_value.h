// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// GPU-side waits on a 64-bit value in device memory (cuStreamWriteValue64 /
// cuStreamWaitValue64), resolved at run time through cudaGetDriverEntryPointByVersion so
// nothing links libcuda (binaries still start on machines without a driver).
//
// Why: a relay (node/gpu_relay.h) stages a producer batch asynchronously to the host
// publish, so a consumer may see the host batch before the relay has *issued* the ready
// record for it; waiting on the event would then wait on the previous record and read
// stale bytes. Each relay slot carries a sequence word written after the slot is filled;
// a consumer's stream waits until it reaches the batch's position.
#pragma once

#include <cstdint>

#include "batchcast/status.h"

namespace batchcast::cuda {

// Enqueues on `stream` (cudaStream_t): *address = value, after the work before it.
Status StreamWriteValue(void* stream, void* device_address, uint64_t value);
// Enqueues on `stream`: wait until *address >= value (as unsigned 64-bit).
Status StreamWaitValue(void* stream, const void* device_address, uint64_t value);

}  // namespace batchcast::cuda
