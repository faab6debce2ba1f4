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

std::string CudaVersions() {
  int driver = 0, runtime = 0;
  (void)cudaDriverGetVersion(&driver);  // 0: no driver library (libcuda.so.1) could be loaded
  (void)cudaRuntimeGetVersion(&runtime);
  (void)cudaGetLastError();
  auto text = [](int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); };
  if (driver == 0)
    return fmt::format("no CUDA driver found (libcuda.so.1 did not load; batchcast's CUDA "
                       "runtime is {}): install the NVIDIA driver or run on a GPU node",
                       text(runtime));
  if (driver < runtime)
    return fmt::format("the CUDA driver supports CUDA {} < batchcast's CUDA runtime {}: update "
                       "the driver to one for CUDA {} or newer, or use a batchcast built with "
                       "an older CUDA", text(driver), text(runtime), text(runtime));
  return fmt::format("CUDA driver {}, runtime {}", text(driver), text(runtime));
}

Result<int> VisibleDeviceCount() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return UnavailableError("no CUDA device visible: {}{}; {}", cudaGetErrorString(err),
                            VisibleDevicesNote(), CudaVersions());
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

std::string CudaVersions() { return "batchcast was built without CUDA"; }

Result<int> VisibleDeviceCount() {
  return UnavailableError(
      "no CUDA device visible: batchcast was built without CUDA (BATCHCAST_CUDA=OFF or no nvcc)");
}
Result<std::string> DevicePciBusId(int) { return VisibleDeviceCount().status(); }
Result<int> DeviceByPciBusId(const std::string&) { return VisibleDeviceCount().status(); }
Status DeviceMemory(int, uint64_t*, uint64_t*) { return VisibleDeviceCount().status(); }

#endif

}  // namespace batchcast::cuda
