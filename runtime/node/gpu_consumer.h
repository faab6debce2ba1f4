// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Builds a GpuConsumer (batchcast/gpu.h) over any device map: CUDA IPC to a stager or relay
// (gpu/), or local to the ring's own process. The front doors (node/runtime.cc,
// GpuConsumer::Attach) hand it the map gpu/ opened.
#pragma once

#include <memory>
#include <string>

#include "batchcast/consumer.h"
#include "batchcast/gpu.h"
#include "batchcast/status.h"
#include "gpu/gpu_plan.h"
#include "transport/cuda/device_map.h"

namespace batchcast::internal {

struct GpuConsumerFactory {
  static Result<std::unique_ptr<GpuConsumer>> Make(Consumer& consumer,
                                                   std::unique_ptr<cuda::DeviceMap> map);
};

// gpu=auto and batches the device path cannot map (they would be joined in private host
// memory: ConsumerAccess::CheckDeviceCarving): this trainer alone takes the host path. Logs
// the one WARN as `who`, sets *why and returns true; false (nothing logged) otherwise, and
// always under gpu=on, where Make refuses such a consumer with the same cause.
bool TrainerTakesHostPath(const Consumer& consumer, gpu::GpuMode mode, const std::string& who,
                          Status* why);

}  // namespace batchcast::internal
