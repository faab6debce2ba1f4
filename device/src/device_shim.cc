// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// A C ABI over the public GpuConsumer API (batchcast/gpu.h) for the device proof's Python
// trainer (device/python/device_trainer.py), which loads it with ctypes and wraps the
// device views as torch tensors through __cuda_array_interface__: no extension to compile
// against the GPU machine's Python and torch. Not a product API: the batchcast Python
// package has no device batches yet (docs/gpu.md, "What remains").
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "batchcast/consumer.h"
#include "batchcast/gpu.h"

#define BCD_API extern "C" __attribute__((visibility("default")))

namespace {

struct Trainer {
  std::unique_ptr<batchcast::Consumer> consumer;
  std::unique_ptr<batchcast::GpuConsumer> gpu;
  batchcast::DeviceBatch batch;
};

void SetError(char* err, int len, const std::string& what) {
  if (err != nullptr && len > 0) std::snprintf(err, size_t(len), "%s", what.c_str());
}

}  // namespace

struct bcd_view {
  void* data;
  int32_t dtype;  // batchcast::DType
  int32_t ndim;
  int64_t shape[4];
  uint64_t nbytes;
  int32_t device;
};

struct bcd_batch {
  bcd_view images;
  bcd_view labels;
  const void* host_images;  // the same batch in the host ring (for the checks)
  const int64_t* ids;
  int64_t size;
  uint64_t epoch;
  uint64_t index;
};

static bcd_view View(const batchcast::DeviceTensorView& v) {
  bcd_view o{};
  o.data = v.data;
  o.dtype = int32_t(v.dtype);
  o.ndim = v.ndim;
  for (int i = 0; i < 4; ++i) o.shape[i] = v.shape[i];
  o.nbytes = v.nbytes;
  o.device = v.device;
  return o;
}

// Attaches a consumer to the leader at `address` and maps its device slots on `device`
// (checked once: docs/gpu.md "The safe device path"). Null and `err` on failure.
BCD_API void* bcd_attach(const char* address, int rank, int batch_size, int epochs, int device,
                         char* err, int errlen) {
  batchcast::Options o;
  o.batch_size = batch_size;
  o.epochs = epochs;
  auto c = batchcast::Consumer::Attach(address, o, rank);
  if (!c.ok()) {
    SetError(err, errlen, "attach: " + c.status().ToString());
    return nullptr;
  }
  auto g = batchcast::GpuConsumer::Attach(**c, address, device);
  if (!g.ok()) {
    SetError(err, errlen, "gpu attach: " + g.status().ToString());
    return nullptr;
  }
  auto* t = new Trainer;
  t->consumer = std::move(c).value();
  t->gpu = std::move(g).value();
  return t;
}

// The next batch as device views usable on `stream` (a cudaStream_t; torch's current
// stream). 1: a batch; 0: end of stream; -1: error in `err`. The batch stays valid until
// bcd_release or the next bcd_next.
BCD_API int bcd_next(void* handle, void* stream, bcd_batch* out, char* err, int errlen) {
  auto* t = static_cast<Trainer*>(handle);
  batchcast::Status st = t->gpu->Next(stream, &t->batch);
  if (st.code() == batchcast::StatusCode::kEndOfStream) return 0;
  if (!st.ok()) {
    SetError(err, errlen, st.ToString());
    return -1;
  }
  out->images = View(t->batch.images());
  out->labels = View(t->batch.labels());
  out->host_images = t->batch.host().images().data;
  out->ids = t->batch.host().sample_ids();
  out->size = t->batch.size();
  out->epoch = t->batch.info().epoch;
  out->index = t->batch.info().index;
  return 1;
}

// Orders the slot's reuse after the work queued so far on the batch's stream.
BCD_API void bcd_release(void* handle) { static_cast<Trainer*>(handle)->batch.Release(); }

BCD_API void bcd_stats(void* handle, int64_t* batches, int64_t* handles_opened, int* lane) {
  batchcast::GpuConsumerStats s = static_cast<Trainer*>(handle)->gpu->stats();
  *batches = s.batches;
  *handles_opened = int64_t(s.handles_opened);
  *lane = s.lane;
}

BCD_API void bcd_detach(void* handle) {
  auto* t = static_cast<Trainer*>(handle);
  t->batch.Release();
  t->gpu.reset();
  t->consumer.reset();
  delete t;
}
