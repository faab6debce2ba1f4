// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Batch: the views of one consumer batch and the reference (internal::BatchRef) that keeps
// its slot, or its copied samples, alive until it is released.
#include <string_view>

#include "batchcast/batch.h"
#include "node/consumer_core.h"

namespace batchcast {

Batch::Batch() = default;
Batch::~Batch() { Release(); }
Batch::Batch(Batch&& o) noexcept
    : ref_(std::move(o.ref_)), images_(o.images_), labels_(o.labels_), ids_(o.ids_), info_(o.info_) {}
Batch& Batch::operator=(Batch&& o) noexcept {
  if (this != &o) {
    Release();
    ref_ = std::move(o.ref_);
    images_ = o.images_;
    labels_ = o.labels_;
    ids_ = o.ids_;
    info_ = o.info_;
  }
  return *this;
}
void Batch::Release() {
  ref_.reset();
  images_ = TensorView();
  labels_ = TensorView();
  ids_ = nullptr;
}
std::shared_ptr<void> Batch::KeepAlive() const { return ref_; }

int Batch::num_tensors() const { return ref_ ? static_cast<int>(ref_->num_tensors) : 0; }

const char* Batch::tensor_name(int i) const {
  if (!ref_ || i < 0 || uint32_t(i) >= ref_->num_tensors) return nullptr;
  return ref_->names[i];
}

TensorView Batch::tensor(const char* name) const {
  if (!ref_ || name == nullptr) return TensorView();
  const std::string_view n(name);
  // No images (a model stage's keep_input=false, a Producer's dict batches without them): no
  // such tensor, as for any other name the batch lacks.
  if (n == "images") return images_.nbytes > 0 || ref_->num_tensors == 0 ? images_ : TensorView();
  if (n == "labels") return labels_;
  if (n == "sample_ids") {
    TensorView v;
    v.data = const_cast<int64_t*>(ids_);
    v.dtype = DType::kInt64;
    v.ndim = 1;
    v.shape[0] = info_.size;
    v.nbytes = size_t(info_.size) * sizeof(int64_t);
    return v;
  }
  for (uint32_t i = 0; i < ref_->num_tensors; ++i)
    if (n == ref_->names[i]) return ref_->tensors[i];
  return TensorView();
}

TensorView Batch::offsets(const char* name) const {
  if (!ref_ || name == nullptr) return TensorView();
  const std::string_view n(name);
  for (uint32_t i = 0; i < ref_->num_tensors; ++i)
    if (n == ref_->names[i]) return ref_->offsets[i];
  return TensorView();
}

}  // namespace batchcast
