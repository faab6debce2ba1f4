// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/cuda/device_ring.h"

#include <unistd.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/errors.h"
#include "core/log.h"
#include "transport/cuda/canary.h"
#include "transport/cuda/cuda_status.h"
#include "transport/cuda/device_probe.h"
#include "transport/cuda/finish_kernel.h"
#include "transport/cuda/stream_value.h"

namespace batchcast::cuda {

#if BATCHCAST_HAVE_CUDA
namespace {

class CudaDeviceRing final : public DeviceRing {
 public:
  explicit CudaDeviceRing(const DeviceRingConfig& c) : config_(c) {}
  ~CudaDeviceRing() override;
  Status Init();

  Status WaitHostSlotFree(uint32_t slot) override;
  Status Stage(uint32_t slot, uint64_t seq, std::span<const SlotRange> ranges,
               const FinishSpec* finish, const StageHook& hook) override;
  Status Synchronize() override;
  const DeviceSlotTable& table() const override { return table_; }
  void* device_slot(uint32_t slot) const override { return slots_[slot]; }
  DeviceRingStats stats() const override { return stats_; }
  int device() const override { return config_.device; }
  void* stream() const override { return stream_; }
  void* ready_event(uint32_t slot) const override { return ready_[slot]; }
  void* release_event(uint32_t slot, int lane) const override {
    return release_[slot * kMaxGpuLanes + uint32_t(lane)];
  }
  const void* canary() const override { return canary_; }
  void* canary_ready_event() const override { return canary_ready_; }

 private:
  Status CreateEvent(cudaEvent_t* ev, IpcBytes* handle, const char* what);
  Status StageCanary();

  DeviceRingConfig config_;
  DeviceSlotTable table_{};
  cudaStream_t stream_ = nullptr;
  std::vector<uint8_t*> slots_;
  std::vector<cudaEvent_t> ready_;                  // [slot]; also marks "host slot read"
  std::vector<cudaEvent_t> release_;                // [slot * kMaxGpuLanes + lane]
  std::vector<bool> staged_;                        // ready_[slot] recorded at least once
  bool registered_ = false;
  DeviceRingStats stats_;
  uint8_t* canary_ = nullptr;
  cudaEvent_t canary_ready_ = nullptr;
  cudaEvent_t canary_release_ = nullptr;
};

// The canary (canary.h): host bytes from a fresh seed, copied in on the ring's stream the
// way slots are, its IPC handles published in the table (consumers check it once).
Status CudaDeviceRing::StageCanary() {
  std::random_device rd;
  table_.canary_seed = (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(getpid());
  table_.canary_bytes = kCanaryBytes;
  std::vector<uint8_t> host(kCanaryBytes);
  FillCanary(table_.canary_seed, host.data(), host.size());
  table_.canary_checksum = CanaryChecksum(host.data(), host.size());
  void* p = nullptr;
  BC_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, kCanaryBytes), "gpu: allocate the canary");
  canary_ = static_cast<uint8_t*>(p);
  cudaIpcMemHandle_t mh;
  BC_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&mh, p), "gpu: export the canary by IPC");
  std::memcpy(table_.canary_memory.bytes, &mh, sizeof mh);
  BC_RETURN_IF_ERROR(CreateEvent(&canary_ready_, &table_.canary_ready, "gpu: canary ready event"));
  BC_RETURN_IF_ERROR(
      CreateEvent(&canary_release_, &table_.canary_release, "gpu: canary release event"));
  BC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(canary_, host.data(), host.size(),
                                          cudaMemcpyHostToDevice, stream_),
                          "gpu: copy the canary to the device");
  BC_CUDA_RETURN_IF_ERROR(cudaEventRecord(canary_ready_, stream_), "gpu: record the canary");
  BC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "gpu: wait for the canary copy");
  return Status::Ok();
}

Status CudaDeviceRing::CreateEvent(cudaEvent_t* ev, IpcBytes* handle, const char* what) {
  BC_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(ev, cudaEventInterprocess | cudaEventDisableTiming), what);
  cudaIpcEventHandle_t h;
  BC_CUDA_RETURN_IF_ERROR(cudaIpcGetEventHandle(&h, *ev), what);
  static_assert(sizeof h == sizeof(IpcBytes), "CUDA IPC event handles are 64 bytes");
  std::memcpy(handle->bytes, &h, sizeof h);
  return Status::Ok();
}

Status CudaDeviceRing::Init() {
  const DeviceRingConfig& c = config_;
  if (c.num_slots == 0 || c.num_slots > kMaxDeviceSlots)
    return InvalidArgumentError("gpu: the ring has {} slots; the device ring supports 1..{} "
                                "(lower ring_slots)", c.num_slots, kMaxDeviceSlots);
  BC_RETURN_IF_ERROR(VisibleDeviceCount().status());
  BC_CUDA_RETURN_IF_ERROR(cudaSetDevice(c.device), fmt::format("gpu: select device {}", c.device));
  BC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                          "gpu: create the staging stream");
  // Pin the host slots so copies are true async DMA. A memlock limit can refuse it: the
  // copies still work (staged by the driver, synchronous to the host), so warn and go on.
  cudaError_t reg = cudaSuccess;
  if (c.host_slots != nullptr)
    reg = cudaHostRegister(c.host_slots, uint64_t(c.num_slots) * c.host_slot_bytes,
                           cudaHostRegisterDefault);
  registered_ = c.host_slots != nullptr && reg == cudaSuccess;
  stats_.pinned = registered_;
  if (c.host_slots != nullptr && !registered_) {
    (void)cudaGetLastError();
    BC_LOG(Warn, Cuda, "gpu: cannot pin the host ring ({} MiB): {}; copies will not overlap "
           "decoding (raise ulimit -l)", (uint64_t(c.num_slots) * c.host_slot_bytes) >> 20,
           cudaGetErrorString(reg));
  }
  table_.magic = kDeviceTableMagic;
  table_.version = kDeviceTableVersion;
  table_.num_slots = c.num_slots;
  table_.host_slot_bytes = c.host_slot_bytes;
  table_.finished_offset = c.finished_bytes ? (c.host_slot_bytes + 255) / 256 * 256 : 0;
  table_.slot_bytes = table_.finished_offset ? table_.finished_offset + c.finished_bytes
                                             : c.host_slot_bytes;
  if (c.seq_words) {
    table_.seq_offset = (table_.slot_bytes + 255) / 256 * 256;
    table_.slot_bytes = table_.seq_offset + 256;
  }
  table_.leader_pid = static_cast<int32_t>(getpid());
  table_.finish_channels = c.finish_channels;
  BC_ASSIGN_OR_RETURN(std::string bus, DevicePciBusId(c.device));
  std::snprintf(table_.pci_bus_id, sizeof table_.pci_bus_id, "%s", bus.c_str());
  slots_.assign(c.num_slots, nullptr);
  ready_.assign(c.num_slots, nullptr);
  release_.assign(size_t(c.num_slots) * kMaxGpuLanes, nullptr);
  staged_.assign(c.num_slots, false);
  for (uint32_t i = 0; i < c.num_slots; ++i) {
    void* p = nullptr;
    BC_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, table_.slot_bytes),
                            fmt::format("gpu: allocate device slot {} ({} MiB) on device {}", i,
                                        table_.slot_bytes >> 20, c.device));
    slots_[i] = static_cast<uint8_t*>(p);
    if (table_.seq_offset != 0)
      BC_CUDA_RETURN_IF_ERROR(cudaMemset(slots_[i] + table_.seq_offset, 0, sizeof(uint64_t)),
                              "gpu: clear a slot's sequence word");
    cudaIpcMemHandle_t mh;
    BC_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&mh, p), "gpu: export a device slot by IPC");
    std::memcpy(table_.slot_memory[i].bytes, &mh, sizeof mh);
    BC_RETURN_IF_ERROR(CreateEvent(&ready_[i], &table_.ready_event[i], "gpu: ready event"));
    for (uint32_t l = 0; l < kMaxGpuLanes; ++l)
      BC_RETURN_IF_ERROR(CreateEvent(&release_[i * kMaxGpuLanes + l],
                                     &table_.release_event[i][l], "gpu: release event"));
  }
  BC_RETURN_IF_ERROR(StageCanary());
  BC_LOG(Info, Cuda, "gpu: device ring of {} slots x {:.3g} MiB on device {} ({}), host ring {}",
         c.num_slots, double(table_.slot_bytes) / (1 << 20), c.device, table_.pci_bus_id,
         c.host_slots == nullptr ? "none (receive-only)" : registered_ ? "pinned" : "NOT pinned");
  return Status::Ok();
}

CudaDeviceRing::~CudaDeviceRing() {
  if (stream_ != nullptr && cudaStreamSynchronize(stream_) != cudaSuccess)
    BC_LOG(Warn, Cuda, "gpu: device ring shutdown: {}", cudaGetErrorString(cudaGetLastError()));
  for (cudaEvent_t e : release_) if (e) (void)cudaEventDestroy(e);
  for (cudaEvent_t e : ready_) if (e) (void)cudaEventDestroy(e);
  for (uint8_t* p : slots_) if (p) (void)cudaFree(p);
  if (canary_ready_) (void)cudaEventDestroy(canary_ready_);
  if (canary_release_) (void)cudaEventDestroy(canary_release_);
  if (canary_) (void)cudaFree(canary_);
  if (registered_) (void)cudaHostUnregister(config_.host_slots);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

Status CudaDeviceRing::WaitHostSlotFree(uint32_t slot) {
  if (!staged_[slot]) return Status::Ok();
  BC_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(ready_[slot]),
                          fmt::format("gpu: wait for the copy out of host slot {}", slot));
  return Status::Ok();
}

Status CudaDeviceRing::Stage(uint32_t slot, uint64_t seq, std::span<const SlotRange> ranges,
                             const FinishSpec* finish, const StageHook& hook) {
  if (slot >= config_.num_slots)
    return InternalError("gpu: stage of slot {} beyond the device ring's {} slots", slot,
                         config_.num_slots);
  BC_CUDA_RETURN_IF_ERROR(cudaSetDevice(config_.device), "gpu: select the ring's device");
  // A never-recorded event is complete, so waiting on every lane is always correct.
  for (uint32_t l = 0; l < kMaxGpuLanes; ++l)
    BC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, release_[slot * kMaxGpuLanes + l], 0),
                            "gpu: order the copy after the consumers' release");
  for (const SlotRange& r : ranges) {
    if (r.offset + r.bytes > config_.host_slot_bytes)
      return InternalError("gpu: range [{}, +{}) leaves host slot of {} bytes", r.offset, r.bytes,
                           config_.host_slot_bytes);
    if (config_.host_slots == nullptr) continue;  // receive-only: the hook fills the slot
    const uint8_t* host = config_.host_slots + uint64_t(slot) * config_.host_slot_bytes;
    BC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slots_[slot] + r.offset, host + r.offset, r.bytes,
                                            cudaMemcpyHostToDevice, stream_),
                            fmt::format("gpu: copy host slot {} to the device", slot));
    stats_.h2d_bytes += r.bytes;
  }
  if (hook) BC_RETURN_IF_ERROR(hook(slots_[slot], stream_));
  if (finish != nullptr && table_.finished_offset != 0) {
    if (finish->images_offset >= config_.host_slot_bytes)
      return InternalError("gpu: images offset {} leaves the slot of {} bytes",
                           finish->images_offset, config_.host_slot_bytes);
    BC_RETURN_IF_ERROR(LaunchFinish(slots_[slot] + finish->images_offset,
                                    reinterpret_cast<float*>(slots_[slot] + table_.finished_offset),
                                    *finish, stream_));
  }
  if (table_.seq_offset != 0)
    BC_RETURN_IF_ERROR(StreamWriteValue(stream_, slots_[slot] + table_.seq_offset, seq + 1));
  BC_CUDA_RETURN_IF_ERROR(cudaEventRecord(ready_[slot], stream_), "gpu: record the ready event");
  staged_[slot] = true;
  if (config_.host_slots != nullptr) stats_.h2d_copies += 1;
  return Status::Ok();
}

Status CudaDeviceRing::Synchronize() {
  BC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "gpu: wait for the staging stream");
  return Status::Ok();
}

}  // namespace

Status LaunchFinish(const uint8_t* images, float* out, const FinishSpec& spec, void* stream) {
  FinishKernelArgs a{spec.samples, spec.channels, spec.height, spec.width, spec.channels_last,
                     {}, {}};
  for (int k = 0; k < 3; ++k) {
    a.mean[k] = spec.mean[k];
    a.inv_std[k] = spec.inv_std[k];
  }
  BC_CUDA_RETURN_IF_ERROR(static_cast<cudaError_t>(LaunchFinishKernel(images, out, a, stream)),
                          "gpu: launch the finishing kernel");
  return Status::Ok();
}

Result<std::unique_ptr<DeviceRing>> DeviceRing::Create(const DeviceRingConfig& config) {
  auto ring = std::make_unique<CudaDeviceRing>(config);
  BC_RETURN_IF_ERROR(ring->Init());
  return std::unique_ptr<DeviceRing>(std::move(ring));
}

#else  // CPU-only build: the same entry point, no device

Result<std::unique_ptr<DeviceRing>> DeviceRing::Create(const DeviceRingConfig&) {
  return VisibleDeviceCount().status();
}

Status LaunchFinish(const uint8_t*, float*, const FinishSpec&, void*) {
  return VisibleDeviceCount().status();
}

#endif

}  // namespace batchcast::cuda
