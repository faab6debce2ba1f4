// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/cuda/device_probe.h"

#include "core/environment.h"
#include "core/errors.h"
#include "transport/cuda/cuda_status.h"

namespace batchcast::cuda {
namespace {

[[maybe_unused]] std::string VisibleDevicesNote() {
  const std::optional<std::string> v = env::Get(env::Var::kCudaVisibleDevices);
  return v ? fmt::format(" (CUDA_VISIBLE_DEVICES='{}')", *v) : std::string();
}

}  // namespace

#if BATCHCAST_HAVE_CUDA

bool BuiltWithCuda() { return true; }

Result<int> VisibleDeviceCount() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return UnavailableError("no CUDA device visible: {}{}; run on a GPU node",
                            cudaGetErrorString(err), VisibleDevicesNote());
  }
  if (n == 0)
    return UnavailableError("no CUDA device visible: cudaGetDeviceCount returned 0{}", VisibleDevicesNote());
  return n;
}

Result<std::string> DevicePciBusId(int device) {
  char id[32] = {};
  BC_CUDA_RETURN_IF_ERROR(cudaDeviceGetPCIBusId(id, sizeof id, device),
                          fmt::format("cuda: pci bus id of device {}", device));
  return std::string(id);
}

Result<int> DeviceByPciBusId(const std::string& bus_id) {
  int device = -1;
  cudaError_t err = cudaDeviceGetByPCIBusId(&device, bus_id.c_str());
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return NotFoundError("cuda: device {} is not visible to this process{}: {}", bus_id,
                         VisibleDevicesNote(), cudaGetErrorString(err));
  }
  return device;
}

Status DeviceMemory(int device, uint64_t* free_bytes, uint64_t* total_bytes) {
  BC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device), fmt::format("cuda: select device {}", device));
  size_t f = 0, t = 0;
  BC_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&f, &t), fmt::format("cuda: memory of device {}", device));
  *free_bytes = f;
  *total_bytes = t;
  return Status::Ok();
}

#else  // the CPU-only build: same functions, no device

bool BuiltWithCuda() { return false; }

Result<int> VisibleDeviceCount() {
  return UnavailableError(
      "no CUDA device visible: batchcast was built without CUDA (BATCHCAST_CUDA=OFF or no nvcc)");
}
Result<std::string> DevicePciBusId(int) { return VisibleDeviceCount().status(); }
Result<int> DeviceByPciBusId(const std::string&) { return VisibleDeviceCount().status(); }
Status DeviceMemory(int, uint64_t*, uint64_t*) { return VisibleDeviceCount().status(); }

#endif

}  // namespace batchcast::cuda
