// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The MPI front door: forms nodes, starts one producer::Producer per node (runtime_start.cc),
// attaches the trainers. Every step that can fail on one rank is agreed on by all ranks
// (AgreeOnStatus), so a bad option or a missing file fails the whole job with one message
// instead of a hang.
#include "batchcast/runtime.h"

#include <cstdlib>
#include <functional>

#include "core/errors.h"
#include "core/log.h"
#include "core/mpi_status.h"
#include "node/consumer_internal.h"
#include "node/runtime_internal.h"
#include "node/runtime_state.h"

namespace batchcast {

Result<std::unique_ptr<Runtime>> Runtime::Create(const Options& options, MPI_Comm comm) {
  return internal::RuntimeAccess::CreateWithOwnConsumers(options, comm, 0);
}

namespace internal {
namespace {

// Every rank fails together; stops this node's leader without aborting the job.
Status FailStart(RuntimeState* s, const Status& st) {
  s->gpu_consumer.reset();
  s->consumer.reset();
  if (s->producer) {
    s->producer->Abort("job start failed: " + st.message());
    if (s->started) s->producer->Wait().IgnoreError();
  }
  s->finalized = true;
  return st;
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

// Trainers attach their consumer to the node leader. mode=shard: the node leader (the
// multi-node leader) already publishes this trainer's part to it alone; the consumer takes
// every batch it receives.
Status AttachTrainer(RuntimeState* s, const Options& options) {
  if (!s->trainer || s->own_consumers != 0) return Status::Ok();
  Options consumer_options = options;
  consumer_options.mode = "replicate";
  if (!options.view.empty())  // BATCHCAST_VIEW in the job's environment (code or flags: refused)
    return InvalidArgumentError(
        "option 'view' ({}): the MPI Runtime's trainers take its node leader's view; views "
        "per trainer are not wired for it: set the leader's transforms instead, or attach "
        "batchcast.Consumer(view=...) trainers to a batchcast serve or Python Leader",
        options.view);
  BC_ASSIGN_OR_RETURN(s->consumer, Consumer::Attach(s->address, consumer_options, s->world_rank));
  ConsumerAccess::SetCollector(*s->consumer, s->collector.get());
  s->consumer->SetErrorHandler(FailJobOnIterationError(s->world));
  return AttachGpuConsumer(s);
}

}  // namespace

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
  rt->state_ = std::make_unique<RuntimeState>();
  RuntimeState* s = rt->state_.get();
  s->options = options;
  s->own_consumers = consumers;
  BC_MPI(MPI_Comm_dup(comm, &s->world), "MPI_Comm_dup");
  BC_MPI(MPI_Comm_set_errhandler(s->world, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  BC_MPI(MPI_Comm_rank(s->world, &s->world_rank), "MPI_Comm_rank");
  BC_MPI(MPI_Comm_size(s->world, &s->world_size), "MPI_Comm_size");
  s->finalized = true;  // until the job is fully up, destroying the Runtime just frees it
  BC_RETURN_IF_ERROR(mpi::AgreeOnStatus(s->world, ValidateOptions(options)));
  BC_RETURN_IF_ERROR(SplitNodes(s));
  BC_RETURN_IF_ERROR(mpi::AgreeOnStatus(s->world, PlanMultinode(s)));
  BC_RETURN_IF_ERROR(mpi::AgreeOnStatus(s->world, StartTelemetry(s)));
  std::string address;
  BC_RETURN_IF_ERROR(mpi::AgreeOnStatus(s->world, StartLeader(s, &address)));
  BC_RETURN_IF_ERROR(ShareAddress(s, &address));
  s->address = address;
  if (Status st = mpi::AgreeOnStatus(s->world, SetupGpu(s, address)); !st.ok())
    return FailStart(s, st);
  if (s->producer) {
    s->producer->Start();
    s->started = true;
  }
  if (Status st = mpi::AgreeOnStatus(s->world, AttachTrainer(s, options)); !st.ok())
    return FailStart(s, st);
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
GpuConsumer* Runtime::gpu_consumer() { return state_->gpu_consumer.get(); }

Consumer& Runtime::consumer() {
  if (!state_->consumer) {
    BC_LOG(Error, Init, "runtime: consumer() called on rank {}, which only leads", state_->world_rank);
    std::abort();
  }
  return *state_->consumer;
}

// The stream runs on the Producer's thread until it is complete and every trainer has
// detached (ProducerConfig::wait_until_empty); a failure aborts the job.
Status Runtime::Serve() {
  internal::RuntimeState* s = state_.get();
  if (!s->leader || s->served) return s->leader_status;
  s->served = true;
  Status st = s->producer->Wait();
  s->leader_status = st;
  if (!st.ok()) {
    if (!s->producer->reported())  // else printed before the leaders' barrier
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
  s->producer.reset();
  return first;
}

}  // namespace batchcast
