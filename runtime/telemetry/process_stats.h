// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Process resource readings for the sampler: CPU time (getrusage), resident set size
// (/proc/self/statm), CPUs available (affinity mask) and, through NVML loaded at run time
// with dlopen("libnvidia-ml.so.1"), GPU utilisation and memory. No NVML header or library
// is needed at build time; without a driver the GPU is reported absent (never zero).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace batchcast::telemetry {

// User + system CPU seconds of the whole process so far.
double ProcessCpuSeconds();
// Resident set size in bytes now (0 if /proc is unavailable).
int64_t ProcessRssBytes();
// Peak resident set size in bytes (getrusage ru_maxrss).
int64_t ProcessPeakRssBytes();

struct GpuReading {
  double util_pct = 0;   // "percent of time over the past sample period" a kernel ran
  int64_t mem_used = 0;  // device memory in use, bytes (whole device)
};

// A GPU device opened through NVML. Open() returns null when NVML or the device is absent.
struct Nvml {
  static std::unique_ptr<Nvml> Open(int device_index);
  ~Nvml();
  bool Read(GpuReading* out);

  std::string name;
  int index = -1;
  void* lib = nullptr;
  void* device = nullptr;
  // Resolved entry points (NVML's C ABI declared by hand; nvml.h is not installed).
  int (*shutdown)() = nullptr;
  int (*get_util)(void*, void*) = nullptr;
  int (*get_mem)(void*, void*) = nullptr;
};

// The device for a rank: `requested` if >= 0, else the first CUDA_VISIBLE_DEVICES entry
// when it is a number (NVML counts all devices, not the visible ones), else local_rank.
int PickGpuIndex(int requested, int local_rank);

}  // namespace batchcast::telemetry
