// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "gpu/gpu_dlpack.h"

#if __has_include(<dlpack/dlpack.h>)
#include <dlpack/dlpack.h>

#include "core/dtype.h"

namespace batchcast::gpu {
namespace {

struct DlpackOwner {
  DLManagedTensor managed{};
  int64_t shape[4] = {0, 0, 0, 0};
  std::shared_ptr<void> keep_alive;
};

DLDataType ToDlType(DType t) {
  const core::DTypeInfo* i = core::DTypeInfoOf(static_cast<uint32_t>(t));
  return i ? DLDataType{i->dl_code, i->dl_bits, 1} : DLDataType{kDLUInt, 8, 1};
}

}  // namespace

DLManagedTensor* ToDlpack(const DeviceTensorView& view, std::shared_ptr<void> keep_alive) {
  auto* owner = new DlpackOwner();
  owner->keep_alive = std::move(keep_alive);
  for (int i = 0; i < 4; ++i) owner->shape[i] = view.shape[i];
  DLTensor& t = owner->managed.dl_tensor;
  t.data = view.data;
  t.device = {kDLCUDA, view.device};
  t.ndim = view.ndim;
  t.dtype = ToDlType(view.dtype);
  t.shape = owner->shape;
  t.strides = nullptr;  // compact, row-major
  t.byte_offset = 0;
  owner->managed.manager_ctx = owner;
  owner->managed.deleter = [](DLManagedTensor* m) {
    delete static_cast<DlpackOwner*>(m->manager_ctx);
  };
  return &owner->managed;
}

}  // namespace batchcast::gpu

#else

namespace batchcast::gpu {
DLManagedTensor* ToDlpack(const DeviceTensorView&, std::shared_ptr<void>) { return nullptr; }
}  // namespace batchcast::gpu

#endif
