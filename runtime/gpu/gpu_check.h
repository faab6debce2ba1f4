// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The safe device path (docs/gpu.md "The safe device path"). Before its first batch, every
// GPU trainer checks its device path once, whatever front door made it (the MPI Runtime,
// a trial of `batchcast serve`, a trainer of `batchcast-run`): the device map is opened
// (handle socket, table, lane), the leader's canary allocation is mapped by IPC, its
// events are imported (and the release event recorded), and its bytes are read back and
// compared by checksum with the host bytes the leader copied in (transport/cuda/canary.h).
//
// gpu=auto: a failure keeps the trainer on the host path; the caller logs FallbackWarning
// once (the MPI Runtime once per node, for the node's first failure). gpu=on: the failure
// is the error, naming the step and the cause.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "batchcast/status.h"
#include "gpu/gpu_plan.h"
#include "transport/cuda/device_map.h"

namespace batchcast::gpu {

enum class CheckStep { kOpen, kMap, kEventImport, kChecksum };
// "open" | "map" | "event import" | "checksum"
const char* CheckStepName(CheckStep step);

// The canary steps on an open map (map, event import, checksum). The error names the step:
// "gpu: device path check failed at step 'map' (...): <cause>".
Status VerifyDeviceMap(cuda::DeviceMap& map);

using DeviceMapOpener = std::function<Result<std::unique_ptr<cuda::DeviceMap>>()>;

// Opens a map with `open` and verifies it. A map that passed; under gpu=auto a failure
// gives a null map with an ok result and the failure in `*fallback` (the host path), and
// when `warn_as` is not empty the one WARN (FallbackWarning(warn_as, ...)) is logged here;
// under gpu=on it is the error ("gpu=on, but ..."). gpu=off is the caller's (no map).
Result<std::unique_ptr<cuda::DeviceMap>> OpenCheckedMap(GpuMode mode, const DeviceMapOpener& open,
                                                        const std::string& warn_as,
                                                        Status* fallback);

// The one WARN line for a gpu=auto fallback: the cause, that the host path is taken, and how
// to report it.
std::string FallbackWarning(const std::string& who, const Status& failure);

// The WARN for a trainer that takes the host path under gpu=auto by its own configuration
// (its batches cannot be mapped: `why` says which option and what to change); the node's
// other trainers keep the device path.
std::string TrainerHostPathWarning(const Status& why);

}  // namespace batchcast::gpu
