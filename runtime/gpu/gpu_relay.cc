// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "gpu/gpu_relay.h"

#include "core/errors.h"
#include "core/log.h"
#include "gpu/gpu_stager.h"  // OpenLocalMap
#include "telemetry/collector.h"
#include "telemetry/metrics.h"

namespace batchcast::gpu {

std::string GpuRelaySocket(const std::string& leader_address, int index) {
  return fmt::format("{}.gpu{}", leader_address, index);
}

Result<std::unique_ptr<GpuRelay>> GpuRelay::Create(const GpuRelayConfig& config,
                                                   std::unique_ptr<cuda::NcclFanout> fanout) {
  if (fanout == nullptr) return InvalidArgumentError("gpu relay: no NCCL fan-out");
  std::unique_ptr<GpuRelay> r(new GpuRelay(config));
  cuda::DeviceRingConfig rc;
  rc.device = config.device;
  rc.num_slots = config.num_slots;
  rc.host_slot_bytes = config.host_slot_bytes;
  rc.host_slots = nullptr;  // filled by NCCL, never from host memory
  rc.seq_words = true;
  if (config.finish) {
    rc.finished_bytes = config.host_slot_bytes * sizeof(float);
    rc.finish_channels = 3;
  }
  auto ring = cuda::DeviceRing::Create(rc);
  if (!ring.ok()) return ring.status().WithContext("gpu relay: device ring");
  r->ring_ = std::move(ring).value();
  auto server = cuda::HandleServer::Create(config.handle_socket, r->ring_->table());
  if (!server.ok()) return server.status().WithContext("gpu relay: handle socket");
  r->server_ = std::move(server).value();
  r->fanout_ = std::move(fanout);
  return r;
}

GpuRelay::~GpuRelay() {
  if (thread_.joinable()) thread_.join();
}

void GpuRelay::Start(std::function<void(const Status&)> on_error) {
  thread_ = std::thread([this, on_error = std::move(on_error)] {
    status_ = Loop();
    if (!status_.ok()) {
      BC_LOG(Error, Cuda, "gpu relay on device {}: {}", config_.device, status_.message());
      if (on_error) on_error(status_);
    }
  });
}

Status GpuRelay::Join() {
  if (thread_.joinable()) thread_.join();
  return status_;
}

Status GpuRelay::Loop() {
  const cuda::DeviceSlotTable& t = ring_->table();
  for (;;) {
    BC_ASSIGN_OR_RETURN(cuda::FanoutHeader h, fanout_->ReceiveHeader(ring_->stream()));
    BC_RETURN_IF_ERROR(cuda::ValidateFanoutHeader(h, t.num_slots, t.host_slot_bytes));
    if (h.kind == cuda::kFanoutEnd) break;
    const uint64_t before = fanout_->bytes();
    const std::span<const cuda::SlotRange> ranges(h.ranges, h.num_ranges);
    const cuda::FinishSpec* finish = h.has_finish && config_.finish ? &h.finish : nullptr;
    Status st = ring_->Stage(h.slot, h.seq, ranges, finish, [&](uint8_t* memory, void* stream) {
      return fanout_->ReceiveRanges(h, memory, stream);
    });
    if (!st.ok()) return st.WithContext(fmt::format("gpu relay: producer batch {}", h.seq));
    telemetry::Add(config_.collector, telemetry::Counter::kBytesNccl,
                   static_cast<int64_t>(fanout_->bytes() - before));
  }
  return ring_->Synchronize();
}

Result<std::unique_ptr<cuda::DeviceMap>> GpuRelay::OpenLocalMap() {
  return gpu::OpenLocalMap(*ring_, *server_);
}

}  // namespace batchcast::gpu
