// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "node/gpu_stager.h"

#include "core/errors.h"
#include "core/log.h"
#include "pipeline/pipeline.h"
#include "telemetry/metrics.h"

namespace batchcast::node {

int SlotRanges(const shm::SlotDesc& d, cuda::SlotRange out[3]) {
  const uint64_t positions = uint64_t(d.num_samples) + d.tail;
  out[0] = {d.images_offset, positions * d.sample_bytes};
  out[1] = {d.labels_offset, positions * sizeof(int64_t)};
  out[2] = {d.ids_offset, positions * sizeof(int64_t)};
  return 3;
}

Result<std::unique_ptr<GpuStager>> GpuStager::Create(Leader& leader,
                                                     const GpuStagerConfig& config) {
  std::unique_ptr<GpuStager> s(new GpuStager(leader, config));
  shm::SegmentHeader* h = leader.ring().header();
  cuda::DeviceRingConfig rc;
  rc.device = config.device;
  rc.num_slots = h->num_slots;
  rc.host_slot_bytes = h->slot_bytes;
  rc.host_slots = shm::SlotData(h, 0);
  if (config.finish) {
    // Floats of every byte of the slot bound the finished images (4 bytes per uint8).
    rc.finished_bytes = h->slot_bytes * sizeof(float);
    rc.finish_channels = 3;
  }
  auto ring = cuda::DeviceRing::Create(rc);
  if (!ring.ok()) return ring.status().WithContext("leader: gpu staging");
  s->ring_ = std::move(ring).value();
  auto server = cuda::HandleServer::Create(GpuHandleSocket(leader.address()), s->ring_->table());
  if (!server.ok()) return server.status().WithContext("leader: gpu handle socket");
  s->server_ = std::move(server).value();
  leader.SetSlotHook(s.get());
  return s;
}

GpuStager::~GpuStager() { leader_.SetSlotHook(nullptr); }

Status GpuStager::BeforeFill(const shm::SlotWrite& w) { return ring_->WaitHostSlotFree(w.slot); }

Status GpuStager::BeforePublish(const shm::SlotWrite& w) {
  cuda::SlotRange ranges[3];
  const int n = SlotRanges(*w.desc, ranges);
  cuda::FinishSpec finish;
  const cuda::FinishSpec* fp = nullptr;
  const shm::SlotDesc& d = *w.desc;
  if (config_.finish && d.dtype == uint32_t(pipeline::DType::kUint8) && d.channels <= 3) {
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
  Status st = ring_->Stage(w.slot, std::span<const cuda::SlotRange>(ranges, size_t(n)), fp);
  if (!st.ok()) return st.WithContext(fmt::format("leader: stage producer batch {}", d.seq));
  telemetry::Add(config_.collector, telemetry::Counter::kBytesH2d,
                 static_cast<int64_t>(ring_->stats().h2d_bytes - before));
  return Status::Ok();
}

}  // namespace batchcast::node
