// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// DLPack export of a batch's tensors (bc_batch_to_dlpack*): the managed tensor's context
// holds the batch's KeepAlive() handle and the shape, so the slot stays mapped and
// unrecycled until the framework calls the deleter.
#include <dlpack/dlpack.h>

#include <memory>
#include <string>
#include <string_view>

#include "batchcast/batchcast_c.h"
#include "capi/guard.h"
#include "capi/struct_io.h"
#include "core/dtype.h"
#include "capi/handles.h"

namespace batchcast::capi {
namespace {

struct ExportContext {
  std::shared_ptr<void> keep_alive;
  int64_t shape[4] = {0, 0, 0, 0};
};

// The view of the batch's tensor `name` ("images", "labels", "sample_ids" or a named one), or
// with `offsets` the row offsets of variable-length tensor `name`. `who` prefixes messages.
Result<TensorView> NamedView(const Batch& b, const char* name, bool offsets = false,
                             const char* who = "dlpack") {
  if (name == nullptr)
    return Status(StatusCode::kInvalidArgument, std::string(who) + ": name is NULL");
  if (!b.valid())
    return Status(StatusCode::kFailedPrecondition, std::string(who) + ": the batch was released");
  TensorView v = b.tensor(name);
  if (v.data == nullptr && v.nbytes == 0 && v.ndim == 0) {
    std::string have =
        b.images().nbytes > 0 ? "images, labels, sample_ids" : "labels, sample_ids";
    for (int i = 0; i < b.num_tensors(); ++i) have += std::string(", ") + b.tensor_name(i);
    if (std::string_view(name) == "images")
      return Status(StatusCode::kNotFound,
                    std::string(who) + ": the batch has no images: its producer does not "
                    "publish them (a leader model stage with keep_input=false in option 'stage' "
                    "reads them and publishes only its output; or a Producer's dict batches "
                    "without images); it has " + have);
    return Status(StatusCode::kNotFound, std::string(who) + ": the batch has no tensor '" +
                                             name + "'; it has " + have);
  }
  if (!offsets) return v;
  const TensorView off = b.offsets(name);
  if (off.data == nullptr)
    return Status(StatusCode::kInvalidArgument,
                  std::string(who) + ": tensor '" + name + "' has a fixed per-sample shape, no "
                  "row offsets: take it whole with bc_batch_tensor_dlpack");
  return off;
}

Status DescribeTensor(bc_batch_t batch, const char* name, ExportContext* ctx, DLTensor* t,
                      bool offsets = false) {
  if (batch == nullptr) return Status(StatusCode::kInvalidArgument, "dlpack: batch is NULL");
  BC_ASSIGN_OR_RETURN(const auto b, LookUpBatch(batch, "dlpack"));
  BC_ASSIGN_OR_RETURN(const TensorView v, NamedView(b->batch, name, offsets));
  ctx->keep_alive = b->batch.KeepAlive();
  for (int i = 0; i < v.ndim && i < 4; ++i) ctx->shape[i] = v.shape[i];
  t->data = v.data;
  t->device = DLDevice{kDLCPU, 0};
  t->ndim = v.ndim;
  const core::DTypeInfo* info = core::DTypeInfoOf(static_cast<uint32_t>(v.dtype));
  if (info == nullptr)
    return Status(StatusCode::kInvalidArgument, "dlpack: tensor '" + std::string(name) +
                                                    "' has an unknown dtype code " +
                                                    std::to_string(uint32_t(v.dtype)));
  t->dtype = DLDataType{info->dl_code, info->dl_bits, 1};  // bool leaves as uint8 (DLPack 0.6)
  t->shape = ctx->shape;
  t->strides = nullptr;  // compact, row-major
  t->byte_offset = 0;
  return Status::Ok();
}

Result<const char*> KindName(bc_tensor_kind_t which) {
  if (which == BC_TENSOR_IMAGES) return "images";
  if (which == BC_TENSOR_LABELS) return "labels";
  return Status(StatusCode::kInvalidArgument,
                "dlpack: tensor kind " + std::to_string(which) +
                    " is neither BC_TENSOR_IMAGES nor BC_TENSOR_LABELS");
}

// A DLManagedTensor over the batch's tensor `name` (its row offsets with `offsets`).
Status ExportNamed(bc_batch_t batch, const char* name, DLManagedTensor** out,
                   bool offsets = false) {
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "dlpack: out is NULL");
  *out = nullptr;
  auto ctx = std::make_unique<ExportContext>();
  auto m = std::make_unique<DLManagedTensor>();
  BC_RETURN_IF_ERROR(DescribeTensor(batch, name, ctx.get(), &m->dl_tensor, offsets));
  m->manager_ctx = ctx.release();
  m->deleter = [](DLManagedTensor* self) {
    delete static_cast<ExportContext*>(self->manager_ctx);
    delete self;
  };
  *out = m.release();
  return Status::Ok();
}

}  // namespace
}  // namespace batchcast::capi

using batchcast::Status;
using batchcast::StatusCode;
using batchcast::capi::DescribeTensor;
using batchcast::capi::ExportContext;
using batchcast::capi::ExportNamed;
using batchcast::capi::FillTensor;
using batchcast::capi::Guard;
using batchcast::capi::KindName;
using batchcast::capi::LookUpBatch;
using batchcast::capi::NamedView;
using batchcast::capi::StructOut;

extern "C" {

bc_status_t bc_batch_to_dlpack(bc_batch_t batch, bc_tensor_kind_t which, DLManagedTensor** out) {
  return Guard("bc_batch_to_dlpack", [&]() -> Status {
    if (out != nullptr) *out = nullptr;
    BC_ASSIGN_OR_RETURN(const char* name, KindName(which));
    return ExportNamed(batch, name, out);
  });
}

bc_status_t bc_batch_tensor_dlpack(bc_batch_t batch, const char* name, DLManagedTensor** out) {
  return Guard("bc_batch_tensor_dlpack", [&]() -> Status {
    if (out != nullptr) *out = nullptr;
    return ExportNamed(batch, name, out);
  });
}

bc_status_t bc_batch_num_tensors(bc_batch_t batch, int* out) {
  return Guard("bc_batch_num_tensors", [&]() -> Status {
    if (batch == nullptr || out == nullptr)
      return Status(StatusCode::kInvalidArgument, "bc_batch_num_tensors: batch or out is NULL");
    BC_ASSIGN_OR_RETURN(const auto b, LookUpBatch(batch, "bc_batch_num_tensors"));
    *out = b->batch.num_tensors();
    return Status::Ok();
  });
}

bc_status_t bc_batch_tensor_name(bc_batch_t batch, int i, const char** out) {
  return Guard("bc_batch_tensor_name", [&]() -> Status {
    if (batch == nullptr || out == nullptr)
      return Status(StatusCode::kInvalidArgument, "bc_batch_tensor_name: batch or out is NULL");
    BC_ASSIGN_OR_RETURN(const auto b, LookUpBatch(batch, "bc_batch_tensor_name"));
    *out = b->batch.tensor_name(i);
    if (*out == nullptr)
      return Status(StatusCode::kOutOfRange,
                    "bc_batch_tensor_name: index " + std::to_string(i) + " is not below " +
                        std::to_string(b->batch.num_tensors()) + " (bc_batch_num_tensors)");
    return Status::Ok();
  });
}

bc_status_t bc_batch_offsets_dlpack(bc_batch_t batch, const char* name, DLManagedTensor** out) {
  return Guard("bc_batch_offsets_dlpack", [&]() -> Status {
    if (out != nullptr) *out = nullptr;
    return ExportNamed(batch, name, out, /*offsets=*/true);
  });
}

bc_status_t bc_batch_ragged(bc_batch_t batch, const char* name, bc_ragged_t* out) {
  return Guard("bc_batch_ragged", [&]() -> Status {
    if (batch == nullptr || out == nullptr)
      return Status(StatusCode::kInvalidArgument, "bc_batch_ragged: batch or out is NULL");
    BC_RETURN_IF_ERROR(batchcast::capi::CheckStructSize("bc_ragged_t", out));
    BC_ASSIGN_OR_RETURN(const auto b, LookUpBatch(batch, "bc_batch_ragged"));
    BC_ASSIGN_OR_RETURN(const batchcast::TensorView off,
                        NamedView(b->batch, name, /*offsets=*/true, "bc_batch_ragged"));
    bc_ragged_t full;
    bc_ragged_init(&full);
    FillTensor(b->batch.tensor(name), &full.values);
    full.offsets = static_cast<const int64_t*>(off.data);
    full.size = off.shape[0] - 1;
    StructOut(full, out);
    return Status::Ok();
  });
}

bc_status_t bc_batch_to_dlpack_versioned(bc_batch_t batch, bc_tensor_kind_t which,
                                         DLManagedTensorVersioned** out) {
  return Guard("bc_batch_to_dlpack_versioned", [&]() -> Status {
    if (out == nullptr) return Status(StatusCode::kInvalidArgument, "dlpack: out is NULL");
    *out = nullptr;
#if defined(DLPACK_MAJOR_VERSION) && DLPACK_MAJOR_VERSION >= 1
    BC_ASSIGN_OR_RETURN(const char* name, KindName(which));
    auto ctx = std::make_unique<ExportContext>();
    auto m = std::make_unique<DLManagedTensorVersioned>();
    BC_RETURN_IF_ERROR(DescribeTensor(batch, name, ctx.get(), &m->dl_tensor));
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
