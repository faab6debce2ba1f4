// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The MPI front door: forms nodes, starts one leader per node, attaches the trainers.
// Every step that can fail on one rank is agreed on by all ranks (AgreeOnStatus), so a
// bad option or a missing file fails the whole job with one message instead of a hang.
#include "batchcast/runtime.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <thread>

#include "core/environment.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "gpu/gpu_runtime.h"
#include "node/consumer_internal.h"
#include "node/gpu_consumer.h"
#include "node/leader.h"
#include "node/multinode_leader.h"
#include "node/runtime_internal.h"
#include "telemetry/spec.h"
#include "transport/mpi/mpi_status.h"

namespace batchcast {
namespace internal {

struct RuntimeState {
  Options options;
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm trainers = MPI_COMM_NULL;
  MPI_Comm leaders = MPI_COMM_NULL;   // node leaders only (kept for replicate mode)
  int num_nodes = 1;
  node::MultinodeConfig multi;        // across nodes (docs/multinode.md)
  bool use_multi = false;             // this node runs a MultinodeLeader
  int world_rank = 0, world_size = 0;
  int node_id = 0, local_rank = 0, node_size = 0;
  bool leader = false, trainer = false;
  std::unique_ptr<node::Leader> leader_obj;
  std::unique_ptr<node::MultinodeLeader> multi_obj;
  std::thread leader_thread;
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

}  // namespace internal

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

// The MPI job's answer to an error met by range-for iteration (Consumer::SetErrorHandler):
// log it and abort the whole job at once, since the other ranks may wait on this one.
std::function<void(const Status&)> FailJobOnIterationError(MPI_Comm world) {
  return [world](const Status& st) {
    BC_LOG(Error, Node, "consumer: {}", st.ToString());
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Abort(world, 1);
    std::exit(1);
  };
}

Status SplitNodes(internal::RuntimeState* s) {
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

// Across nodes (docs/multinode.md): whether this node runs a MultinodeLeader and, in shard
// mode, the job's trainer count and each local trainer's index in the trainers-only
// communicator (which Create splits in world-rank order). Collective over the world; every
// rank computes the same verdict from the same gathered table.
Status PlanMultinode(internal::RuntimeState* s) {
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

// The leader learns every local trainer's batch size, epochs and consumer count (1, or
// its own consumers: RuntimeAccess::CreateWithOwnConsumers); creates the ring.
Status StartLeader(internal::RuntimeState* s, std::string* socket_name) {
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
  node::LeaderConfig cfg;
  cfg.options = s->options;
  cfg.options.epochs = max_epochs;
  cfg.expected_consumers = consumers;
  cfg.max_consumer_batch = static_cast<uint32_t>(max_b);
  std::string job = JobId(s->options);
  cfg.job = job;
  cfg.rank = s->world_rank;
  cfg.socket_name = fmt::format("batchcast-{}-{}-n{}-{}", getuid(), job, s->node_id, getpid());
  cfg.collector = s->collector.get();
  auto source = producer::MakePipelineSource(s->options);
  if (!source.ok()) return source.status();
  *socket_name = cfg.socket_name;
  if (s->use_multi) {
    s->multi.leaders = s->leaders;
    auto multi = node::MultinodeLeader::Create(cfg, std::move(source).value(), s->multi);
    if (!multi.ok()) return multi.status();
    s->multi_obj = std::move(multi).value();
    node::MultinodeLeader* l = s->multi_obj.get();
    l->ring().SetLossHandler([l](const shm::MemberInfo& m, shm::LossKind kind) {
      if (kind == shm::LossKind::kDetached) return;
      l->Abort(fmt::format("{} died or stopped responding; failing the job", m.Describe()));
    });
    return Status::Ok();
  }
  auto leader = node::Leader::Create(cfg, std::move(source).value());
  if (!leader.ok()) return leader.status();
  s->leader_obj = std::move(leader).value();
  // In an MPI job a consumer that vanishes is a dead rank: fail fast, naming it.
  node::Leader* l = s->leader_obj.get();
  l->ring().SetLossHandler([l](const shm::MemberInfo& m, shm::LossKind kind) {
    if (kind == shm::LossKind::kDetached) return;
    l->Abort(fmt::format("{} died or stopped responding; failing the job", m.Describe()));
  });
  return Status::Ok();
}

// One collector per rank when the `telemetry` option is on (it must be on for all ranks
// or none, since Finish is collective: checked here).
Status StartTelemetry(internal::RuntimeState* s) {
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

// The GPU data plane (gpu/gpu_runtime.h): collective over the node, after the leader
// exists and before it runs.
Status SetupGpu(internal::RuntimeState* s, const std::string& address) {
  gpu::GpuRuntimeInput in;
  in.options = s->options;
  in.node = s->node;
  in.world = s->world;
  in.local_rank = s->local_rank;
  in.node_size = s->node_size;
  in.node_id = s->node_id;
  in.trainer = s->trainer;
  in.multinode_leader = s->use_multi;
  if (s->leader_obj) in.leader = s->leader_obj->staging_target();
  in.address = address;
  in.collector = s->collector.get();
  auto plane = gpu::GpuRuntime::Setup(in);
  if (!plane.ok()) return plane.status();
  s->gpu_plane = std::move(plane).value();
  return Status::Ok();
}

// Trainers on the device path: a GpuConsumer over the map the GPU plane opens for them.
Status AttachGpuConsumer(internal::RuntimeState* s) {
  BC_ASSIGN_OR_RETURN(std::unique_ptr<cuda::DeviceMap> map, s->gpu_plane->OpenConsumerMap());
  if (map == nullptr) return Status::Ok();  // the host path
  BC_ASSIGN_OR_RETURN(s->gpu_consumer,
                      internal::GpuConsumerFactory::Make(*s->consumer, std::move(map)));
  return Status::Ok();
}

Status ShareAddress(internal::RuntimeState* s, std::string* name) {
  char buf[108] = {0};
  if (s->leader) std::snprintf(buf, sizeof(buf), "%s", name->c_str());
  BC_MPI(MPI_Bcast(buf, sizeof(buf), MPI_CHAR, 0, s->node), "MPI_Bcast (leader address)");
  *name = buf;
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Runtime>> Runtime::Create(const Options& options, MPI_Comm comm) {
  return internal::RuntimeAccess::CreateWithOwnConsumers(options, comm, 0);
}

namespace internal {

const std::string& RuntimeAccess::Address(const Runtime& runtime) {
  return runtime.state_->address;
}

telemetry::Collector* RuntimeAccess::Collector(const Runtime& runtime) {
  return runtime.state_->collector.get();
}

Result<std::unique_ptr<Runtime>> RuntimeAccess::CreateWithOwnConsumers(const Options& options,
                                                                       MPI_Comm comm,
                                                                       int consumers) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return FailedPreconditionError("runtime: call MPI_Init before Runtime::Create");
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->state_ = std::make_unique<internal::RuntimeState>();
  internal::RuntimeState* s = rt->state_.get();
  s->options = options;
  s->own_consumers = consumers;
  BC_MPI(MPI_Comm_dup(comm, &s->world), "MPI_Comm_dup");
  BC_MPI(MPI_Comm_set_errhandler(s->world, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  BC_MPI(MPI_Comm_rank(s->world, &s->world_rank), "MPI_Comm_rank");
  BC_MPI(MPI_Comm_size(s->world, &s->world_size), "MPI_Comm_size");
  s->finalized = true;  // until the job is fully up, destroying the Runtime just frees it
  Status valid = ValidateOptions(options);
  if (valid.ok() && (options.rank >= 0 || options.world_size > 0))
    valid = InvalidArgumentError(
        "runtime: options 'rank'/'world_size' are for consumers outside an MPI job; the MPI "
        "Runtime takes them from the communicator (mode=shard shards over its trainers). "
        "Unset them (and RANK/WORLD_SIZE are not read here)");
  BC_RETURN_IF_ERROR(mpi::AgreeOnStatus(s->world, valid));
  BC_RETURN_IF_ERROR(SplitNodes(s));
  BC_RETURN_IF_ERROR(mpi::AgreeOnStatus(s->world, PlanMultinode(s)));

  Status st = StartTelemetry(s);
  st = mpi::AgreeOnStatus(s->world, st);
  if (!st.ok()) return st;
  std::string address;
  st = mpi::AgreeOnStatus(s->world, StartLeader(s, &address));
  if (!st.ok()) {
    s->finalized = true;
    return st;
  }
  BC_RETURN_IF_ERROR(ShareAddress(s, &address));
  s->address = address;
  st = mpi::AgreeOnStatus(s->world, SetupGpu(s, address));
  if (!st.ok()) {
    s->finalized = true;
    return st;
  }
  if (s->leader && s->multi_obj) {
    node::MultinodeLeader* l = s->multi_obj.get();
    s->leader_thread = std::thread([s, l] {
      NameThread("bc-leader");
      s->leader_status = l->Run();
    });
  } else if (s->leader) {
    node::Leader* l = s->leader_obj.get();
    s->leader_thread = std::thread([s, l] {
      NameThread("bc-leader");
      s->leader_status = l->Run();
      Status staged = s->gpu_plane->FinishLeader();  // the NCCL relays stop with the stream
      if (!staged.ok() && s->leader_status.ok()) s->leader_status = staged;
    });
  }
  if (s->trainer && s->own_consumers == 0) {
    // mode=shard: the node leader (MultinodeLeader) already publishes this trainer's part
    // to it alone; the consumer takes every batch it receives.
    Options consumer_options = options;
    consumer_options.mode = "replicate";
    auto c = Consumer::Attach(address, consumer_options, s->world_rank);
    st = c.ok() ? Status::Ok() : c.status();
    if (c.ok()) {
      s->consumer = std::move(c).value();
      internal::ConsumerAccess::SetCollector(*s->consumer, s->collector.get());
      s->consumer->SetErrorHandler(FailJobOnIterationError(s->world));
      st = AttachGpuConsumer(s);
    }
  }
  st = mpi::AgreeOnStatus(s->world, st);
  if (!st.ok()) {  // every rank fails together; stop our leader without aborting the job
    s->gpu_consumer.reset();
    s->consumer.reset();
    if (s->leader_obj) s->leader_obj->Abort("job start failed: " + st.message());
    if (s->multi_obj) s->multi_obj->Abort("job start failed: " + st.message());
    if (s->leader_thread.joinable()) s->leader_thread.join();
    s->finalized = true;
    return st;
  }
  // gpu=auto: one trainer's failed device-path check keeps the node on the host path.
  if (s->gpu_plane && !s->gpu_plane->AgreeOnDevicePath()) s->gpu_consumer.reset();
  BC_MPI(MPI_Comm_split(s->world, s->trainer ? 0 : MPI_UNDEFINED, s->world_rank, &s->trainers),
         "MPI_Comm_split (trainers)");
  s->finalized = false;
  BC_LOG(Info, Init, "runtime: rank {} of {}: node {} local rank {} of {}, {}{}", s->world_rank,
         s->world_size, s->node_id, s->local_rank, s->node_size, s->leader ? "leader" : "",
         s->trainer ? (s->leader ? "+trainer" : "trainer") : "");
  return rt;
}

}  // namespace internal

Runtime::~Runtime() {
  if (state_ && !state_->finalized) {
    Status st = Finalize();
    if (!st.ok()) BC_LOG(Error, Init, "runtime: finalize: {}", st.ToString());
  }
}

bool Runtime::is_leader() const { return state_->leader; }
bool Runtime::is_trainer() const { return state_->trainer; }
int Runtime::node_id() const { return state_->node_id; }
int Runtime::local_rank() const { return state_->local_rank; }
int Runtime::node_size() const { return state_->node_size; }
MPI_Comm Runtime::trainer_comm() const { return state_->trainers; }

GpuConsumer* Runtime::gpu_consumer() {
  return state_->gpu_consumer.get();
}

Consumer& Runtime::consumer() {
  if (!state_->consumer) {
    BC_LOG(Error, Init, "runtime: consumer() called on rank {}, which only leads", state_->world_rank);
    std::abort();
  }
  return *state_->consumer;
}

Status Runtime::Serve() {
  internal::RuntimeState* s = state_.get();
  if (!s->leader || s->served) return s->leader_status;
  s->served = true;
  if (s->leader_thread.joinable()) s->leader_thread.join();
  Status st = s->leader_status;
  if (st.ok())
    st = s->multi_obj ? s->multi_obj->WaitUntilEmpty(24LL * 3600 * 1000)
                      : s->leader_obj->WaitUntilEmpty(24LL * 3600 * 1000);
  if (!st.ok()) {
    if (!(s->multi_obj && s->multi_obj->reported()))  // else printed before the leaders' barrier
      log::Report(log::kNode, fmt::format("leader of node {} (rank {}) failed: {}", s->node_id,
                                        s->world_rank, st.message()));
    MPI_Abort(s->world, 1);  // fail fast: peers may be blocked on us
  }
  return st;
}

Status Runtime::Finalize() {
  internal::RuntimeState* s = state_.get();
  if (s->finalized) return Status::Ok();
  s->finalized = true;
  Status first;
  s->gpu_consumer.reset();  // device mappings go before the host slots
  if (s->consumer) {
    first = s->consumer->status();
    s->consumer->Detach().IgnoreError();
  }
  if (s->leader) {
    Status st = Serve();
    if (first.ok()) first = st;
  }
  if (s->consumer) internal::ConsumerAccess::SetCollector(*s->consumer, nullptr);
  if (s->collector) {  // collective over all ranks: gathers every rank's series to rank 0
    Status st = s->collector->Finish(s->world, s->sinks);
    if (!st.ok()) BC_LOG(Error, Telem, "telemetry: {}", st.ToString());
    if (first.ok()) first = st;
  }
  BC_MPI(MPI_Barrier(s->world), "MPI_Barrier (finalize)");
  if (s->gpu_plane) {  // every rank has unmapped the device slots: free them, join the relay
    Status st = s->gpu_plane->Shutdown();
    if (first.ok()) first = st;
    s->gpu_plane.reset();
  }
  if (s->trainers != MPI_COMM_NULL) MPI_Comm_free(&s->trainers);
  if (s->node != MPI_COMM_NULL) MPI_Comm_free(&s->node);
  if (s->leaders != MPI_COMM_NULL) MPI_Comm_free(&s->leaders);
  if (s->world != MPI_COMM_NULL) MPI_Comm_free(&s->world);
  s->consumer.reset();
  s->leader_obj.reset();
  s->multi_obj.reset();
  return first;
}

}  // namespace batchcast
