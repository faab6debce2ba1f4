// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// What this process sees of CUDA, as one JSON line, for device/run.sh: whether batchcast
// was built with CUDA, the driver and runtime versions, the visible devices (and GPU 0's
// PCI bus id and memory), or the probe's message when there is none. Exit 0 either way.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "transport/cuda/device_probe.h"

int main() {
  namespace cuda = batchcast::cuda;
  nlohmann::json j;
  j["built_with_cuda"] = cuda::BuiltWithCuda();
  j["versions"] = cuda::CudaVersions();
  auto n = cuda::VisibleDeviceCount();
  j["devices"] = n.ok() ? n.value() : 0;
  if (!n.ok()) j["cause"] = n.status().message();
  if (n.ok()) {
    auto bus = cuda::DevicePciBusId(0);
    j["gpu0_bus"] = bus.ok() ? bus.value() : bus.status().message();
    uint64_t free_bytes = 0, total = 0;
    if (cuda::DeviceMemory(0, &free_bytes, &total).ok()) {
      j["gpu0_free_mib"] = free_bytes >> 20;
      j["gpu0_total_mib"] = total >> 20;
    }
  }
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
