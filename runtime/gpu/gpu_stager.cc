// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "gpu/gpu_stager.h"

#include <algorithm>

#include "core/errors.h"
#include "core/log.h"
#include "pipeline/pipeline.h"
#include "producer/ring_access.h"
#include "telemetry/collector.h"
#include "telemetry/metrics.h"

namespace batchcast::gpu {

int SlotRanges(const shm::SlotDesc& d, cuda::SlotRange out[3]) {
  const uint64_t positions = uint64_t(d.num_samples) + d.tail;
  out[0] = {d.images_offset, positions * d.sample_bytes};
  out[1] = {d.labels_offset, positions * sizeof(int64_t)};
  out[2] = {d.ids_offset, positions * sizeof(int64_t)};
  return 3;
}

Result<cuda::DeviceRingConfig> GpuStager::RingConfigFor(shm::RingLeader& ring,
                                                        const GpuStagerConfig& config) {
  // Device slot i mirrors host slot i: the leader's pool is limited to what the device
  // ring can mirror (joins beyond it are refused with a message naming the limit).
  const uint32_t mirrored = std::min<uint32_t>(producer::RingMaxSlots(ring), cuda::kMaxDeviceSlots);
  if (mirrored < producer::RingMaxSlots(ring)) {
    Status st = ring.LimitPool(mirrored);
    if (!st.ok()) return st.WithContext("leader: gpu staging");
  }
  cuda::DeviceRingConfig rc;
  rc.device = config.device;
  rc.num_slots = producer::RingMaxSlots(ring);
  rc.host_slot_bytes = producer::RingSlotBytes(ring);
  rc.host_slots = producer::RingDataBase(ring);
  if (config.finish) {
    // Floats of every byte of the slot bound the finished images (4 bytes per uint8).
    rc.finished_bytes = rc.host_slot_bytes * sizeof(float);
    rc.finish_channels = 3;
  }
  return rc;
}

Result<std::unique_ptr<GpuStager>> GpuStager::Create(const StagingTarget& target,
                                                     const GpuStagerConfig& config) {
  BC_ASSIGN_OR_RETURN(cuda::DeviceRingConfig rc, RingConfigFor(*target.ring, config));
  auto ring = cuda::DeviceRing::Create(rc);
  if (!ring.ok()) return ring.status().WithContext("leader: gpu staging");
  return CreateWithRing(target, config, std::move(ring).value());
}

Result<std::unique_ptr<GpuStager>> GpuStager::CreateWithRing(
    const StagingTarget& target, const GpuStagerConfig& config,
    std::unique_ptr<cuda::DeviceRing> ring) {
  std::unique_ptr<GpuStager> s(new GpuStager(target, config));
  s->ring_ = std::move(ring);
  auto server = cuda::HandleServer::Create(GpuHandleSocket(target.address), s->ring_->table());
  if (!server.ok()) return server.status().WithContext("leader: gpu handle socket");
  s->server_ = std::move(server).value();
  target.set_hook(s.get());
  return s;
}

GpuStager::~GpuStager() {
  if (target_.set_hook) target_.set_hook(nullptr);
}

Status GpuStager::BeforeFill(const shm::SlotWrite& w) { return ring_->WaitHostSlotFree(w.slot); }

Status GpuStager::BeforePublish(const shm::SlotWrite& w) {
  cuda::SlotRange ranges[3];
  const int n = SlotRanges(*w.desc, ranges);
  cuda::FinishSpec finish;
  const cuda::FinishSpec* fp = nullptr;
  const shm::SlotDesc& d = *w.desc;
  if (config_.finish && d.dtype == uint32_t(pipeline::DType::kUint8) && d.channels <= 3) {
    finish.images_offset = d.images_offset;
    finish.samples = d.num_samples + d.tail;
    finish.channels = d.channels;
    finish.height = d.height;
    finish.width = d.width;
    finish.channels_last = d.layout == uint32_t(pipeline::Layout::kHWC);
    for (int k = 0; k < 3; ++k) {
      finish.mean[k] = config_.mean[k];
      finish.inv_std[k] = 1.0f / config_.stddev[k];
    }
    fp = &finish;
  }
  const uint64_t before = ring_->stats().h2d_bytes;
  const uint64_t nccl_before = fanout_ ? fanout_->bytes() : 0;
  const std::span<const cuda::SlotRange> span(ranges, size_t(n));
  cuda::DeviceRing::StageHook hook;
  if (fanout_)
    hook = [&](uint8_t* memory, void* stream) {
      return fanout_->Send(w.slot, d.seq, span, fp, memory, stream);
    };
  Status st = ring_->Stage(w.slot, d.seq, span, fp, hook);
  if (!st.ok()) return st.WithContext(fmt::format("leader: stage producer batch {}", d.seq));
  telemetry::Add(config_.collector, telemetry::Counter::kBytesH2d,
                 static_cast<int64_t>(ring_->stats().h2d_bytes - before));
  if (fanout_)
    telemetry::Add(config_.collector, telemetry::Counter::kBytesNccl,
                   static_cast<int64_t>(fanout_->bytes() - nccl_before));
  return Status::Ok();
}

Status GpuStager::Finish() {
  if (finished_) return Status::Ok();
  finished_ = true;
  if (fanout_) {
    Status st = fanout_->SendEnd(ring_->stream());
    if (!st.ok()) return st.WithContext("leader: tell the GPU relays the stream ended");
  }
  return ring_->Synchronize();
}

Result<std::unique_ptr<cuda::DeviceMap>> OpenLocalMap(cuda::DeviceRing& ring,
                                                      cuda::HandleServer& server) {
  BC_ASSIGN_OR_RETURN(int lane, server.ReserveLane());
  cuda::HandleServer* s = &server;
  return cuda::DeviceMap::OpenLocal(ring, lane, [s, lane] { s->ReleaseLane(lane); });
}

Result<std::unique_ptr<cuda::DeviceMap>> GpuStager::OpenLocalMap() {
  return gpu::OpenLocalMap(*ring_, *server_);
}

}  // namespace batchcast::gpu
