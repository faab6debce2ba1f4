// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Zero-copy torch::Tensor views of a Batch, and CUDA tensors of a DeviceBatch (target
// Batchcast::torch).
//
//   for (batchcast::Batch& batch : consumer) {
//     batchcast::TorchBatch t = batchcast::ToTorch(batch).value();
//     torch::Tensor x = t.images.to(torch::kFloat32);     // uint8: a new tensor; float32: the view
//     if (t.images.scalar_type() == torch::kUInt8) x = x / 255.0;   // out of place, never div_()
//     torch::Tensor y = t.labels;                          // int64 [N]
//   }
//
// The tensors point into the leader's shared-memory slot: no sample byte is copied. Each
// tensor's deleter holds Batch::KeepAlive(), so the slot stays valid while any tensor (or
// view of one) lives, and is given back when the last one dies, even after the Batch is
// gone. Tensors that are still alive count against the consumer's buffer_depth.
//
// The views are shared with every other consumer of the node: treat them as read-only.
// An in-place op (t.images.div_(255)) would change the batch every trainer sees (the
// consumer's read-only mapping stops it with a message instead); use out-of-place ops
// (x / 255, clone()). Careful with to() and float(): they return the view itself when the
// dtype is already the one asked for (a leader that normalizes publishes float32), so an
// in-place op after them writes into the shared batch too.
//
// Build: target_link_libraries(trainer PRIVATE Batchcast::torch) after find_package(Torch)
// and find_package(Batchcast CONFIG) (docs/api.md, "A LibTorch trainer").
//
// Header-only on purpose: it is a few inline functions over the public Batch API, so it
// is compiled by the trainer against the trainer's own LibTorch (Debian's, a pip wheel's,
// a CUDA build), and libbatchcast never depends on one LibTorch ABI.
#pragma once

#include <ATen/Context.h>
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "batchcast/batch.h"
#include "batchcast/gpu.h"
#include "batchcast/status.h"

namespace batchcast {

// A batch as tensors. images and labels alias the slot; info is a copy of the metadata.
struct TorchBatch {
  torch::Tensor images;      // uint8 or float32; [N,C,H,W], or [N,H,W,C] if info.channels_last
  torch::Tensor labels;      // int64 [N]
  torch::Tensor sample_ids;  // int64 [N]: dataset index of every sample
  // The further named tensors (Batch::tensor), by name; [N, per-sample shape...]; a
  // variable-length one's values [rows, per-row shape...], with its int64 row offsets [N + 1]
  // (Batch::offsets) in `offsets` under the same name.
  std::map<std::string, torch::Tensor> tensors;
  std::map<std::string, torch::Tensor> offsets;
  BatchInfo info;
};

namespace internal {

inline Result<torch::ScalarType> TorchScalarType(DType dtype) {
  switch (dtype) {
    case DType::kUint8: return torch::kUInt8;
    case DType::kFloat32: return torch::kFloat32;
    case DType::kInt64: return torch::kInt64;
    case DType::kFloat16: return torch::kFloat16;
    case DType::kInt32: return torch::kInt32;
    case DType::kFloat64: return torch::kFloat64;
    case DType::kBool: return torch::kBool;
    case DType::kInt8: return torch::kInt8;
    case DType::kInt16: return torch::kInt16;
    case DType::kBFloat16: return torch::kBFloat16;
  }
  return Status(StatusCode::kInvalidArgument,
                "torch: tensor view has unknown dtype " +
                    std::to_string(static_cast<uint32_t>(dtype)) +
                    "; the leader and this trainer were built from different Batchcast versions");
}

// A tensor over `data` whose storage keeps `keep_alive` until the storage dies.
inline torch::Tensor AliasTensor(void* data, std::vector<int64_t> sizes, torch::ScalarType type,
                                 std::shared_ptr<void> keep_alive,
                                 torch::Device device = torch::kCPU) {
  return torch::from_blob(
      data, sizes, [keep = std::move(keep_alive)](void*) mutable { keep.reset(); },
      torch::TensorOptions().dtype(type).device(device));
}

// Shape and size check shared by the host and device views.
inline Result<std::vector<int64_t>> CheckedSizes(const void* data, int ndim, const int64_t* shape,
                                                 size_t nbytes, torch::ScalarType type) {
  if (data == nullptr || ndim < 1 || ndim > 4)
    return Status(StatusCode::kInvalidArgument,
                  "torch: tensor view has ndim " + std::to_string(ndim) +
                      " or no data; expected a view of this batch with 1 to 4 dimensions");
  std::vector<int64_t> sizes(shape, shape + ndim);
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  if (static_cast<size_t>(numel) * torch::elementSize(type) != nbytes)
    return Status(StatusCode::kInvalidArgument,
                  "torch: tensor view of " + std::to_string(nbytes) +
                      " bytes does not match its shape; the batch descriptor is corrupt");
  return sizes;
}

}  // namespace internal

// A zero-copy tensor over one view of `batch` (images() or labels()).
inline Result<torch::Tensor> ToTensor(const Batch& batch, const TensorView& view) {
  if (!batch.valid())
    return Status(StatusCode::kFailedPrecondition,
                  "torch: the batch is empty or released; call Consumer::Next() first and "
                  "convert before Release()");
  if (view.data == nullptr || view.ndim < 1 || view.ndim > 4)
    return Status(StatusCode::kInvalidArgument,
                  "torch: tensor view has ndim " + std::to_string(view.ndim) +
                      " or no data; expected a view of this batch with 1 to 4 dimensions");
  BC_ASSIGN_OR_RETURN(torch::ScalarType type, internal::TorchScalarType(view.dtype));
  BC_ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
                      internal::CheckedSizes(view.data, view.ndim, view.shape, view.nbytes, type));
  return internal::AliasTensor(view.data, std::move(sizes), type, batch.KeepAlive());
}

// The named tensor `name` of `batch` (Batch::tensor) as a zero-copy tensor; kNotFound, naming
// the tensors the batch has, when it has none of that name.
inline Result<torch::Tensor> ToTensor(const Batch& batch, const char* name) {
  const TensorView view = batch.tensor(name);
  if (batch.valid() && view.data == nullptr && view.nbytes == 0) {
    std::string have = batch.images().nbytes > 0 ? "images, labels, sample_ids"
                                                 : "labels, sample_ids";
    for (int i = 0; i < batch.num_tensors(); ++i) have += std::string(", ") + batch.tensor_name(i);
    if (name != nullptr && std::string(name) == "images")
      return Status(StatusCode::kNotFound,
                    "torch: the batch has no images: its producer does not publish them (a "
                    "leader model stage with keep_input=false in option 'stage' reads them and "
                    "publishes only its output; or a Producer's dict batches without images); "
                    "it has " + have);
    return Status(StatusCode::kNotFound, std::string("torch: the batch has no tensor '") +
                                             (name ? name : "") + "'; it has " + have);
  }
  return ToTensor(batch, view);
}

// images, labels, sample ids and the named tensors of `batch` as zero-copy tensors. A batch
// without images (a producer that publishes named tensors only) leaves `images` undefined.
inline Result<TorchBatch> ToTorch(const Batch& batch) {
  TorchBatch out;
  if (batch.images().nbytes > 0 || batch.num_tensors() == 0) {
    BC_ASSIGN_OR_RETURN(out.images, ToTensor(batch, batch.images()));
  }
  BC_ASSIGN_OR_RETURN(out.labels, ToTensor(batch, batch.labels()));
  out.sample_ids = internal::AliasTensor(const_cast<int64_t*>(batch.sample_ids()), {batch.size()},
                                         torch::kInt64, batch.KeepAlive());
  for (int i = 0; i < batch.num_tensors(); ++i) {
    const char* name = batch.tensor_name(i);
    BC_ASSIGN_OR_RETURN(out.tensors[name], ToTensor(batch, batch.tensor(name)));
    const TensorView offsets = batch.offsets(name);
    if (offsets.data != nullptr) {
      BC_ASSIGN_OR_RETURN(out.offsets[name], ToTensor(batch, offsets));
    }
  }
  out.info = batch.info();
  return out;
}

// --- device tensors (the GPU data plane, batchcast/gpu.h) -------------------------------
//
//   batchcast::DeviceBatch batch;
//   while (gpu->Next(stream, &batch).ok()) {
//     auto t = batchcast::ToTorch(batch).value();   // CUDA tensors on the batch's device
//     ...                                            // use them on `stream` (or sync first)
//   }
//
// The tensors alias the device slot (the leader's allocation, mapped by CUDA IPC) and hold
// DeviceBatch::KeepAlive(): the slot's release is recorded on the batch's stream when the
// last tensor dies. Needs a LibTorch built with CUDA (Debian's libtorch is CPU-only; a pip
// torch's is not): with a CPU-only LibTorch the calls return kUnavailable, never crash.

struct TorchDeviceBatch {
  torch::Tensor images;  // on cuda:<device>; float32 N,C,H,W with gpu_finish
  torch::Tensor labels;  // int64 [N] on the same device
  BatchInfo info;
};

// A zero-copy CUDA tensor over one device view of `batch`.
inline Result<torch::Tensor> ToTensor(const DeviceBatch& batch, const DeviceTensorView& view) {
  if (!at::hasCUDA())
    return Status(StatusCode::kUnavailable,
                  "torch: this LibTorch has no CUDA (a CPU-only build such as Debian's "
                  "libtorch, or no visible device), so device batches cannot become tensors; "
                  "build the trainer against a CUDA LibTorch (python3 -c 'import torch; "
                  "print(torch.utils.cmake_prefix_path)') or use ToTorch(batch.host())");
  if (!batch.valid())
    return Status(StatusCode::kFailedPrecondition,
                  "torch: the device batch is empty or released; call GpuConsumer::Next() "
                  "first and convert before Release()");
  if (view.device < 0)
    return Status(StatusCode::kInvalidArgument, "torch: device view has no device ordinal");
  BC_ASSIGN_OR_RETURN(torch::ScalarType type, internal::TorchScalarType(view.dtype));
  BC_ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
                      internal::CheckedSizes(view.data, view.ndim, view.shape, view.nbytes, type));
  return internal::AliasTensor(view.data, std::move(sizes), type, batch.KeepAlive(),
                               torch::Device(torch::kCUDA, static_cast<int16_t>(view.device)));
}

// images and labels of a device batch as zero-copy CUDA tensors.
inline Result<TorchDeviceBatch> ToTorch(const DeviceBatch& batch) {
  TorchDeviceBatch out;
  BC_ASSIGN_OR_RETURN(out.images, ToTensor(batch, batch.images()));
  BC_ASSIGN_OR_RETURN(out.labels, ToTensor(batch, batch.labels()));
  out.info = batch.info();
  return out;
}

// images as [N,C,H,W] whatever the leader's layout: a permuted (strided) view of an NHWC
// batch, still zero-copy. Call .contiguous() (a copy) if a kernel needs dense NCHW.
inline torch::Tensor AsNCHW(const TorchBatch& batch) {
  if (batch.info.channels_last && batch.images.dim() == 4) return batch.images.permute({0, 3, 1, 2});
  return batch.images;
}

}  // namespace batchcast
