// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The C API's leader (bc_leader_*, batchcast_c.h): the native pipeline's Producer on its own
// thread, built by the front door's CreateNodeProducer like every native leader; its handle
// lives in the leader table (handles.h), so that a stale or destroyed handle is an error.
#include <memory>
#include <string>

#include "batchcast/batchcast_c.h"
#include "batchcast/options.h"
#include "capi/guard.h"
#include "capi/handles.h"
#include "capi/struct_io.h"
#include "core/errors.h"
#include "core/option_scope.h"
#include "node/front_door.h"
#include "producer/producer.h"

struct bc_leader_s {
  std::unique_ptr<batchcast::producer::Producer> producer;
};

using namespace batchcast;        // NOLINT: the C entry points' bodies
using namespace batchcast::capi;  // NOLINT

extern "C" {

bc_status_t bc_leader_start(const bc_leader_config_t* config, bc_leader_t* out) {
  return Guard("bc_leader_start", [&]() -> Status {
    if (out == nullptr) return InvalidArgumentError("bc_leader_start: out is NULL");
    *out = nullptr;
    bc_leader_config_t c;
    bc_leader_config_init(&c);
    BC_RETURN_IF_ERROR(StructIn("bc_leader_config_t", config, &c));
    if (c.expected_consumers < 0 || c.max_consumer_batch < 0) {
      return InvalidArgumentError(
          "bc_leader_start: expected_consumers and max_consumer_batch must be >= 0");
    }
    producer::ProducerConfig cfg;
    cfg.front_door = FrontDoor::kCApiLeader;
    BC_ASSIGN_OR_RETURN(cfg.options, ResolveOptions(SplitWords(c.options)));
    cfg.expected_consumers = c.expected_consumers;
    cfg.max_consumer_batch = static_cast<uint32_t>(c.max_consumer_batch);
    cfg.socket_name = c.address != nullptr ? std::string(c.address)
                                           : producer::NewSocketName(FrontDoorOf(*cfg.front_door).key);
    cfg.job = "c-api";
    cfg.join_timeout_ms = c.join_timeout_ms;
    cfg.wait_until_empty = true;  // bc_leader_wait: every epoch produced, every consumer gone
    auto handle = std::make_shared<bc_leader_s>();
    BC_ASSIGN_OR_RETURN(handle->producer, node::CreateNodeProducer(cfg));
    handle->producer->Start();
    BC_ASSIGN_OR_RETURN(const uint64_t word, Leaders().Insert(handle, "bc_leader_start"));
    *out = HandleOfWord<bc_leader_t>(word);
    return Status::Ok();
  });
}

const char* bc_leader_address(bc_leader_t leader) {
  const char* address = "";
  Guard("bc_leader_address", [&]() -> Status {
    if (leader == nullptr) return InvalidArgumentError("bc_leader_address: leader is NULL");
    BC_ASSIGN_OR_RETURN(auto l, Leaders().Get(WordOfHandle(leader), "bc_leader_address"));
    address = l->producer->address().c_str();  // lives as long as the leader
    return Status::Ok();
  });
  return address;
}

bc_status_t bc_leader_wait(bc_leader_t leader, int64_t timeout_ms) {
  return Guard("bc_leader_wait", [&]() -> Status {
    if (leader == nullptr) return InvalidArgumentError("bc_leader_wait: leader is NULL");
    BC_ASSIGN_OR_RETURN(auto l, Leaders().Get(WordOfHandle(leader), "bc_leader_wait"));
    return l->producer->Wait(timeout_ms);
  });
}

bc_status_t bc_leader_destroy(bc_leader_t leader) {
  return Guard("bc_leader_destroy", [&]() -> Status {
    if (leader == nullptr) return InvalidArgumentError("bc_leader_destroy: leader is NULL");
    BC_ASSIGN_OR_RETURN(auto owned, Leaders().Remove(WordOfHandle(leader), "bc_leader_destroy"));
    const bool done = owned->producer->done();
    if (!done) owned->producer->Abort("leader: destroyed by bc_leader_destroy before the end");
    Status s = owned->producer->Wait();
    if (!done && s.code() == StatusCode::kCancelled) return Status::Ok();
    return s;
  });
}

}  // extern "C"
