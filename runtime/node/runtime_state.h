// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The MPI Runtime's state and the steps of Runtime::Create (runtime_start.cc): private to
// runtime/node.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "batchcast/consumer.h"
#include "batchcast/gpu.h"
#include "batchcast/options.h"
#include "batchcast/status.h"
#include "gpu/gpu_runtime.h"
#include "node/multinode.h"
#include "producer/producer.h"
#include "telemetry/collector.h"

namespace batchcast::internal {

struct RuntimeState {
  Options options;
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm trainers = MPI_COMM_NULL;
  MPI_Comm leaders = MPI_COMM_NULL;   // node leaders only (kept for replicate mode)
  int num_nodes = 1;
  node::MultinodeConfig multi;        // across nodes (docs/multinode.md)
  bool use_multi = false;             // this node runs the multi-node leader
  int world_rank = 0, world_size = 0;
  int node_id = 0, local_rank = 0, node_size = 0;
  bool leader = false, trainer = false;
  std::unique_ptr<producer::Producer> producer;  // the node leader (local rank 0)
  bool started = false;               // its Start() was called
  Status leader_status;
  bool served = false;
  std::unique_ptr<Consumer> consumer;
  std::unique_ptr<gpu::GpuRuntime> gpu_plane;       // the GPU data plane (docs/gpu.md)
  std::unique_ptr<GpuConsumer> gpu_consumer;        // trainers on the device path
  std::unique_ptr<telemetry::Collector> collector;  // null when telemetry is off
  telemetry::Sinks sinks;
  bool finalized = false;
  int own_consumers = 0;  // > 0: this trainer attaches that many consumers itself
  std::string address;    // the node leader's
};

// The steps of Runtime::Create, each this rank's part (the caller agrees on the status).
Status SplitNodes(RuntimeState* s);
Status PlanMultinode(RuntimeState* s);  // collective over the world
Status StartTelemetry(RuntimeState* s);
Status StartLeader(RuntimeState* s, std::string* socket_name);
Status ShareAddress(RuntimeState* s, std::string* name);
Status SetupGpu(RuntimeState* s, const std::string& address);
Status AttachGpuConsumer(RuntimeState* s);

}  // namespace batchcast::internal
