// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Per-rank GPU selection from the launcher's placement (batchcast/gpu.h); attaching a
// GpuConsumer from the environment is the front door's (node/gpu_consumer.cc).
#include <optional>
#include <string>

#include "batchcast/gpu.h"
#include "core/environment.h"
#include "core/errors.h"
#include "transport/cuda/device_probe.h"

namespace batchcast {

Result<int> GpuForLocalRank(int local_rank, int trainers_per_gpu, int visible) {
  if (local_rank < 0) return InvalidArgumentError("gpu: local rank {} is negative", local_rank);
  if (trainers_per_gpu < 1)
    return InvalidArgumentError("gpu: trainers_per_gpu {} must be at least 1", trainers_per_gpu);
  if (visible < 1) return UnavailableError("no CUDA device visible: 0 devices");
  const int device = local_rank / trainers_per_gpu;
  if (device >= visible)
    return InvalidArgumentError(
        "gpu: local rank {} with {} trainers per GPU needs GPU {}, but this process sees {} "
        "GPU(s); start fewer trainers per node or raise trainers_per_gpu",
        local_rank, trainers_per_gpu, device, visible);
  return device;
}

Result<int> SelectGpu(const GpuPlacement& placement) {
  int local = placement.local_rank;
  if (local < 0) {
    Result<std::optional<int>> launcher = env::LauncherLocalRank();
    if (!launcher.ok()) return launcher.status().WithContext("gpu");
    local = launcher->value_or(0);
  }
  int k = placement.trainers_per_gpu;
  if (k <= 0) {  // option trainers_per_gpu from the environment; unset or 0: one per GPU
    Options o;
    BC_RETURN_IF_ERROR(env::ApplyOption("trainers_per_gpu", &o).WithContext("gpu"));
    if (o.trainers_per_gpu < 0)
      return InvalidArgumentError("gpu: BATCHCAST_TRAINERS_PER_GPU={} must be >= 0 (0: one "
                                  "trainer per GPU here)", o.trainers_per_gpu);
    k = o.trainers_per_gpu > 0 ? o.trainers_per_gpu : 1;
  }
  BC_ASSIGN_OR_RETURN(int visible, cuda::VisibleDeviceCount());
  // A launcher that pins one GPU per rank (CUDA_VISIBLE_DEVICES=<one id>) leaves exactly one
  // visible device: it is this rank's, whatever its local rank.
  if (visible == 1) return 0;
  return GpuForLocalRank(local, k, visible);
}

}  // namespace batchcast
