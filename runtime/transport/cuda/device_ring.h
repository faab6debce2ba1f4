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
#include <functional>
#include <memory>
#include <span>

#include "batchcast/status.h"
#include "transport/cuda/device_handles.h"

namespace batchcast::cuda {

struct DeviceRingConfig {
  int device = 0;                 // visible ordinal of the GPU that holds the slots
  uint32_t num_slots = 0;         // == host ring slots (<= kMaxDeviceSlots)
  uint64_t host_slot_bytes = 0;   // host slot size; offsets inside a slot are kept
  uint8_t* host_slots = nullptr;  // the mapped host slots (page aligned), pinned here;
                                  // null: a receive-only ring (an NCCL relay's)
  uint64_t finished_bytes = 0;    // extra float32 area per slot for finishing (0: none)
  int finish_channels = 0;
  bool seq_words = false;         // keep a sequence word per slot (table.seq_offset)
};

// One byte range of a slot copied host -> device (images, labels, ids).
struct SlotRange {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// Device-side finishing: uint8 images (HWC or CHW) -> normalised float32 CHW, written at
// the table's finished_offset. Done once per GPU instead of once per consumer on the CPU.
struct FinishSpec {
  uint64_t images_offset = 0;     // where the uint8 images start in the slot
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
  // Work enqueued on the ring's stream (a cudaStream_t) into device slot `slot_memory`.
  using StageHook = std::function<Status(uint8_t* slot_memory, void* stream)>;
  // Enqueues, on the ring's own stream: a wait for every lane's release event of `slot`;
  // the copy of `ranges` of host slot `slot` (none for a receive-only ring); `hook` (an
  // NCCL broadcast out of, or into, the slot); the optional finishing; then records
  // ready[slot]. Non-blocking.
  // With seq_words, the slot's sequence word becomes 1 + `seq` after the finishing.
  virtual Status Stage(uint32_t slot, uint64_t seq, std::span<const SlotRange> ranges,
                       const FinishSpec* finish, const StageHook& hook = nullptr) = 0;
  // Waits for everything enqueued (benchmarks, shutdown).
  virtual Status Synchronize() = 0;

  virtual const DeviceSlotTable& table() const = 0;
  virtual void* device_slot(uint32_t slot) const = 0;
  virtual DeviceRingStats stats() const = 0;
  virtual int device() const = 0;
  // The ring's own stream (cudaStream_t): copies, hooks, finishing, ready records.
  virtual void* stream() const = 0;
  // For a consumer in the ring's own process (it cannot open its own IPC handles):
  // slot's ready event and lane's release event (cudaEvent_t).
  virtual void* ready_event(uint32_t slot) const = 0;
  virtual void* release_event(uint32_t slot, int lane) const = 0;
  // The canary allocation (canary.h; table().canary_bytes) and its ready event, for the
  // same consumers.
  virtual const void* canary() const = 0;
  virtual void* canary_ready_event() const = 0;
};

// Launches the finishing kernel (finish_kernel.cu); `stream` is a cudaStream_t.
Status LaunchFinish(const uint8_t* images, float* out, const FinishSpec& spec, void* stream);

}  // namespace batchcast::cuda
