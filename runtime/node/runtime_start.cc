// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The steps of the MPI Runtime's Create (runtime.cc): nodes, the multi-node plan, telemetry,
// the node leader's Producer, the leader's address, the GPU plane. What is the Runtime's own
// is the MPI agreement around them; the leader is a producer::Producer like every front door's.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "core/environment.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/mpi_status.h"
#include "node/gpu_consumer.h"
#include "node/runtime_state.h"
#include "telemetry/spec.h"

namespace batchcast::internal {
namespace {

std::string JobId(const Options& o) {
  std::string id = o.job_id;
  if (id.empty()) id = env::LauncherJobId();
  if (id.empty()) id = "pid" + std::to_string(getpid());
  for (auto& c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  if (id.size() > 40) id = id.substr(id.size() - 40);
  return id;
}

}  // namespace

Status SplitNodes(RuntimeState* s) {
  MPI_Comm world = s->world;
  if (s->options.ranks_per_node > 0) {
    int color = s->world_rank / s->options.ranks_per_node;
    BC_MPI(MPI_Comm_split(world, color, s->world_rank, &s->node), "MPI_Comm_split (virtual node)");
  } else {
    BC_MPI(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, s->world_rank, MPI_INFO_NULL, &s->node),
           "MPI_Comm_split_type (node)");
  }
  BC_MPI(MPI_Comm_set_errhandler(s->node, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  BC_MPI(MPI_Comm_rank(s->node, &s->local_rank), "MPI_Comm_rank (node)");
  BC_MPI(MPI_Comm_size(s->node, &s->node_size), "MPI_Comm_size (node)");
  // Node ids: leaders number themselves in world order and tell their node.
  MPI_Comm leaders = MPI_COMM_NULL;
  BC_MPI(MPI_Comm_split(world, s->local_rank == 0 ? 0 : MPI_UNDEFINED, s->world_rank, &leaders),
         "MPI_Comm_split (leaders)");
  if (leaders != MPI_COMM_NULL) {
    BC_MPI(MPI_Comm_set_errhandler(leaders, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    BC_MPI(MPI_Comm_rank(leaders, &s->node_id), "MPI_Comm_rank (leaders)");
    BC_MPI(MPI_Comm_size(leaders, &s->num_nodes), "MPI_Comm_size (leaders)");
    s->leaders = leaders;
  }
  int ids[2] = {s->node_id, s->num_nodes};
  BC_MPI(MPI_Bcast(ids, 2, MPI_INT, 0, s->node), "MPI_Bcast (node id)");
  s->node_id = ids[0];
  s->num_nodes = ids[1];
  s->leader = s->local_rank == 0;
  s->trainer = !s->leader || s->options.leader_trains;
  log::SetRank(s->world_rank, s->local_rank);
  return Status::Ok();
}

// Across nodes (docs/multinode.md): whether this node runs the multi-node leader and, in
// shard mode, the job's trainer count and each local trainer's index in the trainers-only
// communicator (which Create splits in world-rank order). Every rank computes the same
// verdict from the same gathered table.
Status PlanMultinode(RuntimeState* s) {
  const bool shard = s->options.mode == "shard";
  int mine[3] = {s->trainer ? 1 : 0, s->trainer ? s->options.batch_size : 0, s->node_id};
  std::vector<int> all(3 * static_cast<size_t>(s->world_size));
  BC_MPI(MPI_Allgather(mine, 3, MPI_INT, all.data(), 3, MPI_INT, s->world),
         "MPI_Allgather (trainer table)");
  node::MultinodeConfig& m = s->multi;
  m.mode = shard ? node::MultinodeMode::kShard : node::MultinodeMode::kReplicate;
  m.node_index = s->node_id;
  m.num_nodes = s->num_nodes;
  int first_b = -1, first_rank = -1;
  for (int r = 0; r < s->world_size; ++r) {
    const int* row = &all[3 * static_cast<size_t>(r)];
    if (row[0] == 0) continue;
    if (row[2] == s->node_id) m.trainer_index[r] = m.total_trainers;
    m.total_trainers += 1;
    if (first_b < 0) first_b = row[1], first_rank = r;
    if (shard && row[1] != first_b)
      return InvalidArgumentError(
          "shard mode needs the same batch_size on every trainer (a global batch is trainers x "
          "batch_size): rank {} has {}, rank {} has {}; set one batch_size for the whole job",
          first_rank, first_b, r, row[1]);
  }
  s->use_multi = shard || s->num_nodes > 1;
  BC_RETURN_IF_ERROR(CheckFrontDoorOptions(
      s->options, s->use_multi ? FrontDoor::kMultinode : FrontDoor::kMpiRuntime));
  if (!shard && s->num_nodes > 1) {
    int provided = MPI_THREAD_SINGLE;
    BC_MPI(MPI_Query_thread(&provided), "MPI_Query_thread");
    if (provided < MPI_THREAD_MULTIPLE)
      return FailedPreconditionError(
          "replicate mode across {} nodes exchanges batches between node leaders from the "
          "leader's background thread and needs MPI_THREAD_MULTIPLE, but MPI was initialised "
          "with thread level {}; call MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, "
          "&provided) (or use mode=shard, which uses no MPI while streaming)",
          s->num_nodes, provided);
  }
  return Status::Ok();
}

// One collector per rank when the `telemetry` option is on (it must be on for all ranks or
// none, since Finish is collective: checked here).
Status StartTelemetry(RuntimeState* s) {
  telemetry::Role role = s->leader ? (s->trainer ? telemetry::Role::kBoth : telemetry::Role::kLeader)
                                   : telemetry::Role::kConsumer;
  // Rank 0 writes every rank's data (Finish is a gather): it checks the paths for the job.
  const telemetry::OutputIdentity who{telemetry::ProcessKind::kJob, s->world_rank, true, ""};
  auto c = telemetry::CreateCollector(s->options, who, s->local_rank, role, &s->sinks);
  Status created = c.ok() ? Status::Ok() : c.status();
  if (c.ok()) s->collector = std::move(c).value();
  BC_RETURN_IF_ERROR(mpi::AgreeOnStatus(s->world, created));
  int on = s->collector ? 1 : 0, min_on = 0, max_on = 0;
  BC_MPI(MPI_Allreduce(&on, &min_on, 1, MPI_INT, MPI_MIN, s->world), "MPI_Allreduce (telemetry)");
  BC_MPI(MPI_Allreduce(&on, &max_on, 1, MPI_INT, MPI_MAX, s->world), "MPI_Allreduce (telemetry)");
  if (min_on != max_on)
    return InvalidArgumentError(
        "telemetry is on for some ranks and off for others; set BATCHCAST_TELEMETRY the same "
        "way for every rank");
  return Status::Ok();
}

// The leader learns every local trainer's batch size, epochs and consumer count (1, or its
// own consumers: RuntimeAccess::CreateWithOwnConsumers) and creates the node's Producer.
Status StartLeader(RuntimeState* s, std::string* socket_name) {
  int mine[3] = {s->trainer ? s->options.batch_size : 0, s->trainer ? s->options.epochs : 0,
                 s->trainer ? std::max(1, s->own_consumers) : 0};
  std::vector<int> all(3 * static_cast<size_t>(s->node_size));
  BC_MPI(MPI_Gather(mine, 3, MPI_INT, all.data(), 3, MPI_INT, 0, s->node), "MPI_Gather (requests)");
  if (!s->leader) return Status::Ok();
  int trainers = 0, consumers = 0, max_b = 0, max_epochs = 0;
  for (int r = 0; r < s->node_size; ++r) {
    if (all[3 * r] == 0) continue;
    ++trainers;
    consumers += all[3 * r + 2];
    max_b = std::max(max_b, all[3 * r]);
    max_epochs = std::max(max_epochs, all[3 * r + 1]);
  }
  if (s->use_multi) {  // every node leader must plan the same stream
    int local[2] = {max_b, max_epochs}, global[2] = {0, 0};
    BC_MPI(MPI_Allreduce(local, global, 2, MPI_INT, MPI_MAX, s->leaders),
           "MPI_Allreduce (node leaders: batch size, epochs)");
    max_b = global[0];
    max_epochs = global[1];
  }
  if (trainers == 0)
    return FailedPreconditionError(
        "node {} has only its leader rank (rank {}); launch at least one more rank per node "
        "or set leader_trains=true",
        s->node_id, s->world_rank);
  producer::ProducerConfig cfg;
  cfg.front_door = s->use_multi ? FrontDoor::kMultinode : FrontDoor::kMpiRuntime;
  cfg.options = s->options;
  cfg.options.epochs = max_epochs;
  cfg.expected_consumers = consumers;
  cfg.max_consumer_batch = static_cast<uint32_t>(max_b);
  cfg.job = JobId(s->options);
  cfg.rank = s->world_rank;
  cfg.local_rank = s->local_rank;
  cfg.socket_name = fmt::format("batchcast-{}-{}-n{}-{}", getuid(), cfg.job, s->node_id, getpid());
  cfg.collector = s->collector.get();
  // A trainer that vanishes is a dead rank: the job fails fast, naming it; the job ends
  // with its trainers (Serve returns once the last has detached).
  cfg.loss = producer::LossPolicy::kFailStream;
  cfg.wait_until_empty = true;
  BC_ASSIGN_OR_RETURN(auto source, producer::MakePipelineSource(s->options));
  *socket_name = cfg.socket_name;
  if (s->use_multi) {
    s->multi.leaders = s->leaders;
    BC_ASSIGN_OR_RETURN(s->producer, node::CreateMultinodeProducer(cfg, std::move(source), s->multi));
  } else {
    BC_ASSIGN_OR_RETURN(s->producer, producer::Producer::Create(cfg, std::move(source)));
  }
  return Status::Ok();
}

Status ShareAddress(RuntimeState* s, std::string* name) {
  char buf[108] = {0};
  if (s->leader) std::snprintf(buf, sizeof(buf), "%s", name->c_str());
  BC_MPI(MPI_Bcast(buf, sizeof(buf), MPI_CHAR, 0, s->node), "MPI_Bcast (leader address)");
  *name = buf;
  return Status::Ok();
}

// The GPU data plane (gpu/gpu_runtime.h): collective over the node, after the leader exists
// and before it runs. Its relays stop with the stream (the Producer's stream end).
Status SetupGpu(RuntimeState* s, const std::string& address) {
  gpu::GpuRuntimeInput in;
  in.options = s->options;
  in.node = s->node;
  in.world = s->world;
  in.local_rank = s->local_rank;
  in.node_size = s->node_size;
  in.node_id = s->node_id;
  in.trainer = s->trainer;
  in.multinode_leader = s->use_multi;
  if (s->producer && !s->use_multi) in.leader = s->producer->staging_target();
  in.address = address;
  in.collector = s->collector.get();
  auto plane = gpu::GpuRuntime::Setup(in);
  if (!plane.ok()) return plane.status();
  s->gpu_plane = std::move(plane).value();
  if (s->producer && !s->use_multi)
    s->producer->OnStreamEnd([plane = s->gpu_plane.get()] { return plane->FinishLeader(); });
  return Status::Ok();
}

// Trainers on the device path: a GpuConsumer over the map the GPU plane opens for them.
// A trainer whose batches cannot be mapped (they would be joined in private host memory)
// takes the host path alone under gpu=auto, saying why; under gpu=on that is the error.
Status AttachGpuConsumer(RuntimeState* s) {
  Status why;
  if (s->gpu_plane->trainer_on_device_path() &&
      TrainerTakesHostPath(*s->consumer, s->gpu_plane->mode(),
                           fmt::format("gpu: rank {}", s->world_rank), &why))
    return Status::Ok();
  BC_ASSIGN_OR_RETURN(std::unique_ptr<cuda::DeviceMap> map, s->gpu_plane->OpenConsumerMap());
  if (map == nullptr) return Status::Ok();  // the host path
  BC_ASSIGN_OR_RETURN(s->gpu_consumer,
                      internal::GpuConsumerFactory::Make(*s->consumer, std::move(map)));
  return Status::Ok();
}

}  // namespace batchcast::internal
