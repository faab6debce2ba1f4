// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/cuda/nccl_broadcast.h"

#include <cstring>

#include "core/errors.h"
#include "core/log.h"
#include "transport/cuda/cuda_status.h"
#include "transport/cuda/device_probe.h"

#include "transport/cuda/nccl_loader.h"

namespace batchcast::cuda {

#if BATCHCAST_HAVE_CUDA
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes, "NCCL unique id size changed");

// `nccl` is the loaded NcclApi (nccl_loader.h) in scope.
#define BC_NCCL_RETURN_IF_ERROR(call, what)                                              \
  do {                                                                                   \
    ncclResult_t bc_nccl_r_ = (call);                                                    \
    if (bc_nccl_r_ != ncclSuccess)                                                       \
      return NcclError(static_cast<int>(bc_nccl_r_), nccl->GetErrorString(bc_nccl_r_), (what)); \
  } while (0)

class NcclBroadcastImpl final : public NcclBroadcast {
 public:
  NcclBroadcastImpl(const NcclApi* api, ncclComm_t comm, int rank, int size, int device)
      : nccl_(api), comm_(comm), rank_(rank), size_(size), device_(device) {}
  ~NcclBroadcastImpl() override {
    ncclResult_t r = nccl_->CommDestroy(comm_);
    if (r != ncclSuccess) BC_LOG(Warn, Cuda, "nccl: destroy: {}", nccl_->GetErrorString(r));
  }
  Status Broadcast(void* buffer, uint64_t bytes, int root, void* stream) override {
    BC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "nccl: select device");
    const NcclApi* nccl = nccl_;
    BC_NCCL_RETURN_IF_ERROR(nccl->Broadcast(buffer, buffer, bytes, ncclUint8, root, comm_,
                                          static_cast<cudaStream_t>(stream)),
                            fmt::format("nccl: broadcast {} bytes from rank {}", bytes, root));
    bytes_ += bytes;
    return Status::Ok();
  }
  uint64_t bytes() const override { return bytes_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

 private:
  const NcclApi* nccl_;
  ncclComm_t comm_;
  int rank_, size_, device_;
  uint64_t bytes_ = 0;
};

}  // namespace

Result<std::string> NcclBroadcast::NewUniqueId() {
  BC_ASSIGN_OR_RETURN(const NcclApi* nccl, LoadNccl());
  ncclUniqueId id;
  BC_NCCL_RETURN_IF_ERROR(nccl->GetUniqueId(&id), "nccl: create a unique id");
  return std::string(reinterpret_cast<const char*>(&id), sizeof id);
}

Result<std::unique_ptr<NcclBroadcast>> NcclBroadcast::Create(const std::string& unique_id,
                                                             int nranks, int rank, int device) {
  if (unique_id.size() != kNcclIdBytes)
    return InvalidArgumentError("nccl: unique id has {} bytes, expected {}", unique_id.size(),
                                kNcclIdBytes);
  BC_RETURN_IF_ERROR(VisibleDeviceCount().status());
  BC_ASSIGN_OR_RETURN(const NcclApi* nccl, LoadNccl());
  BC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device), fmt::format("nccl: select device {}", device));
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof id);
  ncclComm_t comm = nullptr;
  BC_NCCL_RETURN_IF_ERROR(nccl->CommInitRank(&comm, nranks, id, rank),
                          fmt::format("nccl: rank {} of {} joins the node's GPU communicator",
                                      rank, nranks));
  return std::unique_ptr<NcclBroadcast>(new NcclBroadcastImpl(nccl, comm, rank, nranks, device));
}

#else  // CPU-only build

Result<std::string> NcclBroadcast::NewUniqueId() { return VisibleDeviceCount().status(); }
Result<std::unique_ptr<NcclBroadcast>> NcclBroadcast::Create(const std::string&, int, int, int) {
  return VisibleDeviceCount().status();
}

#endif

}  // namespace batchcast::cuda
