// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Producer batches from the GPU that holds them to the node's other GPUs by NCCL (MPI
// jobs, docs/gpu.md "Which path when"). The root (the leader's stager GPU) sends, for
// every staged producer batch, a fixed-size header (slot, byte ranges, finishing) and
// then the ranges of the device slot; each relay (one rank per other GPU) receives the
// header, then the ranges into the same slot of its own device ring. Everything is
// enqueued on the device ring's stream, so NCCL's collectives are issued in one order
// on every rank and ordered after the release events of the slot being overwritten.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "batchcast/status.h"
#include "transport/cuda/device_ring.h"
#include "transport/cuda/nccl_broadcast.h"

namespace batchcast::cuda {

constexpr uint32_t kFanoutMagic = 0x4243464e;  // "BCFN"
constexpr uint32_t kFanoutBatch = 1;
constexpr uint32_t kFanoutEnd = 2;

struct FanoutHeader {
  uint32_t magic = kFanoutMagic;
  uint32_t kind = kFanoutBatch;
  uint32_t slot = 0;
  uint32_t num_ranges = 0;
  uint64_t seq = 0;
  SlotRange ranges[3];
  uint32_t has_finish = 0;
  uint32_t reserved = 0;
  FinishSpec finish;
};
constexpr uint64_t kFanoutHeaderBytes = 256;
static_assert(sizeof(FanoutHeader) <= kFanoutHeaderBytes, "fanout header grew");

// Checks a received header (magic, kind, slot < num_slots, ranges inside the slot).
Status ValidateFanoutHeader(const FanoutHeader& h, uint32_t num_slots, uint64_t slot_bytes);

class NcclFanout {
 public:
  // Root side: takes the communicator (rank 0 of it) on the ring's device.
  static Result<std::unique_ptr<NcclFanout>> CreateRoot(std::unique_ptr<NcclBroadcast> comm,
                                                        int device);
  // Relay side: a communicator rank > 0 on the relay ring's device.
  static Result<std::unique_ptr<NcclFanout>> CreateRelay(std::unique_ptr<NcclBroadcast> comm,
                                                         int device);
  virtual ~NcclFanout() = default;

  // Root: enqueues the header and `ranges` of `slot_memory` on `stream` (the ring's, from
  // DeviceRing::StageHook). Non-blocking.
  virtual Status Send(uint32_t slot, uint64_t seq, std::span<const SlotRange> ranges,
                      const FinishSpec* finish, uint8_t* slot_memory, void* stream) = 0;
  // Root: the end of the stream (relays return from their loop). Blocks until sent.
  virtual Status SendEnd(void* stream) = 0;
  // Relay: the next header; blocks the host until it has arrived.
  virtual Result<FanoutHeader> ReceiveHeader(void* stream) = 0;
  // Relay: enqueues the receive of the header's ranges into `slot_memory`.
  virtual Status ReceiveRanges(const FanoutHeader& header, uint8_t* slot_memory,
                               void* stream) = 0;

  virtual uint64_t bytes() const = 0;  // payload bytes sent (root) or received (relay)
  virtual int rank() const = 0;
  virtual int size() const = 0;
};

}  // namespace batchcast::cuda
