// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/cuda/nccl_broadcast.h"

#include <cstring>

#include "core/errors.h"
#include "core/log.h"
#include "transport/cuda/cuda_status.h"
#include "transport/cuda/device_probe.h"

#if BATCHCAST_HAVE_CUDA
#include <nccl.h>
#endif

namespace batchcast::cuda {

#if BATCHCAST_HAVE_CUDA
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes, "NCCL unique id size changed");

#define BC_NCCL_RETURN_IF_ERROR(call, what)                                 \
  do {                                                                      \
    ncclResult_t bc_nccl_r_ = (call);                                       \
    if (bc_nccl_r_ != ncclSuccess)                                          \
      return NcclError(static_cast<int>(bc_nccl_r_), ncclGetErrorString(bc_nccl_r_), (what)); \
  } while (0)

class NcclBroadcastImpl final : public NcclBroadcast {
 public:
  NcclBroadcastImpl(ncclComm_t comm, int rank, int size, int device)
      : comm_(comm), rank_(rank), size_(size), device_(device) {}
  ~NcclBroadcastImpl() override {
    ncclResult_t r = ncclCommDestroy(comm_);
    if (r != ncclSuccess) BC_LOG(Warn, Cuda, "nccl: destroy: {}", ncclGetErrorString(r));
  }
  Status Broadcast(void* buffer, uint64_t bytes, int root, void* stream) override {
    BC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "nccl: select device");
    BC_NCCL_RETURN_IF_ERROR(ncclBroadcast(buffer, buffer, bytes, ncclUint8, root, comm_,
                                          static_cast<cudaStream_t>(stream)),
                            fmt::format("nccl: broadcast {} bytes from rank {}", bytes, root));
    bytes_ += bytes;
    return Status::Ok();
  }
  uint64_t bytes() const override { return bytes_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

 private:
  ncclComm_t comm_;
  int rank_, size_, device_;
  uint64_t bytes_ = 0;
};

}  // namespace

Result<std::string> NcclBroadcast::NewUniqueId() {
  ncclUniqueId id;
  BC_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id), "nccl: create a unique id");
  return std::string(reinterpret_cast<const char*>(&id), sizeof id);
}

Result<std::unique_ptr<NcclBroadcast>> NcclBroadcast::Create(const std::string& unique_id,
                                                             int nranks, int rank, int device) {
  if (unique_id.size() != kNcclIdBytes)
    return InvalidArgumentError("nccl: unique id has {} bytes, expected {}", unique_id.size(),
                                kNcclIdBytes);
  BC_RETURN_IF_ERROR(VisibleDeviceCount().status());
  BC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device), fmt::format("nccl: select device {}", device));
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof id);
  ncclComm_t comm = nullptr;
  BC_NCCL_RETURN_IF_ERROR(ncclCommInitRank(&comm, nranks, id, rank),
                          fmt::format("nccl: rank {} of {} joins the node's GPU communicator",
                                      rank, nranks));
  return std::unique_ptr<NcclBroadcast>(new NcclBroadcastImpl(comm, rank, nranks, device));
}

#else  // CPU-only build

Result<std::string> NcclBroadcast::NewUniqueId() { return VisibleDeviceCount().status(); }
Result<std::unique_ptr<NcclBroadcast>> NcclBroadcast::Create(const std::string&, int, int, int) {
  return VisibleDeviceCount().status();
}

#endif

}  // namespace batchcast::cuda
