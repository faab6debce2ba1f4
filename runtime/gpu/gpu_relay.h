// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// An NCCL relay (docs/gpu.md "Which path when"): in an MPI job, one trainer rank per GPU
// other than the leader's stager GPU receives every producer batch by NCCL broadcast from
// the stager into its own device ring and serves that ring to the trainers on its GPU by
// CUDA IPC, exactly as the stager does on its GPU. So each GPU receives a batch once,
// over NVLink/NVSwitch where there is one, instead of once per trainer over PCIe.
//
// The relay fills a slot asynchronously to the leader's host publish, so its ring keeps a
// sequence word per slot and consumers' streams wait on it (transport/cuda/stream_value.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "batchcast/status.h"
#include "transport/cuda/device_map.h"
#include "transport/cuda/device_ring.h"
#include "transport/cuda/handle_server.h"
#include "transport/cuda/nccl_fanout.h"

namespace batchcast::telemetry {
class Collector;
}

namespace batchcast::gpu {

struct GpuRelayConfig {
  int device = 0;                  // visible ordinal of the relay's GPU
  uint32_t num_slots = 0;          // == the leader's host ring slots
  uint64_t host_slot_bytes = 0;    // == the leader's host slot size (same offsets)
  bool finish = false;             // the gpu_finish option (same on every rank)
  std::string handle_socket;       // where the relay serves its table
  telemetry::Collector* collector = nullptr;  // kBytesNccl; optional, not owned
};

// The relay's handle socket for the leader at `leader_address`, relay `index`.
std::string GpuRelaySocket(const std::string& leader_address, int index);

class GpuRelay {
 public:
  static Result<std::unique_ptr<GpuRelay>> Create(const GpuRelayConfig& config,
                                                  std::unique_ptr<cuda::NcclFanout> fanout);
  ~GpuRelay();  // joins the thread (call Join first to see its status)
  GpuRelay(const GpuRelay&) = delete;
  GpuRelay& operator=(const GpuRelay&) = delete;

  // Starts receiving on a thread; `on_error` runs there if the relay fails (the Runtime
  // fails the job: consumers on this GPU would otherwise wait forever).
  void Start(std::function<void(const Status&)> on_error);
  // Waits for the end of the stream; returns the thread's status.
  Status Join();
  // A device map for a trainer in the relay's own process.
  Result<std::unique_ptr<cuda::DeviceMap>> OpenLocalMap();
  const std::string& handle_socket() const { return config_.handle_socket; }

 private:
  explicit GpuRelay(const GpuRelayConfig& config) : config_(config) {}
  Status Loop();

  GpuRelayConfig config_;
  std::unique_ptr<cuda::DeviceRing> ring_;
  std::unique_ptr<cuda::HandleServer> server_;
  std::unique_ptr<cuda::NcclFanout> fanout_;
  std::thread thread_;
  Status status_;
};

}  // namespace batchcast::gpu
