// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// A device tensor as a DLPack capsule payload (kDLCUDA), for the Python module's
// zero-copy hand-off to torch (torch.utils.dlpack.from_dlpack). The managed tensor owns a
// KeepAlive() handle: the slot stays alive until the consumer of the capsule calls its
// deleter. Needs only <dlpack/dlpack.h> (libdlpack-dev), no CUDA: built in both builds.
#pragma once

#include <memory>

#include "batchcast/gpu.h"

struct DLManagedTensor;

namespace batchcast::gpu {

// Returns a DLManagedTensor the caller hands on (its deleter frees it and drops
// `keep_alive`), or null when this build has no dlpack.h.
DLManagedTensor* ToDlpack(const DeviceTensorView& view, std::shared_ptr<void> keep_alive);

}  // namespace batchcast::gpu
