// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/cuda/nccl_fanout.h"

#include <cstring>

#include "core/errors.h"
#include "core/log.h"
#include "transport/cuda/cuda_status.h"
#include "transport/cuda/device_probe.h"

namespace batchcast::cuda {

Status ValidateFanoutHeader(const FanoutHeader& h, uint32_t num_slots, uint64_t slot_bytes) {
  if (h.magic != kFanoutMagic)
    return InternalError("nccl fanout: header magic {:#x}, expected {:#x} (ranks out of step)",
                         h.magic, kFanoutMagic);
  if (h.kind == kFanoutEnd) return Status::Ok();
  if (h.kind != kFanoutBatch) return InternalError("nccl fanout: header kind {} unknown", h.kind);
  if (h.slot >= num_slots)
    return InternalError("nccl fanout: slot {} beyond the relay ring's {} slots", h.slot,
                         num_slots);
  if (h.num_ranges > 3)
    return InternalError("nccl fanout: {} ranges in one batch, at most 3", h.num_ranges);
  for (uint32_t i = 0; i < h.num_ranges; ++i) {
    const SlotRange& r = h.ranges[i];
    if (r.offset > slot_bytes || r.bytes > slot_bytes - r.offset)
      return InternalError("nccl fanout: range [{}, +{}) leaves the relay's slot of {} bytes",
                           r.offset, r.bytes, slot_bytes);
  }
  return Status::Ok();
}

#if BATCHCAST_HAVE_CUDA
namespace {

class CudaNcclFanout final : public NcclFanout {
 public:
  CudaNcclFanout(std::unique_ptr<NcclBroadcast> comm, int device)
      : comm_(std::move(comm)), device_(device) {}
  ~CudaNcclFanout() override {
    if (host_ != nullptr) (void)cudaFreeHost(host_);
    if (dev_ != nullptr) (void)cudaFree(dev_);
  }

  // Root: one header per ring slot (a slot's header is rewritten only after the ring's
  // ready event of its previous use, which follows this copy) plus one for the end.
  Status Init(bool root) {
    const uint64_t entries = root ? kMaxDeviceSlots + 1 : 1;
    BC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "nccl fanout: select device");
    BC_CUDA_RETURN_IF_ERROR(cudaMallocHost(&host_, entries * kFanoutHeaderBytes),
                            "nccl fanout: pinned header buffer");
    BC_CUDA_RETURN_IF_ERROR(cudaMalloc(&dev_, entries * kFanoutHeaderBytes),
                            "nccl fanout: device header buffer");
    std::memset(host_, 0, entries * kFanoutHeaderBytes);
    return Status::Ok();
  }

  Status SendHeader(uint64_t entry, const FanoutHeader& h, void* stream) {
    uint8_t* host = static_cast<uint8_t*>(host_) + entry * kFanoutHeaderBytes;
    uint8_t* dev = static_cast<uint8_t*>(dev_) + entry * kFanoutHeaderBytes;
    std::memcpy(host, &h, sizeof h);
    BC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev, host, kFanoutHeaderBytes, cudaMemcpyHostToDevice,
                                            static_cast<cudaStream_t>(stream)),
                            "nccl fanout: stage the header");
    return comm_->Broadcast(dev, kFanoutHeaderBytes, 0, stream);
  }

  Status Send(uint32_t slot, uint64_t seq, std::span<const SlotRange> ranges,
              const FinishSpec* finish, uint8_t* slot_memory, void* stream) override {
    if (slot >= kMaxDeviceSlots || ranges.size() > 3)
      return InternalError("nccl fanout: slot {} with {} ranges cannot be sent", slot,
                           ranges.size());
    FanoutHeader h;
    h.slot = slot;
    h.seq = seq;
    h.num_ranges = static_cast<uint32_t>(ranges.size());
    for (size_t i = 0; i < ranges.size(); ++i) h.ranges[i] = ranges[i];
    if (finish != nullptr) {
      h.has_finish = 1;
      h.finish = *finish;
    }
    BC_RETURN_IF_ERROR(SendHeader(slot, h, stream));
    for (const SlotRange& r : ranges) {
      BC_RETURN_IF_ERROR(comm_->Broadcast(slot_memory + r.offset, r.bytes, 0, stream));
      bytes_ += r.bytes;
    }
    return Status::Ok();
  }

  Status SendEnd(void* stream) override {
    FanoutHeader h;
    h.kind = kFanoutEnd;
    BC_RETURN_IF_ERROR(SendHeader(kMaxDeviceSlots, h, stream));
    BC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
                            "nccl fanout: wait for the end of the stream to be sent");
    return Status::Ok();
  }

  Result<FanoutHeader> ReceiveHeader(void* stream) override {
    BC_RETURN_IF_ERROR(comm_->Broadcast(dev_, kFanoutHeaderBytes, 0, stream));
    auto s = static_cast<cudaStream_t>(stream);
    BC_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host_, dev_, kFanoutHeaderBytes, cudaMemcpyDeviceToHost, s),
        "nccl fanout: read the header");
    BC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "nccl fanout: wait for the header");
    FanoutHeader h;
    std::memcpy(&h, host_, sizeof h);
    return h;
  }

  Status ReceiveRanges(const FanoutHeader& h, uint8_t* slot_memory, void* stream) override {
    for (uint32_t i = 0; i < h.num_ranges && i < 3; ++i) {
      BC_RETURN_IF_ERROR(
          comm_->Broadcast(slot_memory + h.ranges[i].offset, h.ranges[i].bytes, 0, stream));
      bytes_ += h.ranges[i].bytes;
    }
    return Status::Ok();
  }

  uint64_t bytes() const override { return bytes_; }
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }

 private:
  std::unique_ptr<NcclBroadcast> comm_;
  int device_;
  void* host_ = nullptr;
  void* dev_ = nullptr;
  uint64_t bytes_ = 0;
};

Result<std::unique_ptr<NcclFanout>> MakeFanout(std::unique_ptr<NcclBroadcast> comm, int device,
                                               bool root) {
  if (comm == nullptr) return InvalidArgumentError("nccl fanout: no communicator");
  if (root != (comm->rank() == 0))
    return InvalidArgumentError("nccl fanout: the root must be NCCL rank 0 (this is rank {})",
                                comm->rank());
  auto f = std::make_unique<CudaNcclFanout>(std::move(comm), device);
  BC_RETURN_IF_ERROR(f->Init(root));
  return std::unique_ptr<NcclFanout>(std::move(f));
}

}  // namespace

Result<std::unique_ptr<NcclFanout>> NcclFanout::CreateRoot(std::unique_ptr<NcclBroadcast> comm,
                                                           int device) {
  return MakeFanout(std::move(comm), device, true);
}
Result<std::unique_ptr<NcclFanout>> NcclFanout::CreateRelay(std::unique_ptr<NcclBroadcast> comm,
                                                            int device) {
  return MakeFanout(std::move(comm), device, false);
}

#else  // CPU-only build

Result<std::unique_ptr<NcclFanout>> NcclFanout::CreateRoot(std::unique_ptr<NcclBroadcast>, int) {
  return VisibleDeviceCount().status();
}
Result<std::unique_ptr<NcclFanout>> NcclFanout::CreateRelay(std::unique_ptr<NcclBroadcast>, int) {
  return VisibleDeviceCount().status();
}

#endif

}  // namespace batchcast::cuda
