// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// What a consumer needs to map the leader's device slots: CUDA IPC handles as plain
// bytes. CUDA IPC handles (cudaIpcMemHandle_t, cudaIpcEventHandle_t) are 64-byte opaque
// blobs valid in any process of the same user on the same node, so the table needs no
// CUDA types and travels over the leader's GPU handle socket (handle_server.h).
//
// The table is written once, when the leader creates its device ring, and never changes:
// consumers fetch it once at attach and open each handle the first time they see it.
#pragma once

#include <cstdint>

namespace batchcast::cuda {

constexpr uint64_t kDeviceTableMagic = 0x5442474342415442ULL;  // "BTABCGBT"
constexpr uint32_t kDeviceTableVersion = 3;
constexpr uint32_t kMaxDeviceSlots = 16;  // mirrors the host ring (ring_slots <= 16 on GPU)
constexpr uint32_t kMaxGpuLanes = 8;      // consumers per GPU that map slots by IPC
constexpr uint32_t kIpcHandleBytes = 64;  // CUDA_IPC_HANDLE_SIZE

struct IpcBytes {
  unsigned char bytes[kIpcHandleBytes];
};

struct DeviceSlotTable {
  uint64_t magic;
  uint32_t version;
  uint32_t num_slots;        // == the host ring's slots; device slot i mirrors host slot i
  uint64_t slot_bytes;       // bytes of each device slot allocation
  uint64_t host_slot_bytes;  // the host ring's slot size (offsets inside a slot match)
  uint64_t finished_offset;  // 0: no device finishing; else float32 CHW images start here
  uint64_t seq_offset;       // 0: none; else a uint64 at this offset of every slot holds
                             // 1 + the stream position the slot was last filled with
                             // (relay rings, which fill slots asynchronously to the publish)
  int32_t leader_pid;
  int32_t finish_channels;   // channels of the finished images (0 when none)
  char pci_bus_id[32];       // the GPU that holds the slots ("0000:1b:00.0")
  IpcBytes slot_memory[kMaxDeviceSlots];               // cudaIpcMemHandle_t per slot
  IpcBytes ready_event[kMaxDeviceSlots];               // recorded after the slot's copy
  IpcBytes release_event[kMaxDeviceSlots][kMaxGpuLanes];  // recorded by lane's consumer
  // The canary (canary.h): an allocation of canary_bytes holding FillCanary(canary_seed),
  // copied in from host bytes whose checksum is canary_checksum; its ready event is
  // recorded after that copy, and each consumer records its release event after reading.
  uint64_t canary_bytes;
  uint64_t canary_seed;
  uint64_t canary_checksum;
  IpcBytes canary_memory;
  IpcBytes canary_ready;
  IpcBytes canary_release;
};

// The handshake reply that precedes the table on the handle socket.
struct DeviceHandleReply {
  int32_t code;   // StatusCode; 0 = OK
  int32_t lane;   // the release-event column assigned to this consumer
  char message[256];
};

}  // namespace batchcast::cuda
