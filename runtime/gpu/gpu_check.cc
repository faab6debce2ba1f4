// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "gpu/gpu_check.h"

#include <vector>

#include "core/errors.h"
#include "core/log.h"
#include "transport/cuda/canary.h"

namespace batchcast::gpu {
namespace {

const char* StepWhat(CheckStep step) {
  switch (step) {
    case CheckStep::kOpen: return "open the leader's handle socket and device slot table";
    case CheckStep::kMap: return "map the leader's canary allocation by CUDA IPC";
    case CheckStep::kEventImport: return "import the canary's events by CUDA IPC";
    case CheckStep::kChecksum: return "read the canary back and compare it with the host bytes";
  }
  return "?";
}

Status StepFailed(CheckStep step, const Status& cause) {
  return Status(cause.code() == StatusCode::kOk ? StatusCode::kInternal : cause.code(),
                fmt::format("gpu: device path check failed at step '{}' ({}): {}",
                            CheckStepName(step), StepWhat(step), cause.message()));
}

}  // namespace

const char* CheckStepName(CheckStep step) {
  switch (step) {
    case CheckStep::kOpen: return "open";
    case CheckStep::kMap: return "map";
    case CheckStep::kEventImport: return "event import";
    case CheckStep::kChecksum: return "checksum";
  }
  return "?";
}

Status VerifyDeviceMap(cuda::DeviceMap& map) {
  const cuda::DeviceSlotTable& t = map.table();
  if (t.canary_bytes == 0 || t.canary_bytes > (64u << 20))
    return StepFailed(CheckStep::kMap,
                      InternalError("the leader's table has a canary of {} bytes (a leader of "
                                    "another batchcast version?)", t.canary_bytes));
  Status st = map.MapCanary();
  if (!st.ok()) return StepFailed(CheckStep::kMap, st);
  st = map.ImportCanaryEvents();
  if (!st.ok()) return StepFailed(CheckStep::kEventImport, st);
  std::vector<uint8_t> expected(t.canary_bytes), got(t.canary_bytes);
  cuda::FillCanary(t.canary_seed, expected.data(), expected.size());
  if (cuda::CanaryChecksum(expected.data(), expected.size()) != t.canary_checksum)
    return StepFailed(CheckStep::kChecksum,
                      InternalError("the table's checksum {:#x} does not match its seed's bytes",
                                    t.canary_checksum));
  st = map.ReadCanary(got.data(), got.size());
  if (!st.ok()) return StepFailed(CheckStep::kChecksum, st);
  const uint64_t sum = cuda::CanaryChecksum(got.data(), got.size());
  if (sum != t.canary_checksum) {
    size_t first = 0;
    while (first < got.size() && got[first] == expected[first]) ++first;
    return StepFailed(CheckStep::kChecksum,
                      CorruptDataError("the device bytes' checksum {:#x} differs from the host "
                                    "bytes' {:#x} (first difference at byte {} of {})",
                                    sum, t.canary_checksum, first, got.size()));
  }
  return Status::Ok();
}

Result<std::unique_ptr<cuda::DeviceMap>> OpenCheckedMap(GpuMode mode, const DeviceMapOpener& open,
                                                        const std::string& warn_as,
                                                        Status* fallback) {
  *fallback = Status::Ok();
  Status failure;
  auto map = open();
  if (!map.ok()) failure = StepFailed(CheckStep::kOpen, map.status());
  else if (map.value() == nullptr) return map;  // nothing to map: the host path
  else failure = VerifyDeviceMap(*map.value());
  if (failure.ok()) return map;
  if (mode == GpuMode::kOn)
    return Status(failure.code(), "gpu=on, but " + failure.message() +
                                      "; set gpu=auto to fall back to the host path");
  *fallback = failure;
  if (!warn_as.empty()) BC_LOG(Warn, Cuda, "{}", FallbackWarning(warn_as, failure));
  return std::unique_ptr<cuda::DeviceMap>();
}

std::string FallbackWarning(const std::string& who, const Status& failure) {
  return fmt::format(
      "{}: gpu=auto: host path: {}. Batches still arrive (host memory), but not as device "
      "tensors. Please report this line with the output of `nvidia-smi` and `batchcast info` "
      "(docs/gpu.md \"The safe device path\"); gpu=off silences it, gpu=on fails instead",
      who, failure.message());
}

std::string TrainerHostPathWarning(const Status& why) {
  return fmt::format("gpu=auto: host path for this trainer: {}. Its batches arrive in host "
                     "memory; the other trainers keep the device path", why.message());
}

}  // namespace batchcast::gpu
