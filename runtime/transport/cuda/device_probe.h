// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Which CUDA devices this process sees. Built in both builds: without CUDA the probe
// answers "no CUDA device visible: batchcast was built without CUDA", so callers have
// one code path and one message.
#pragma once

#include <cstdint>
#include <string>

#include "batchcast/status.h"

namespace batchcast::cuda {

// True when this binary was compiled with the CUDA data plane.
bool BuiltWithCuda();
// The CUDA driver and runtime versions this process found, with what to do when the driver
// is missing or older than the runtime ("the CUDA driver supports CUDA 12.4 < batchcast's
// CUDA runtime 13.0: update the driver ..."). Needs no device.
std::string CudaVersions();
// Number of visible devices, or kUnavailable "no CUDA device visible: <cause>" when
// cudaGetDeviceCount fails (with CudaVersions()) or returns 0 (CUDA_VISIBLE_DEVICES named
// when set).
Result<int> VisibleDeviceCount();
// PCI bus id of visible device `device` ("0000:1b:00.0"): the identity two processes
// compare, since their CUDA_VISIBLE_DEVICES (and so their ordinals) may differ.
Result<std::string> DevicePciBusId(int device);
// Visible ordinal of the device with this PCI bus id (kNotFound if not visible here).
Result<int> DeviceByPciBusId(const std::string& bus_id);
// Free and total bytes of device memory on `device`.
Status DeviceMemory(int device, uint64_t* free_bytes, uint64_t* total_bytes);

}  // namespace batchcast::cuda
