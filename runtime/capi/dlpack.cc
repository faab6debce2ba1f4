// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// DLPack export of a batch's tensors (bc_batch_to_dlpack*): the managed tensor's context
// holds the batch's KeepAlive() handle and the shape, so the slot stays mapped and
// unrecycled until the framework calls the deleter.
#include <dlpack/dlpack.h>

#include <memory>
#include <string>

#include "batchcast/batchcast_c.h"
#include "capi/guard.h"
#include "capi/handles.h"

namespace batchcast::capi {
namespace {

struct ExportContext {
  std::shared_ptr<void> keep_alive;
  int64_t shape[4] = {0, 0, 0, 0};
};

Status DescribeTensor(bc_batch_t batch, bc_tensor_kind_t which, ExportContext* ctx,
                      DLTensor* t) {
  if (batch == nullptr) return Status(StatusCode::kInvalidArgument, "dlpack: batch is NULL");
  if (which != BC_TENSOR_IMAGES && which != BC_TENSOR_LABELS) {
    return Status(StatusCode::kInvalidArgument,
                  "dlpack: tensor kind " + std::to_string(which) +
                      " is neither BC_TENSOR_IMAGES nor BC_TENSOR_LABELS");
  }
  const Batch& b = batch->batch;
  if (!b.valid()) return Status(StatusCode::kFailedPrecondition, "dlpack: the batch was released");
  const TensorView& v = which == BC_TENSOR_IMAGES ? b.images() : b.labels();
  ctx->keep_alive = b.KeepAlive();
  for (int i = 0; i < v.ndim && i < 4; ++i) ctx->shape[i] = v.shape[i];
  t->data = v.data;
  t->device = DLDevice{kDLCPU, 0};
  t->ndim = v.ndim;
  switch (v.dtype) {
    case DType::kUint8: t->dtype = DLDataType{kDLUInt, 8, 1}; break;
    case DType::kFloat32: t->dtype = DLDataType{kDLFloat, 32, 1}; break;
    case DType::kInt64: t->dtype = DLDataType{kDLInt, 64, 1}; break;
  }
  t->shape = ctx->shape;
  t->strides = nullptr;  // compact, row-major
  t->byte_offset = 0;
  return Status::Ok();
}

}  // namespace
}  // namespace batchcast::capi

using batchcast::Status;
using batchcast::StatusCode;
using batchcast::capi::DescribeTensor;
using batchcast::capi::ExportContext;
using batchcast::capi::Guard;

extern "C" {

bc_status_t bc_batch_to_dlpack(bc_batch_t batch, bc_tensor_kind_t which, DLManagedTensor** out) {
  return Guard("bc_batch_to_dlpack", [&]() -> Status {
    if (out == nullptr) return Status(StatusCode::kInvalidArgument, "dlpack: out is NULL");
    *out = nullptr;
    auto ctx = std::make_unique<ExportContext>();
    auto m = std::make_unique<DLManagedTensor>();
    BC_RETURN_IF_ERROR(DescribeTensor(batch, which, ctx.get(), &m->dl_tensor));
    m->manager_ctx = ctx.release();
    m->deleter = [](DLManagedTensor* self) {
      delete static_cast<ExportContext*>(self->manager_ctx);
      delete self;
    };
    *out = m.release();
    return Status::Ok();
  });
}

bc_status_t bc_batch_to_dlpack_versioned(bc_batch_t batch, bc_tensor_kind_t which,
                                         DLManagedTensorVersioned** out) {
  return Guard("bc_batch_to_dlpack_versioned", [&]() -> Status {
    if (out == nullptr) return Status(StatusCode::kInvalidArgument, "dlpack: out is NULL");
    *out = nullptr;
#if defined(DLPACK_MAJOR_VERSION) && DLPACK_MAJOR_VERSION >= 1
    auto ctx = std::make_unique<ExportContext>();
    auto m = std::make_unique<DLManagedTensorVersioned>();
    BC_RETURN_IF_ERROR(DescribeTensor(batch, which, ctx.get(), &m->dl_tensor));
    m->version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    m->flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    m->manager_ctx = ctx.release();
    m->deleter = [](DLManagedTensorVersioned* self) {
      delete static_cast<ExportContext*>(self->manager_ctx);
      delete self;
    };
    *out = m.release();
    return Status::Ok();
#else
    (void)batch;
    (void)which;
    return batchcast::capi::Unsupported(
        "bc_batch_to_dlpack_versioned: this library was built against DLPack " +
        std::to_string(DLPACK_VERSION) +
        ", which has no DLManagedTensorVersioned (DLPack 1.0): use bc_batch_to_dlpack");
#endif
  });
}

}  // extern "C"
