// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Per-rank GPU selection from the launcher's placement (batchcast/gpu.h); attaching a
// GpuConsumer from the environment is the front door's (node/gpu_consumer.cc).
#include <cstdlib>
#include <string>

#include "batchcast/gpu.h"
#include "core/errors.h"
#include "transport/cuda/device_probe.h"

namespace batchcast {
namespace {

// First of the launchers' local-rank variables that is set: torchrun, Open MPI, Slurm.
Result<int> LocalRankFromEnvironment() {
  for (const char* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    long r = std::strtol(v, &end, 10);
    if (*end != '\0' || r < 0)
      return InvalidArgumentError("gpu: {}='{}' is not a local rank; fix the launcher", name, v);
    return static_cast<int>(r);
  }
  return 0;
}

}  // namespace

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
    BC_ASSIGN_OR_RETURN(local, LocalRankFromEnvironment());
  }
  int k = placement.trainers_per_gpu;
  if (k <= 0) {
    const char* v = std::getenv("BATCHCAST_TRAINERS_PER_GPU");
    k = v ? std::atoi(v) : 1;
    if (k <= 0)
      return InvalidArgumentError("gpu: BATCHCAST_TRAINERS_PER_GPU='{}' must be a positive integer",
                                  v ? v : "");
  }
  BC_ASSIGN_OR_RETURN(int visible, cuda::VisibleDeviceCount());
  // A launcher that pins one GPU per rank (CUDA_VISIBLE_DEVICES=<one id>) leaves exactly one
  // visible device: it is this rank's, whatever its local rank.
  if (visible == 1) return 0;
  return GpuForLocalRank(local, k, visible);
}

}  // namespace batchcast
