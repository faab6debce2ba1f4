// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The C API's handles (bc_consumer_t, bc_batch_t, bc_leader_t) live in tables. A handle's
// value is not an address but a word naming its kind, a table index and the generation of
// that entry, so a handle used after its bc_*_release / _detach / _destroy, a handle of
// another kind, or garbage is an error naming the handle (BC_ERR_INVALID_ARGUMENT), never
// a read of freed memory (as CUDA and NCCL do for destroyed handles). A lookup hands out
// a reference: an object released by one thread while another uses it lives until that
// call returns.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "batchcast/batch.h"
#include "batchcast/batchcast_c.h"
#include "batchcast/consumer.h"
#include "batchcast/status.h"

struct bc_consumer_s {
  std::unique_ptr<batchcast::Consumer> consumer;
};

struct bc_batch_s {
  batchcast::Batch batch;
};

struct bc_leader_s;  // c_api.cc

namespace batchcast::capi {

// A handle's word: bits 56-63 its kind, 24-55 the generation of its entry, 0-23 the entry's
// index + 1. The tag makes a handle of one kind passed as another recognisable.
enum class HandleKind : uint8_t { kConsumer = 0xC5, kBatch = 0xBA, kLeader = 0x1E };

// The type name ("bc_batch_t") and how a handle of this kind ends ("released with
// bc_batch_release").
const char* HandleTypeName(HandleKind kind);
const char* HandleEndName(HandleKind kind);

// The table of one kind (thread-safe).
class HandleTableBase {
 public:
  explicit HandleTableBase(HandleKind kind) : kind_(kind) {}

 protected:
  // The entry's index of a live handle `h`, or an error naming it (`function` first).
  Result<uint32_t> IndexOf(uint64_t h, const char* function) const;
  // A free index (a new entry or a reused one, whose generation moves on).
  Result<uint32_t> Allocate(const char* function);
  uint64_t WordOf(uint32_t index) const;
  void Free(uint32_t index);

  const HandleKind kind_;
  mutable std::mutex mu_;
  std::vector<uint32_t> generation_;  // per entry; odd: in use
  std::deque<uint32_t> free_;         // FIFO: a freed entry is reused as late as possible
};

template <typename T>
class HandleTable : public HandleTableBase {
 public:
  using HandleTableBase::HandleTableBase;

  // A new handle for `object`.
  Result<uint64_t> Insert(std::shared_ptr<T> object, const char* function) {
    std::lock_guard<std::mutex> lock(mu_);
    auto index = Allocate(function);
    if (!index.ok()) return index.status();
    if (*index >= objects_.size()) objects_.resize(*index + 1);
    objects_[*index] = std::move(object);
    return WordOf(*index);
  }
  // The object of live handle `h`, or an error naming it.
  Result<std::shared_ptr<T>> Get(uint64_t h, const char* function) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto index = IndexOf(h, function);
    if (!index.ok()) return index.status();
    return objects_[*index];
  }
  // Ends handle `h` (any later use is an error) and returns its object.
  Result<std::shared_ptr<T>> Remove(uint64_t h, const char* function) {
    std::lock_guard<std::mutex> lock(mu_);
    auto index = IndexOf(h, function);
    if (!index.ok()) return index.status();
    std::shared_ptr<T> object = std::move(objects_[*index]);
    Free(*index);
    return object;
  }

 private:
  std::vector<std::shared_ptr<T>> objects_;
};

// The process's tables. Never destroyed: a consumer or leader still live at exit is left as
// the process ends (destroying a running leader's thread object would abort it).
HandleTable<bc_consumer_s>& Consumers();
HandleTable<bc_batch_s>& Batches();
HandleTable<bc_leader_s>& Leaders();

template <typename H>
uint64_t WordOfHandle(H handle) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle));
}
template <typename H>
H HandleOfWord(uint64_t word) {
  return reinterpret_cast<H>(static_cast<uintptr_t>(word));
}
static_assert(sizeof(void*) == 8, "the C API's handle words need 64-bit pointers");

// The batch of handle `batch` (dlpack.cc and c_api.cc).
inline Result<std::shared_ptr<bc_batch_s>> LookUpBatch(bc_batch_t batch, const char* function) {
  return Batches().Get(WordOfHandle(batch), function);
}

// A C++ tensor view as a bc_tensor_t (c_api.cc; dtype: the batchcast::DType code).
void FillTensor(const TensorView& v, bc_tensor_t* t);

}  // namespace batchcast::capi
