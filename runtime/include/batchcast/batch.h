// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// One consumer batch: a view of samples where the leader wrote them in shared memory.
// No sample byte is copied for a consumer. Destroying (or Release()-ing) the Batch gives
// the slot back; a KeepAlive() handle (e.g. held by a torch::Tensor deleter) keeps it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "batchcast/export.h"

namespace batchcast {

// Element types of batch tensors. Images are uint8 or float32, labels and ids int64; further
// named tensors (Batch::tensor) may have any of these.
enum class DType : uint32_t {
  kUint8 = 0,
  kFloat32 = 1,
  kInt64 = 2,
  kFloat16 = 3,
  kInt32 = 4,
  kFloat64 = 5,
  kBool = 6,
  kInt8 = 7,
  kInt16 = 8,
  kBFloat16 = 9,
};

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kUint8;
  int ndim = 0;
  int64_t shape[4] = {0, 0, 0, 0};
  size_t nbytes = 0;
};

struct BatchInfo {
  uint64_t epoch = 0;
  uint64_t index = 0;              // this consumer's batch index within the epoch
  uint64_t producer_seq = 0;       // position of the producer batch in the stream
  uint64_t producer_batch = 0;     // producer batch index within the epoch
  int64_t size = 0;                // samples in this batch
  int32_t repeats = 0;             // samples in this batch that are fill repeats
  float lr_factor = 1.0f;          // progressive resizing: scale your learning rate by this
  int32_t image_size = 0;
  bool last_in_epoch = false;      // the epoch's last batch for this consumer
  bool channels_last = false;      // images are N x H x W x C instead of N x C x H x W
  int64_t wait_ns = 0;             // time this consumer blocked waiting for the batch
  int64_t handoff_ns = 0;          // publish -> acquire latency (0 if it was already there)
};

namespace internal {
struct BatchRef;
}

class BATCHCAST_API Batch {
 public:
  Batch();
  ~Batch();
  Batch(Batch&& other) noexcept;
  Batch& operator=(Batch&& other) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  bool valid() const { return ref_ != nullptr; }
  // images: [size, C, H, W] (or [size, H, W, C]); labels: int64 [size].
  const TensorView& images() const { return images_; }
  const TensorView& labels() const { return labels_; }
  // Dataset index of every sample, [size].
  const int64_t* sample_ids() const { return ids_; }
  const BatchInfo& info() const { return info_; }
  int64_t size() const { return info_.size; }

  // Named tensors (docs/data-plane.md "Named tensors"): a producer may publish further
  // tensors beside images and labels (a Python Producer's dict batches, a leader model
  // stage's output). tensor(name) views [size, per-sample shape...] (C-contiguous, in place
  // like images); "images", "labels" and "sample_ids" name the batch's own three. A name the
  // batch does not have gives an empty view (data == nullptr, ndim == 0). Valid as long as
  // the batch is (or a KeepAlive() handle).
  //
  // Variable-length tensors (docs/data-plane.md "Variable-length tensors"; e.g. token
  // sequences of different lengths): tensor(name) views the values of every sample, one
  // after another, [rows, per-row shape...] (in place like images, read-only), and
  // offsets(name) their int64 row offsets [size + 1], from 0: sample i is rows
  // offsets[i] .. offsets[i + 1] - 1. A tensor with a fixed per-sample shape has no offsets
  // (an empty view).
  TensorView tensor(const char* name) const;
  TensorView offsets(const char* name) const;
  // The further named tensors (images, labels and sample_ids not counted), by index.
  int num_tensors() const;
  const char* tensor_name(int i) const;  // nullptr when i is out of range

  // Gives the slot back now (also done by the destructor). Views become invalid: afterwards
  // the batch is !valid() and views nothing (null data, empty tensors, a null KeepAlive());
  // Release() again does nothing. Pointers taken from its views before must not be used.
  void Release();
  // Keeps the slot alive independently of this Batch (for zero-copy tensor views).
  std::shared_ptr<void> KeepAlive() const;

 private:
  friend class Consumer;
  std::shared_ptr<internal::BatchRef> ref_;
  TensorView images_;
  TensorView labels_;
  const int64_t* ids_ = nullptr;
  BatchInfo info_;
};

}  // namespace batchcast
