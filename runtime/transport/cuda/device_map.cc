// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/cuda/device_map.h"

#include <cstring>
#include <vector>

#include "core/errors.h"
#include "core/log.h"
#include "transport/cuda/cuda_status.h"
#include "transport/cuda/device_probe.h"
#include "transport/cuda/handle_server.h"
#include "transport/cuda/stream_value.h"

namespace batchcast::cuda {

#if BATCHCAST_HAVE_CUDA
namespace {

struct MappedSlot {
  uint8_t* remote = nullptr;       // the leader's allocation, opened by IPC
  cudaEvent_t ready = nullptr;     // opened IPC event
  cudaEvent_t release = nullptr;   // this lane's release event (opened IPC event)
  uint8_t* local = nullptr;        // peer path: mirror on this GPU
  cudaEvent_t copied = nullptr;    // peer path: the mirror holds `seq`
  uint64_t seq = ~0ULL;            // peer path: stream position in the mirror
};

class CudaDeviceMap final : public DeviceMap {
 public:
  CudaDeviceMap(HandleLease lease, int device) : lease_(std::move(lease)), device_(device) {}
  ~CudaDeviceMap() override;
  Status Init();

  Result<uint8_t*> Acquire(uint32_t slot, uint64_t seq, std::span<const SlotRange> ranges,
                           void* stream) override;
  Status Release(uint32_t slot, void* stream) override;
  Status MapCanary() override;
  Status ImportCanaryEvents() override;
  Status ReadCanary(uint8_t* out, uint64_t bytes) override;
  const DeviceSlotTable& table() const override { return lease_.table; }
  int lane() const override { return lease_.lane; }
  int device() const override { return device_; }
  bool peer() const override { return peer_; }
  DeviceMapStats stats() const override { return stats_; }

 private:
  Status OpenSlot(uint32_t slot);
  Status OpenEvent(const IpcBytes& bytes, cudaEvent_t* ev, const char* what);
  Status Chain(cudaStream_t from, cudaStream_t to);  // `to` waits for what `from` queued

  HandleLease lease_;
  int device_;
  bool peer_ = false;
  cudaStream_t lane_stream_ = nullptr;  // release and peer copies, in slot order
  std::vector<MappedSlot> slots_;
  DeviceMapStats stats_;
  uint8_t* canary_ = nullptr;             // the leader's canary, opened by IPC
  cudaEvent_t canary_ready_ = nullptr;
  cudaEvent_t canary_release_ = nullptr;
};

Status CudaDeviceMap::Init() {
  BC_RETURN_IF_ERROR(VisibleDeviceCount().status());
  BC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), fmt::format("gpu: select device {}", device_));
  BC_ASSIGN_OR_RETURN(std::string mine, DevicePciBusId(device_));
  peer_ = mine != lease_.table.pci_bus_id;
  if (peer_) {
    // Opening another GPU's allocation by IPC needs that GPU visible here; fail at attach,
    // naming it, rather than at the first batch.
    auto holder = DeviceByPciBusId(lease_.table.pci_bus_id);
    if (!holder.ok())
      return FailedPreconditionError(
          "gpu: the leader's device slots are on GPU {}, which this process does not see, so "
          "the peer-copy path cannot open them ({}); make that GPU visible too (e.g. list both "
          "in CUDA_VISIBLE_DEVICES) or use the host batches",
          lease_.table.pci_bus_id, holder.status().message());
  }
  BC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&lane_stream_, cudaStreamNonBlocking),
                          "gpu: create the consumer's lane stream");
  slots_.resize(lease_.table.num_slots);
  BC_LOG(Info, Cuda, "gpu: consumer lane {} maps {} device slots of GPU {} {}", lease_.lane,
         lease_.table.num_slots, lease_.table.pci_bus_id,
         peer_ ? fmt::format("by peer copy into GPU {}", mine) : std::string("in place (IPC)"));
  return Status::Ok();
}

CudaDeviceMap::~CudaDeviceMap() {
  if (lane_stream_ != nullptr && cudaStreamSynchronize(lane_stream_) != cudaSuccess)
    BC_LOG(Warn, Cuda, "gpu: consumer lane shutdown: {}", cudaGetErrorString(cudaGetLastError()));
  for (MappedSlot& s : slots_) {
    if (s.ready) (void)cudaEventDestroy(s.ready);
    if (s.release) (void)cudaEventDestroy(s.release);
    if (s.copied) (void)cudaEventDestroy(s.copied);
    if (s.local) (void)cudaFree(s.local);
    if (s.remote) (void)cudaIpcCloseMemHandle(s.remote);
  }
  if (canary_ready_) (void)cudaEventDestroy(canary_ready_);
  if (canary_release_) (void)cudaEventDestroy(canary_release_);
  if (canary_) (void)cudaIpcCloseMemHandle(canary_);
  if (lane_stream_ != nullptr) (void)cudaStreamDestroy(lane_stream_);
  CloseLease(&lease_);
}

Status CudaDeviceMap::MapCanary() {
  BC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "gpu: select the consumer's device");
  cudaIpcMemHandle_t mh;
  std::memcpy(&mh, lease_.table.canary_memory.bytes, sizeof mh);
  void* p = nullptr;
  BC_CUDA_RETURN_IF_ERROR(cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess),
                          fmt::format("gpu: open the canary of leader pid {} by IPC",
                                      lease_.table.leader_pid));
  canary_ = static_cast<uint8_t*>(p);
  return Status::Ok();
}

Status CudaDeviceMap::ImportCanaryEvents() {
  BC_RETURN_IF_ERROR(OpenEvent(lease_.table.canary_ready, &canary_ready_,
                               "gpu: open the canary's ready event by IPC"));
  return OpenEvent(lease_.table.canary_release, &canary_release_,
                   "gpu: open the canary's release event by IPC");
}

Status CudaDeviceMap::ReadCanary(uint8_t* out, uint64_t bytes) {
  if (canary_ == nullptr || canary_ready_ == nullptr)
    return InternalError("gpu: canary read before it was mapped");
  BC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(lane_stream_, canary_ready_, 0),
                          "gpu: wait for the canary's copy (imported event)");
  BC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out, canary_, bytes, cudaMemcpyDeviceToHost,
                                          lane_stream_),
                          "gpu: read the canary back");
  BC_CUDA_RETURN_IF_ERROR(cudaEventRecord(canary_release_, lane_stream_),
                          "gpu: record the canary's release event (imported event)");
  BC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(lane_stream_), "gpu: wait for the canary read");
  return Status::Ok();
}

Status CudaDeviceMap::OpenEvent(const IpcBytes& bytes, cudaEvent_t* ev, const char* what) {
  cudaIpcEventHandle_t h;
  std::memcpy(&h, bytes.bytes, sizeof h);
  BC_CUDA_RETURN_IF_ERROR(cudaIpcOpenEventHandle(ev, h), what);
  return Status::Ok();
}

Status CudaDeviceMap::OpenSlot(uint32_t slot) {
  MappedSlot& s = slots_[slot];
  const DeviceSlotTable& t = lease_.table;
  cudaIpcMemHandle_t mh;
  std::memcpy(&mh, t.slot_memory[slot].bytes, sizeof mh);
  void* p = nullptr;
  BC_CUDA_RETURN_IF_ERROR(cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess),
                          fmt::format("gpu: open device slot {} of leader pid {} by IPC", slot,
                                      t.leader_pid));
  s.remote = static_cast<uint8_t*>(p);
  stats_.handles_opened += 1;
  BC_RETURN_IF_ERROR(OpenEvent(t.ready_event[slot], &s.ready, "gpu: open a ready event"));
  BC_RETURN_IF_ERROR(OpenEvent(t.release_event[slot][lease_.lane], &s.release,
                               "gpu: open a release event"));
  if (peer_) {
    void* local = nullptr;
    BC_CUDA_RETURN_IF_ERROR(cudaMalloc(&local, t.slot_bytes),
                            fmt::format("gpu: allocate the peer mirror of slot {}", slot));
    s.local = static_cast<uint8_t*>(local);
    BC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming),
                            "gpu: create a peer-copy event");
  }
  return Status::Ok();
}

Status CudaDeviceMap::Chain(cudaStream_t from, cudaStream_t to) {
  cudaEvent_t ev;
  BC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                          "gpu: create an ordering event");
  cudaError_t err = cudaEventRecord(ev, from);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(to, ev, 0);
  (void)cudaEventDestroy(ev);  // destruction is deferred until the event completes
  BC_CUDA_RETURN_IF_ERROR(err, "gpu: order two streams");
  return Status::Ok();
}

Result<uint8_t*> CudaDeviceMap::Acquire(uint32_t slot, uint64_t seq,
                                        std::span<const SlotRange> ranges, void* stream) {
  if (slot >= slots_.size())
    return InternalError("gpu: slot {} beyond the device ring's {} slots", slot, slots_.size());
  auto user = static_cast<cudaStream_t>(stream);
  BC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "gpu: select the consumer's device");
  MappedSlot& s = slots_[slot];
  if (s.remote == nullptr) BC_RETURN_IF_ERROR(OpenSlot(slot));
  const uint64_t seq_offset = lease_.table.seq_offset;
  if (!peer_) {
    if (seq_offset != 0)  // a relay's slot: wait until it holds this position (and later)
      BC_RETURN_IF_ERROR(StreamWaitValue(user, s.remote + seq_offset, seq + 1));
    BC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(user, s.ready, 0),
                            "gpu: wait for the leader's copy");
    for (const SlotRange& r : ranges) stats_.ipc_bytes += r.bytes;
    return s.remote;
  }
  if (s.seq != seq) {  // first consumer batch carved from this producer batch: copy it over
    if (seq_offset != 0)
      BC_RETURN_IF_ERROR(StreamWaitValue(lane_stream_, s.remote + seq_offset, seq + 1));
    BC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(lane_stream_, s.ready, 0),
                            "gpu: wait for the leader's copy");
    for (const SlotRange& r : ranges) {
      BC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.local + r.offset, s.remote + r.offset, r.bytes,
                                              cudaMemcpyDeviceToDevice, lane_stream_),
                              fmt::format("gpu: peer copy of slot {}", slot));
      stats_.peer_bytes += r.bytes;
    }
    // The leader's slot is free for this lane as soon as the copy is done.
    BC_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.release, lane_stream_), "gpu: record release");
    BC_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.copied, lane_stream_), "gpu: record peer copy");
    s.seq = seq;
  }
  BC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(user, s.copied, 0), "gpu: wait for the peer copy");
  return s.local;
}

Status CudaDeviceMap::Release(uint32_t slot, void* stream) {
  if (slot >= slots_.size() || slots_[slot].remote == nullptr)
    return InternalError("gpu: release of slot {} that this consumer never acquired", slot);
  BC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "gpu: select the consumer's device");
  // All releases funnel through the lane stream, so its last record covers every stream
  // that used the slot, whichever order the trainer releases batches in.
  BC_RETURN_IF_ERROR(Chain(static_cast<cudaStream_t>(stream), lane_stream_));
  if (!peer_)
    BC_CUDA_RETURN_IF_ERROR(cudaEventRecord(slots_[slot].release, lane_stream_),
                            "gpu: record the release event");
  return Status::Ok();
}

// In the ring's own process: the ring's pointers and events, no IPC, same GPU.
class LocalDeviceMap final : public DeviceMap {
 public:
  LocalDeviceMap(DeviceRing& ring, int lane, std::function<void()> on_close)
      : ring_(ring), lane_(lane), on_close_(std::move(on_close)) {}
  ~LocalDeviceMap() override {
    if (lane_stream_ != nullptr) {
      if (cudaStreamSynchronize(lane_stream_) != cudaSuccess)
        BC_LOG(Warn, Cuda, "gpu: local lane shutdown: {}", cudaGetErrorString(cudaGetLastError()));
      (void)cudaStreamDestroy(lane_stream_);
    }
    if (on_close_) on_close_();
  }
  Status Init() {
    BC_CUDA_RETURN_IF_ERROR(cudaSetDevice(ring_.device()), "gpu: select the ring's device");
    BC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&lane_stream_, cudaStreamNonBlocking),
                            "gpu: create the local consumer's lane stream");
    return Status::Ok();
  }
  Result<uint8_t*> Acquire(uint32_t slot, uint64_t seq, std::span<const SlotRange> ranges,
                           void* stream) override {
    if (slot >= ring_.table().num_slots)
      return InternalError("gpu: slot {} beyond the device ring's {} slots", slot,
                           ring_.table().num_slots);
    BC_CUDA_RETURN_IF_ERROR(cudaSetDevice(ring_.device()), "gpu: select the ring's device");
    auto* memory = static_cast<uint8_t*>(ring_.device_slot(slot));
    if (ring_.table().seq_offset != 0)
      BC_RETURN_IF_ERROR(StreamWaitValue(stream, memory + ring_.table().seq_offset, seq + 1));
    BC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream),
                                                static_cast<cudaEvent_t>(ring_.ready_event(slot)), 0),
                            "gpu: wait for the ring's copy");
    for (const SlotRange& r : ranges) stats_.ipc_bytes += r.bytes;
    return memory;
  }
  Status Release(uint32_t slot, void* stream) override {
    BC_CUDA_RETURN_IF_ERROR(cudaSetDevice(ring_.device()), "gpu: select the ring's device");
    cudaEvent_t ev;
    BC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                            "gpu: create an ordering event");
    cudaError_t err = cudaEventRecord(ev, static_cast<cudaStream_t>(stream));
    if (err == cudaSuccess) err = cudaStreamWaitEvent(lane_stream_, ev, 0);
    (void)cudaEventDestroy(ev);
    BC_CUDA_RETURN_IF_ERROR(err, "gpu: order two streams");
    BC_CUDA_RETURN_IF_ERROR(
        cudaEventRecord(static_cast<cudaEvent_t>(ring_.release_event(slot, lane_)), lane_stream_),
        "gpu: record the release event");
    return Status::Ok();
  }
  // The ring's own canary: nothing to map or import in its own process.
  Status MapCanary() override { return Status::Ok(); }
  Status ImportCanaryEvents() override { return Status::Ok(); }
  Status ReadCanary(uint8_t* out, uint64_t bytes) override {
    BC_CUDA_RETURN_IF_ERROR(cudaSetDevice(ring_.device()), "gpu: select the ring's device");
    BC_CUDA_RETURN_IF_ERROR(
        cudaStreamWaitEvent(lane_stream_, static_cast<cudaEvent_t>(ring_.canary_ready_event()), 0),
        "gpu: wait for the canary's copy");
    BC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out, ring_.canary(), bytes, cudaMemcpyDeviceToHost,
                                            lane_stream_),
                            "gpu: read the canary back");
    BC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(lane_stream_), "gpu: wait for the canary read");
    return Status::Ok();
  }
  const DeviceSlotTable& table() const override { return ring_.table(); }
  int lane() const override { return lane_; }
  int device() const override { return ring_.device(); }
  bool peer() const override { return false; }
  DeviceMapStats stats() const override { return stats_; }

 private:
  DeviceRing& ring_;
  int lane_;
  std::function<void()> on_close_;
  cudaStream_t lane_stream_ = nullptr;
  DeviceMapStats stats_;
};

}  // namespace

Result<std::unique_ptr<DeviceMap>> DeviceMap::OpenLocal(DeviceRing& ring, int lane,
                                                        std::function<void()> on_close) {
  if (lane < 0 || lane >= int(kMaxGpuLanes))
    return InvalidArgumentError("gpu: local consumer lane {} outside 0..{}", lane,
                                kMaxGpuLanes - 1);
  auto map = std::make_unique<LocalDeviceMap>(ring, lane, std::move(on_close));
  BC_RETURN_IF_ERROR(map->Init());
  return std::unique_ptr<DeviceMap>(std::move(map));
}

Result<std::unique_ptr<DeviceMap>> DeviceMap::Open(const std::string& name, int device,
                                                   int64_t timeout_ms) {
  BC_RETURN_IF_ERROR(VisibleDeviceCount().status());
  BC_ASSIGN_OR_RETURN(HandleLease lease, FetchDeviceTable(name, timeout_ms));
  auto map = std::make_unique<CudaDeviceMap>(std::move(lease), device);
  BC_RETURN_IF_ERROR(map->Init());
  return std::unique_ptr<DeviceMap>(std::move(map));
}

#else  // CPU-only build

Result<std::unique_ptr<DeviceMap>> DeviceMap::Open(const std::string&, int, int64_t) {
  return VisibleDeviceCount().status();
}
Result<std::unique_ptr<DeviceMap>> DeviceMap::OpenLocal(DeviceRing&, int, std::function<void()>) {
  return VisibleDeviceCount().status();
}

#endif

}  // namespace batchcast::cuda
