// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The leader's (or a per-GPU stager's) ring of device slots, mirroring the host ring:
// device slot i holds what host slot i held at its last publish, at the same offsets.
//
//   host slot i (pinned: cudaHostRegister on the memfd mapping)
//     --cudaMemcpyAsync on the ring's own stream-->  device slot i  [--finish kernel-->]
//     --record ready[i]-->  consumers: cudaStreamWaitEvent(their stream, ready[i])
//   consumer lane L is done with slot i: record release[i][L] on its stream
//   next Stage(i): cudaStreamWaitEvent(copy stream, release[i][*]) before overwriting
//
// So neither side blocks the host on the GPU: the leader returns from Stage() after
// enqueueing and decodes the next batch while the copy runs; a consumer's kernels wait
// on the GPU. The host ring still decides *when* a slot may be reused (every consumer
// released it there, after recording its release event), the events decide that the GPU
// work reading the slot is finished. The ring has no CUDA types in its interface; the
// CPU-only build links a stub whose Create() says CUDA is not built in.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "batchcast/status.h"
#include "transport/cuda/device_handles.h"

namespace batchcast::cuda {

struct DeviceRingConfig {
  int device = 0;                 // visible ordinal of the GPU that holds the slots
  uint32_t num_slots = 0;         // == host ring slots (<= kMaxDeviceSlots)
  uint64_t host_slot_bytes = 0;   // host slot size; offsets inside a slot are kept
  uint8_t* host_slots = nullptr;  // the mapped host slots (page aligned), pinned here
  uint64_t finished_bytes = 0;    // extra float32 area per slot for finishing (0: none)
  int finish_channels = 0;
};

// One byte range of a slot copied host -> device (images, labels, ids).
struct SlotRange {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// Device-side finishing: uint8 images (HWC or CHW) -> normalised float32 CHW, written at
// the table's finished_offset. Done once per GPU instead of once per consumer on the CPU.
struct FinishSpec {
  uint32_t samples = 0;
  int channels = 0, height = 0, width = 0;
  bool channels_last = false;
  float mean[3] = {0, 0, 0};
  float inv_std[3] = {1, 1, 1};
};

struct DeviceRingStats {
  uint64_t h2d_bytes = 0;   // host -> device
  uint64_t h2d_copies = 0;  // slots staged
  bool pinned = false;      // cudaHostRegister succeeded on the host slots
};

class DeviceRing {
 public:
  static Result<std::unique_ptr<DeviceRing>> Create(const DeviceRingConfig& config);
  virtual ~DeviceRing() = default;

  // Blocks until the last copy out of host slot `slot` has finished, so the host may
  // rewrite it (the leader calls it before filling the slot).
  virtual Status WaitHostSlotFree(uint32_t slot) = 0;
  // Enqueues the copy of `ranges` of host slot `slot` after every lane's release event
  // of the slot, then the optional finishing, then records ready[slot]. Non-blocking.
  virtual Status Stage(uint32_t slot, std::span<const SlotRange> ranges,
                       const FinishSpec* finish) = 0;
  // Waits for everything enqueued (benchmarks, shutdown).
  virtual Status Synchronize() = 0;

  virtual const DeviceSlotTable& table() const = 0;
  virtual void* device_slot(uint32_t slot) const = 0;
  virtual DeviceRingStats stats() const = 0;
};

// Launches the finishing kernel (finish_kernel.cu); `stream` is a cudaStream_t.
Status LaunchFinish(const uint8_t* images, float* out, const FinishSpec& spec, void* stream);

}  // namespace batchcast::cuda
