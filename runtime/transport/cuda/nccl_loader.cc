// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/cuda/nccl_loader.h"

#if BATCHCAST_HAVE_CUDA
#include <dlfcn.h>

#include "core/errors.h"

namespace batchcast::cuda {
namespace {

constexpr const char* kNcclLibrary = "libnccl.so.2";
constexpr int kMinNcclVersion = 21800;  // ncclBroadcast with cudaStream_t, 2.18+

struct Loaded {
  NcclApi api;
  Status status;
};

template <typename Fn>
Status Resolve(void* lib, const char* name, Fn* out) {
  dlerror();
  void* sym = dlsym(lib, name);
  if (sym == nullptr) {
    const char* err = dlerror();
    return UnavailableError("nccl: {} has no symbol {} ({}); install NCCL 2.18 or newer",
                            kNcclLibrary, name, err ? err : "not found");
  }
  *out = reinterpret_cast<Fn>(sym);
  return Status::Ok();
}

Loaded Load() {
  Loaded l;
  void* lib = dlopen(kNcclLibrary, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    l.status = UnavailableError(
        "nccl: cannot load {} ({}); NCCL is needed only when a node's trainers use several "
        "GPUs: install NCCL 2 (the CUDA toolkit's, or pip's nvidia-nccl-cu13) and add its lib "
        "folder to LD_LIBRARY_PATH, or place the trainers on one GPU",
        kNcclLibrary, err ? err : "not found");
    return l;
  }
  NcclApi& a = l.api;
  Status st = Resolve(lib, "ncclGetUniqueId", &a.GetUniqueId);
  if (st.ok()) st = Resolve(lib, "ncclCommInitRank", &a.CommInitRank);
  if (st.ok()) st = Resolve(lib, "ncclCommDestroy", &a.CommDestroy);
  if (st.ok()) st = Resolve(lib, "ncclBroadcast", &a.Broadcast);
  if (st.ok()) st = Resolve(lib, "ncclGetErrorString", &a.GetErrorString);
  if (st.ok()) st = Resolve(lib, "ncclGetVersion", &a.GetVersion);
  if (st.ok() && a.GetVersion(&a.version) != ncclSuccess)
    st = UnavailableError("nccl: ncclGetVersion of {} failed", kNcclLibrary);
  if (st.ok() && a.version < kMinNcclVersion)
    st = UnavailableError("nccl: {} is NCCL {}.{}.{}; batchcast needs 2.18 or newer",
                          kNcclLibrary, a.version / 10000, a.version / 100 % 100,
                          a.version % 100);
  if (!st.ok()) {
    dlclose(lib);
    l.api = NcclApi{};
  }
  l.status = st;  // the library stays loaded for the life of the process
  return l;
}

}  // namespace

Result<const NcclApi*> LoadNccl() {
  static const Loaded loaded = Load();
  if (!loaded.status.ok()) return loaded.status;
  return &loaded.api;
}

}  // namespace batchcast::cuda
#endif  // BATCHCAST_HAVE_CUDA
