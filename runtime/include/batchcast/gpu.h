// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The GPU data plane, consumer side (docs/gpu.md): each producer batch crosses PCIe once
// per GPU; trainers on that GPU read it in place through CUDA IPC.
//
//   auto consumer = batchcast::Consumer::Attach(address, options).value();
//   int device = batchcast::SelectGpu({}).value();            // from the launcher's placement
//   auto gpu = batchcast::GpuConsumer::Attach(*consumer, address, device).value();
//   batchcast::DeviceBatch batch;
//   while (gpu->Next(stream, &batch).ok()) { train(batch.images(), stream); batch.Release(); }
//
// Streams are cudaStream_t passed as void*, so this header needs no CUDA headers. Work
// queued on the stream before Release() (or before the last KeepAlive() handle goes) is
// ordered before the leader overwrites the slot; the host never waits on the GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "batchcast/batch.h"
#include "batchcast/consumer.h"
#include "batchcast/export.h"
#include "batchcast/options.h"
#include "batchcast/status.h"

namespace batchcast {

// A tensor in device memory: `data` is a device pointer on CUDA device `device` (an
// ordinal of this process). With device-side finishing, images are float32 N x C x H x W.
struct DeviceTensorView {
  void* data = nullptr;
  DType dtype = DType::kUint8;
  int ndim = 0;
  int64_t shape[4] = {0, 0, 0, 0};
  size_t nbytes = 0;
  int device = -1;
};

namespace internal {
struct DeviceBatchRef;
class GpuConsumerCore;
struct GpuConsumerFactory;
}

class BATCHCAST_API DeviceBatch {
 public:
  DeviceBatch() = default;
  bool valid() const { return ref_ != nullptr; }
  const DeviceTensorView& images() const { return images_; }
  const DeviceTensorView& labels() const { return labels_; }
  const BatchInfo& info() const { return info_; }
  int64_t size() const { return info_.size; }
  // The same batch's host views (sample_ids(), host images), valid while this one is.
  const Batch& host() const;
  // Orders the slot's reuse after the work queued so far on the batch's stream and gives
  // the host slot back. Also done when the last KeepAlive() handle is dropped.
  void Release() { ref_.reset(); }
  // Keeps the slot alive independently of this DeviceBatch (torch deleter, DLPack).
  std::shared_ptr<void> KeepAlive() const { return ref_; }

 private:
  friend class internal::GpuConsumerCore;
  std::shared_ptr<internal::DeviceBatchRef> ref_;
  DeviceTensorView images_;
  DeviceTensorView labels_;
  BatchInfo info_;
};

struct GpuConsumerStats {
  int64_t batches = 0;
  uint64_t ipc_bytes = 0;       // read in place from the leader's allocation
  uint64_t peer_bytes = 0;      // copied from another GPU of the node (peer path)
  uint64_t handles_opened = 0;  // IPC memory handles opened (<= ring slots)
  bool peer = false;            // the slots live on another GPU
  int lane = -1;
};

class BATCHCAST_API GpuConsumer {
 public:
  // Maps the device slots of the leader at `address` (the same address `consumer`
  // attached to) on visible device `device`, and checks the device path once before the
  // first batch (the leader's canary mapped by IPC, its events imported, its bytes compared
  // by checksum with the host bytes; docs/gpu.md "The safe device path"): an error names
  // the step that failed. kUnavailable "no CUDA device visible: ..." without a GPU;
  // kNotFound when the leader stages no device slots.
  static Result<std::unique_ptr<GpuConsumer>> Attach(Consumer& consumer, const std::string& address,
                                                     int device);
  ~GpuConsumer();
  GpuConsumer(const GpuConsumer&) = delete;
  GpuConsumer& operator=(const GpuConsumer&) = delete;

  // The consumer's next batch as device tensors usable on `stream` (cudaStream_t).
  // kEndOfStream after the last one, like Consumer::Next.
  Status Next(void* stream, DeviceBatch* out);
  // The same for a host batch already taken from the consumer (takes it over).
  Status ToDevice(Batch&& batch, void* stream, DeviceBatch* out);
  int device() const;
  GpuConsumerStats stats() const;

 private:
  friend struct internal::GpuConsumerFactory;
  GpuConsumer() = default;
  std::shared_ptr<internal::GpuConsumerCore> core_;
};

// Where the launcher placed this trainer: its index among the node's trainers and how
// many trainers share a GPU (k trainers per GPU, with or without MPS).
struct GpuPlacement {
  int local_rank = -1;        // -1: LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, 0
  int trainers_per_gpu = 0;   // 0: BATCHCAST_TRAINERS_PER_GPU, else 1
};

// The GPU for trainer `local_rank` when `trainers_per_gpu` share each of `visible` GPUs:
// local_rank / trainers_per_gpu. An error names the missing GPUs. Pure; no device needed.
BATCHCAST_API Result<int> GpuForLocalRank(int local_rank, int trainers_per_gpu, int visible);
// GpuForLocalRank with the placement (or the launcher's environment) and this process's
// visible devices (CUDA_VISIBLE_DEVICES applies). "no CUDA device visible: ..." without one.
BATCHCAST_API Result<int> SelectGpu(const GpuPlacement& placement);

// The device side of AttachFromEnvironment, for a trainer started by batchcast-run: maps the
// slots of the node leader at BATCHCAST_ADDRESS on this process's GPU (SelectGpu with
// options.trainers_per_gpu; the launcher pins one GPU per trainer). kFailedPrecondition
// with gpu=off or without BATCHCAST_ADDRESS; kUnavailable "no CUDA device visible: ..."
// without a device; "gpu: the leader publishes no device slots ..." when the leader
// stages none (its gpu=off, or no GPU on its side): fall back to the host Batch then.
// The device path is checked as in GpuConsumer::Attach; with options.gpu=auto a failed
// check logs one WARN and returns kUnavailable "gpu=auto: host path: ..." (use the host
// Batch), with gpu=on the error says "gpu=on, but ..." (fail the trainer). The same under
// gpu=auto for a consumer whose batches cannot be mapped (its batch_size does not divide
// the producer batch, pad_last, mode=shard): kUnavailable naming that, without a check.
BATCHCAST_API Result<std::unique_ptr<GpuConsumer>> AttachGpuFromEnvironment(
    Consumer& consumer, const Options& options);

}  // namespace batchcast
