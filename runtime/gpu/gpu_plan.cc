// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "gpu/gpu_plan.h"

#include "core/errors.h"

namespace batchcast::gpu {

Result<GpuMode> ParseGpuMode(const std::string& text) {
  if (text == "auto") return GpuMode::kAuto;
  if (text == "off") return GpuMode::kOff;
  if (text == "on") return GpuMode::kOn;
  return InvalidArgumentError("option 'gpu': '{}' is not one of auto|off|on", text);
}

const char* GpuModeName(GpuMode mode) {
  switch (mode) {
    case GpuMode::kOff: return "off";
    case GpuMode::kAuto: return "auto";
    case GpuMode::kOn: return "on";
  }
  return "?";
}

Result<GpuDecision> DecideGpuPath(GpuMode mode, const GpuProbe& probe) {
  if (mode == GpuMode::kOff) return GpuDecision{false, "gpu=off: host path"};
  if (!probe.built_with_cuda) {
    if (mode == GpuMode::kOn)
      return FailedPreconditionError(
          "gpu=on, but batchcast was built without CUDA (BATCHCAST_CUDA=OFF or no nvcc); "
          "rebuild with CUDA or set gpu=auto or gpu=off");
    return GpuDecision{false, "gpu=auto: host path (batchcast was built without CUDA)"};
  }
  if (probe.visible_devices <= 0) {
    const std::string cause = probe.cause.empty() ? "no CUDA device visible" : probe.cause;
    if (mode == GpuMode::kOn)
      return FailedPreconditionError(
          "gpu=on, but this trainer sees no GPU ({}); run the trainers on GPU nodes (check "
          "CUDA_VISIBLE_DEVICES and the launcher's --gpus) or set gpu=auto",
          cause);
    return GpuDecision{false, "gpu=auto: host path (" + cause + ")"};
  }
  return GpuDecision{true, "gpu=" + std::string(GpuModeName(mode)) + ": device path"};
}

Result<int> GpuForTrainer(int trainer_index, int node_trainers, int trainers_per_gpu,
                          int visible_devices) {
  if (visible_devices <= 0) return UnavailableError("no CUDA device visible: 0 devices");
  if (trainer_index < 0 || trainer_index >= node_trainers)
    return InvalidArgumentError("gpu: trainer index {} outside the node's {} trainers",
                                trainer_index, node_trainers);
  if (visible_devices == 1) return 0;
  int k = trainers_per_gpu;
  if (k == 0) k = (node_trainers + visible_devices - 1) / visible_devices;
  const int device = trainer_index / k;
  if (device >= visible_devices)
    return InvalidArgumentError(
        "gpu: trainer {} of {} on this node with trainers_per_gpu={} needs GPU {}, but this "
        "process sees {} GPU(s); raise trainers_per_gpu, set it to 0 (spread), or start "
        "fewer trainers per node",
        trainer_index, node_trainers, k, device, visible_devices);
  return device;
}

int NodeGpuPlan::NcclRank(int local_rank) const {
  if (relay_bus.empty()) return -1;
  if (local_rank == 0) return 0;
  for (size_t i = 0; i < relay_rank.size(); ++i)
    if (relay_rank[i] == local_rank) return static_cast<int>(i) + 1;
  return -1;
}

NodeGpuPlan PlanNodeGpus(const std::vector<std::string>& bus) {
  NodeGpuPlan plan;
  plan.source.assign(bus.size(), -1);
  for (size_t r = 0; r < bus.size(); ++r) {
    if (bus[r].empty()) continue;
    if (plan.stager_bus.empty()) plan.stager_bus = bus[r];
    if (bus[r] == plan.stager_bus) {
      plan.source[r] = 0;
      continue;
    }
    size_t i = 0;
    while (i < plan.relay_bus.size() && plan.relay_bus[i] != bus[r]) ++i;
    if (i == plan.relay_bus.size()) {
      plan.relay_bus.push_back(bus[r]);
      plan.relay_rank.push_back(static_cast<int>(r));
    }
    plan.source[r] = static_cast<int>(i) + 1;
  }
  return plan;
}

}  // namespace batchcast::gpu
