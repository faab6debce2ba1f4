// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// GPU discovery for placement: `nvidia-smi -L` (GPUs and their MIG instances, with UUIDs),
// else /proc/driver/nvidia/gpus (count only). No CUDA or NVML is loaded.
#pragma once

#include <string>
#include <vector>

#include "batchcast/status.h"

namespace batchcast::run {

struct GpuDevice {
  int index = 0;
  std::string uuid;  // "GPU-..." (empty when only /proc told us)
  std::string name;
  std::vector<std::string> mig_uuids;  // "MIG-..." instances of this GPU
};

// Parses the text `nvidia-smi -L` prints.
std::vector<GpuDevice> ParseNvidiaSmiList(const std::string& text);

// Runs `<nvidia_smi> -L` (empty path: look on PATH); falls back to counting
// /proc/driver/nvidia/gpus/*. No GPU is an empty list, not an error.
std::vector<GpuDevice> DetectGpus(const std::string& nvidia_smi);

}  // namespace batchcast::run
