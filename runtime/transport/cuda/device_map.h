// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// A consumer's view of the leader's device slots.
//
// Same GPU (the common case: k trainers per GPU, with or without MPS): each slot's
// memory handle and ready event are opened by CUDA IPC the first time the slot is seen
// and cached for the life of the map; the consumer's pointers are the leader's
// allocation (no copy; bytes counted as IPC). Acquire() makes the caller's stream wait
// on the slot's ready event; Release() records the lane's release event after
// everything already queued on the caller's stream.
//
// Another GPU of the same node, dynamic membership (no NCCL communicator): the slot is
// opened by IPC with peer access and copied once per producer batch into a local mirror
// on this GPU (cudaMemcpyAsync device-to-device over NVLink/PCIe; bytes counted as IPC),
// and the leader's slot is released right after that copy.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "batchcast/status.h"
#include "transport/cuda/device_handles.h"
#include "transport/cuda/device_ring.h"

namespace batchcast::cuda {

struct DeviceMapStats {
  uint64_t ipc_bytes = 0;        // bytes read in place through IPC (same GPU)
  uint64_t peer_bytes = 0;       // bytes copied from the leader's GPU to this one
  uint64_t handles_opened = 0;   // memory handles opened (at most one per slot)
};

class DeviceMap {
 public:
  // Fetches the table from the handle socket `name` and prepares `device` (a visible
  // ordinal of this process). The map holds a lane until it is destroyed.
  static Result<std::unique_ptr<DeviceMap>> Open(const std::string& name, int device,
                                                 int64_t timeout_ms);
  // A consumer in the ring's own process (the leader that also trains, an NCCL relay's
  // own trainer): CUDA cannot open a process's own IPC handles, so it uses the ring's
  // pointers and events directly, on release lane `lane` (HandleServer::ReserveLane).
  // `on_close` runs when the map is destroyed (gives the lane back).
  static Result<std::unique_ptr<DeviceMap>> OpenLocal(DeviceRing& ring, int lane,
                                                      std::function<void()> on_close);
  virtual ~DeviceMap() = default;

  // Device address of `slot` as published at stream position `seq`, usable on `stream`
  // (a cudaStream_t) once the call returns: the stream waits for the leader's copy.
  // `ranges` are what a peer copy moves (ignored on the same GPU).
  virtual Result<uint8_t*> Acquire(uint32_t slot, uint64_t seq, std::span<const SlotRange> ranges,
                                   void* stream) = 0;
  // Everything queued on `stream` so far happens before the leader reuses `slot`.
  // Call before the host slot is released.
  virtual Status Release(uint32_t slot, void* stream) = 0;

  // The canary check (gpu/gpu_check.h), one step per call so a failure names its step:
  // map the canary allocation (IPC), import its ready and release events (IPC), then read
  // its table().canary_bytes into `out` after the leader's copy and record the release
  // event. Called once, before the first Acquire.
  virtual Status MapCanary() = 0;
  virtual Status ImportCanaryEvents() = 0;
  virtual Status ReadCanary(uint8_t* out, uint64_t bytes) = 0;

  virtual const DeviceSlotTable& table() const = 0;
  virtual int lane() const = 0;
  virtual int device() const = 0;
  virtual bool peer() const = 0;  // the slots live on another GPU
  virtual DeviceMapStats stats() const = 0;
};

}  // namespace batchcast::cuda
