// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Leader-side GPU staging (docs/gpu.md): a producer::SlotHook that copies every completed host
// slot into the device ring (one H2D copy per GPU per producer batch, on the ring's own
// stream, overlapped with decoding the next batch), optionally finishes it on the GPU,
// and serves the device slots' IPC handles on "<leader address>.gpu".
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "producer/slot_hook.h"
#include "telemetry/collector.h"
#include "transport/cuda/device_map.h"
#include "transport/cuda/device_ring.h"
#include "transport/cuda/handle_server.h"
#include "transport/cuda/nccl_fanout.h"

namespace batchcast::gpu {

struct GpuStagerConfig {
  int device = 0;                 // visible ordinal of the GPU that receives the batches
  bool finish = false;            // uint8 -> normalised float32 CHW on the device
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float stddev[3] = {0.229f, 0.224f, 0.225f};
  telemetry::Collector* collector = nullptr;  // kBytesH2d; optional, not owned
};

// The handle socket of the leader listening on `leader_address`.
inline std::string GpuHandleSocket(const std::string& leader_address) {
  return leader_address + ".gpu";
}

// The byte ranges of a published slot a device copy needs: images, labels, sample ids of
// the n + tail positions (never the unused capacity). Returns how many ranges (3).
int SlotRanges(const shm::SlotDesc& desc, cuda::SlotRange out[3]);

// A device map over `ring` for a trainer in the process that owns it (the stager's or a
// relay's): reserves a lane of `server`, released when the map goes.
Result<std::unique_ptr<cuda::DeviceMap>> OpenLocalMap(cuda::DeviceRing& ring,
                                                      cuda::HandleServer& server);

// What a stager stages from: a producer's host ring, the address its consumers attached to
// (the handle socket is GpuHandleSocket(address)), and how to install the slot hook
// (Leader::staging_target(), Service::staging_target()).
using producer::StagingTarget;

class GpuStager final : public producer::SlotHook {
 public:
  // Creates the device ring mirroring the target's host ring and installs itself as the
  // producer's slot hook. The stager must outlive the producer's Run().
  static Result<std::unique_ptr<GpuStager>> Create(const StagingTarget& target,
                                                   const GpuStagerConfig& config);
  // The same over a given device ring (tests drive the stager with a host-memory ring).
  static Result<std::unique_ptr<GpuStager>> CreateWithRing(const StagingTarget& target,
                                                           const GpuStagerConfig& config,
                                                           std::unique_ptr<cuda::DeviceRing> ring);
  // The device ring `Create` would make for `ring` (slots, sizes, finishing area).
  static Result<cuda::DeviceRingConfig> RingConfigFor(shm::RingLeader& ring,
                                              const GpuStagerConfig& config);
  ~GpuStager() override;

  Status BeforeFill(const shm::SlotWrite& slot) override;
  Status BeforePublish(const shm::SlotWrite& slot) override;

  // MPI jobs with trainers on other GPUs: after each copy, the slot also goes to the
  // relays by NCCL (gpu/gpu_relay.h). Call before Run().
  void SetFanout(std::unique_ptr<cuda::NcclFanout> fanout) { fanout_ = std::move(fanout); }
  // After Run() returned: tells the relays the stream ended and waits for the staging
  // stream. Idempotent.
  Status Finish() override;
  // A device map for a trainer in the leader's own process (leader_trains).
  Result<std::unique_ptr<cuda::DeviceMap>> OpenLocalMap();

  cuda::DeviceRing& ring() { return *ring_; }
  const std::string& handle_socket() const { return server_->name(); }

 private:
  GpuStager(const StagingTarget& target, const GpuStagerConfig& config)
      : target_(target), config_(config) {}

  StagingTarget target_;
  GpuStagerConfig config_;
  std::unique_ptr<cuda::DeviceRing> ring_;
  std::unique_ptr<cuda::HandleServer> server_;
  std::unique_ptr<cuda::NcclFanout> fanout_;
  bool finished_ = false;
};

}  // namespace batchcast::gpu
