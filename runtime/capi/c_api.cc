// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The C API (batchcast/batchcast_c.h) over the C++ consumer (this file) and a
// producer::Producer (the C API's leader, c_leader.cc). Every entry
// point runs its body inside Guard(): a Status becomes a bc_status_t plus the thread's last
// error, and an exception (std::bad_alloc, a bug) becomes BC_ERR_INTERNAL: none crosses the
// C boundary.
#include <cstring>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "batchcast/batchcast_c.h"
#include "batchcast/consumer.h"
#include "batchcast/options.h"
#include "batchcast/status.h"
#include "capi/guard.h"
#include "capi/handles.h"
#include "capi/struct_io.h"
#include "core/errors.h"
#include "core/option_scope.h"
#include "node/front_door.h"
#include "node/task_telemetry.h"

namespace batchcast::capi {

void FillTensor(const TensorView& v, bc_tensor_t* t) {
  t->data = v.data;
  t->dtype = static_cast<int32_t>(v.dtype);
  t->ndim = v.ndim;
  for (int i = 0; i < 4; ++i) t->shape[i] = v.shape[i];
  t->nbytes = v.nbytes;
}

namespace {

Result<Options> ConsumerOptions(const bc_consumer_config_t& c) {
  BC_ASSIGN_OR_RETURN(Options o, ResolveOptions(SplitWords(c.options)));
  if (c.batch_size < 0 || c.buffer_depth < 0 || c.epochs < 0 || c.world_size < 0 ||
      c.timeout_ms < 0 || c.start_epoch < 0 || c.start_batch < 0) {
    return InvalidArgumentError(
        "bc_consumer_attach: batch_size, buffer_depth, epochs, world_size, timeout_ms, "
        "start_epoch and start_batch must be >= 0 (0 keeps the option's value)");
  }
  if (c.rank < -1) return InvalidArgumentError("bc_consumer_attach: rank {} < -1", c.rank);
  if (c.start_run_epoch < -1)
    return InvalidArgumentError("bc_consumer_attach: start_run_epoch {} < -1 (-1: the options')",
                                c.start_run_epoch);
  if (c.batch_size > 0) o.batch_size = c.batch_size;
  if (c.buffer_depth > 0) o.buffer_depth = c.buffer_depth;
  if (c.epochs > 0) o.epochs = c.epochs;
  if (c.rank >= 0 && o.mode == "shard") o.rank = c.rank;  // else a label only
  if (c.world_size > 0) o.world_size = c.world_size;
  if (c.timeout_ms > 0) o.connect_timeout = c.timeout_ms;
  if (c.drop_last != 0) o.drop_last = true;
  if (c.pad_last != 0) o.pad_last = true;
  if (c.start_epoch > 0) o.start_epoch = c.start_epoch;
  if (c.start_batch > 0) o.start_batch = c.start_batch;
  if (c.start_run_epoch >= 0) o.start_run_epoch = c.start_run_epoch;
  if (c.view != nullptr) o.view = c.view;
  BC_RETURN_IF_ERROR(ValidateOptions(o).WithContext("bc_consumer_attach"));
  return o;
}

bc_batch_info_t InfoOf(const Batch& b) {
  bc_batch_info_t i;
  bc_batch_info_init(&i);
  FillTensor(b.images(), &i.images);
  FillTensor(b.labels(), &i.labels);
  const BatchInfo& in = b.info();
  i.sample_ids = b.sample_ids();
  i.size = in.size;
  i.epoch = in.epoch;
  i.index = in.index;
  i.producer_seq = in.producer_seq;
  i.lr_factor = in.lr_factor;
  i.layout = in.channels_last ? BC_LAYOUT_NHWC : BC_LAYOUT_NCHW;
  i.repeats = in.repeats;
  i.image_size = in.image_size;
  i.last_in_epoch = in.last_in_epoch ? 1 : 0;
  return i;
}

}  // namespace
}  // namespace batchcast::capi

using namespace batchcast;        // NOLINT(google-build-using-namespace): this file is the C API
using namespace batchcast::capi;  // NOLINT(google-build-using-namespace)

extern "C" {

const char* bc_status_string(bc_status_t status) {
  switch (status) {
    case BC_SUCCESS: return "success";
    case BC_END_OF_STREAM: return "end of stream";
    case BC_ERR_UNSUPPORTED: return "unsupported";
    default: break;
  }
  if (status > BC_SUCCESS && status <= BC_ERR_INTERNAL) {
    return StatusCodeName(static_cast<StatusCode>(status));
  }
  return "unknown status";
}

const char* bc_last_error(void) { return LastError(); }

int bc_get_version(const char** text) {
  if (text != nullptr) *text = Version();
  return VersionCode();
}

bc_status_t bc_consumer_attach(const bc_consumer_config_t* config, bc_consumer_t* out) {
  return Guard("bc_consumer_attach", [&]() -> Status {
    if (out == nullptr) return InvalidArgumentError("bc_consumer_attach: out is NULL");
    *out = nullptr;
    bc_consumer_config_t c;
    bc_consumer_config_init(&c);
    BC_RETURN_IF_ERROR(StructIn("bc_consumer_config_t", config, &c));
    BC_ASSIGN_OR_RETURN(Options o, ConsumerOptions(c));
    std::unique_ptr<Consumer> consumer;
    if (c.address == nullptr) {
      BC_ASSIGN_OR_RETURN(consumer, AttachFromEnvironment(o));  // its own telemetry
    } else {
      // The `telemetry` option: checked before attaching, written at bc_consumer_detach
      // (which returns a failure to write).
      BC_ASSIGN_OR_RETURN(auto telemetry,
                          producer::ProcessTelemetry::Start(o, telemetry::ProcessKind::kConsumer,
                                                          c.rank, -1, telemetry::Role::kConsumer,
                                                          ""));
      BC_ASSIGN_OR_RETURN(consumer, Consumer::Attach(c.address, o, c.rank));
      node::OwnTelemetry(*consumer, std::move(telemetry));
    }
    auto handle = std::make_shared<bc_consumer_s>();
    handle->consumer = std::move(consumer);
    BC_ASSIGN_OR_RETURN(const uint64_t word,
                        Consumers().Insert(std::move(handle), "bc_consumer_attach"));
    *out = HandleOfWord<bc_consumer_t>(word);
    return Status::Ok();
  });
}

bc_status_t bc_consumer_next(bc_consumer_t consumer, bc_batch_t* batch, bc_batch_info_t* info) {
  return Guard("bc_consumer_next", [&]() -> Status {
    if (consumer == nullptr || batch == nullptr) {
      return InvalidArgumentError("bc_consumer_next: consumer or batch is NULL");
    }
    *batch = nullptr;
    if (info != nullptr) BC_RETURN_IF_ERROR(CheckStructSize("bc_batch_info_t", info));
    BC_ASSIGN_OR_RETURN(auto c, Consumers().Get(WordOfHandle(consumer), "bc_consumer_next"));
    auto b = std::make_shared<bc_batch_s>();
    BC_RETURN_IF_ERROR(c->consumer->Next(&b->batch));
    if (info != nullptr) {
      bc_batch_info_t full = InfoOf(b->batch);
      StructOut(full, info);
    }
    BC_ASSIGN_OR_RETURN(const uint64_t word, Batches().Insert(std::move(b), "bc_consumer_next"));
    *batch = HandleOfWord<bc_batch_t>(word);
    return Status::Ok();
  });
}

bc_status_t bc_batch_info(bc_batch_t batch, bc_batch_info_t* info) {
  return Guard("bc_batch_info", [&]() -> Status {
    if (batch == nullptr || info == nullptr)
      return InvalidArgumentError("bc_batch_info: batch or info is NULL");
    BC_RETURN_IF_ERROR(CheckStructSize("bc_batch_info_t", info));
    BC_ASSIGN_OR_RETURN(auto b, LookUpBatch(batch, "bc_batch_info"));
    bc_batch_info_t full = InfoOf(b->batch);
    StructOut(full, info);
    return Status::Ok();
  });
}

bc_status_t bc_batch_release(bc_batch_t batch) {
  return Guard("bc_batch_release", [&]() -> Status {
    if (batch == nullptr) return Status::Ok();
    BC_ASSIGN_OR_RETURN(auto b, Batches().Remove(WordOfHandle(batch), "bc_batch_release"));
    b->batch.Release();  // gives the slot back (DLPack exports keep it until their deleter)
    return Status::Ok();
  });
}

bc_status_t bc_consumer_position(bc_consumer_t consumer, uint64_t* epoch, uint64_t* batch) {
  return Guard("bc_consumer_position", [&]() -> Status {
    if (consumer == nullptr || epoch == nullptr || batch == nullptr) {
      return InvalidArgumentError("bc_consumer_position: consumer, epoch or batch is NULL");
    }
    BC_ASSIGN_OR_RETURN(auto c, Consumers().Get(WordOfHandle(consumer), "bc_consumer_position"));
    StreamPosition p = c->consumer->Position();
    if (p.run_epoch != static_cast<int64_t>(p.epoch))
      return FailedPreconditionError(
          "bc_consumer_position: this consumer is in its own epoch {} at stream epoch {} batch "
          "{} (a service's resume replay moved it onto later stream epochs), which epoch and "
          "batch alone cannot say: a resume from them would run too few epochs. Save "
          "bc_consumer_get_position() and attach with its start_run_epoch too",
          p.run_epoch, p.epoch, p.batch);
    *epoch = p.epoch;
    *batch = p.batch;
    return Status::Ok();
  });
}

bc_status_t bc_consumer_get_position(bc_consumer_t consumer, bc_position_t* position) {
  return Guard("bc_consumer_get_position", [&]() -> Status {
    if (consumer == nullptr)
      return InvalidArgumentError("bc_consumer_get_position: consumer is NULL");
    BC_RETURN_IF_ERROR(CheckStructSize("bc_position_t", position));
    BC_ASSIGN_OR_RETURN(auto c,
                        Consumers().Get(WordOfHandle(consumer), "bc_consumer_get_position"));
    const StreamPosition p = c->consumer->Position();
    bc_position_t full;
    bc_position_init(&full);
    full.epoch = p.epoch;
    full.batch = p.batch;
    full.run_epoch = p.run_epoch;
    StructOut(full, position);
    return Status::Ok();
  });
}

bc_status_t bc_consumer_batches_per_epoch(bc_consumer_t consumer, uint64_t epoch, int64_t* out) {
  return Guard("bc_consumer_batches_per_epoch", [&]() -> Status {
    if (consumer == nullptr || out == nullptr) {
      return InvalidArgumentError("bc_consumer_batches_per_epoch: consumer or out is NULL");
    }
    BC_ASSIGN_OR_RETURN(auto c,
                        Consumers().Get(WordOfHandle(consumer), "bc_consumer_batches_per_epoch"));
    *out = c->consumer->BatchesPerEpoch(epoch);
    return Status::Ok();
  });
}

bc_status_t bc_consumer_detach(bc_consumer_t consumer) {
  return Guard("bc_consumer_detach", [&]() -> Status {
    if (consumer == nullptr) return InvalidArgumentError("bc_consumer_detach: consumer is NULL");
    BC_ASSIGN_OR_RETURN(auto c, Consumers().Remove(WordOfHandle(consumer), "bc_consumer_detach"));
    // A Next() still running in another thread holds its own reference: it ends ("this
    // consumer was detached") and the consumer is freed after it.
    return c->consumer->Detach();
  });
}

}  // extern "C"
