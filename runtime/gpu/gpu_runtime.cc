// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "gpu/gpu_runtime.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/errors.h"
#include "core/log.h"
#include "gpu/gpu_check.h"
#include "gpu/gpu_relay.h"
#include "gpu/gpu_stager.h"
#include "producer/ring_access.h"
#include "transport/cuda/device_probe.h"
#include "transport/cuda/nccl_broadcast.h"
#include "transport/cuda/nccl_fanout.h"
#include "core/mpi_status.h"

namespace batchcast::gpu {
namespace {

constexpr size_t kBusBytes = 32;
constexpr size_t kReasonBytes = 224;
constexpr size_t kRowBytes = kBusBytes + kReasonBytes;  // bus id, then the host-path reason

// What the leader tells its node after trying to start the device path.
struct LeaderVerdict {
  int32_t code = 0;       // StatusCode of the leader's attempt
  int32_t fallback = 0;   // gpu=auto: the node takes the host path instead of failing
  uint32_t num_slots = 0;
  uint32_t reserved = 0;
  uint64_t slot_bytes = 0;
  char nccl_id[cuda::kNcclIdBytes] = {};
  char message[512] = {};
};

GpuProbe Probe() {
  GpuProbe p;
  p.built_with_cuda = cuda::BuiltWithCuda();
  auto n = cuda::VisibleDeviceCount();
  if (n.ok()) p.visible_devices = n.value();
  else p.cause = n.status().message();
  return p;
}

Status ParseTriple(const std::string& text, const char* key, float out[3]) {
  size_t start = 0;
  for (int k = 0; k < 3; ++k) {
    size_t end = text.find(',', start);
    const std::string item = text.substr(start, end == std::string::npos ? end : end - start);
    char* stop = nullptr;
    const float v = std::strtof(item.c_str(), &stop);
    if (item.empty() || stop == item.c_str() || *stop != '\0')
      return InvalidArgumentError("option '{}' = '{}' is not three comma-separated numbers",
                                  key, text);
    out[k] = v;
    if (end == std::string::npos) {
      for (int j = k + 1; j < 3; ++j) out[j] = v;  // one value for every channel
      return Status::Ok();
    }
    start = end + 1;
  }
  return Status::Ok();
}

}  // namespace

Status StagerConfigFromOptions(const Options& options, GpuStagerConfig* config) {
  config->finish = options.gpu_finish;
  BC_RETURN_IF_ERROR(ParseTriple(options.mean, "mean", config->mean));
  BC_RETURN_IF_ERROR(ParseTriple(options.std, "std", config->stddev));
  for (float s : config->stddev)
    if (!(s > 0)) return InvalidArgumentError("option 'std' = '{}' must be positive", options.std);
  return Status::Ok();
}

Result<std::unique_ptr<GpuStager>> StageOnGpu(const producer::StagingTarget& target,
                                              const Options& options,
                                              telemetry::Collector* collector, std::string* note) {
  BC_ASSIGN_OR_RETURN(GpuMode mode, ParseGpuMode(options.gpu));
  BC_ASSIGN_OR_RETURN(GpuDecision d, DecideGpuPath(mode, mode == GpuMode::kOff ? GpuProbe{}
                                                                               : Probe()));
  *note = d.reason;
  if (!d.use_gpu) return std::unique_ptr<GpuStager>();
  GpuStagerConfig cfg;
  BC_RETURN_IF_ERROR(StagerConfigFromOptions(options, &cfg));
  cfg.device = 0;
  cfg.collector = collector;
  auto stager = GpuStager::Create(target, cfg);
  if (!stager.ok()) {
    if (mode == GpuMode::kOn)
      return stager.status().WithContext("gpu=on, but the leader cannot stage on GPU 0");
    *note = "gpu=auto: host path (the leader cannot stage on GPU 0: " +
            stager.status().message() + ")";
    return std::unique_ptr<GpuStager>();
  }
  BC_ASSIGN_OR_RETURN(std::string bus, cuda::DevicePciBusId(0));
  *note = fmt::format("device path: batches staged on GPU 0 ({}); trainers map them with "
                      "GpuConsumer::Attach (peer copy from other GPUs)", bus);
  return stager;
}

GpuRuntime::~GpuRuntime() {
  Status st = Shutdown();
  if (!st.ok()) BC_LOG(Error, Cuda, "gpu: shutdown: {}", st.message());
}

Status GpuRuntime::DecideTrainer(const GpuRuntimeInput& in, GpuMode mode, std::string* bus,
                                 std::string* reason) {
  if (!in.trainer) return Status::Ok();
  BC_ASSIGN_OR_RETURN(GpuDecision d, DecideGpuPath(mode, mode == GpuMode::kOff ? GpuProbe{}
                                                                               : Probe()));
  *reason = d.reason;
  if (!d.use_gpu) return Status::Ok();
  if (in.multinode_leader) {
    const char* why =
        "the multi-node leader (mode=shard, or several nodes) does not stage device slots yet";
    if (mode == GpuMode::kOn)
      return FailedPreconditionError("gpu=on, but {}; set gpu=auto or gpu=off", why);
    *reason = fmt::format("gpu=auto: host path ({})", why);
    return Status::Ok();
  }
  const int trainers = in.node_size - (in.options.leader_trains ? 0 : 1);
  const int index = in.local_rank - (in.options.leader_trains ? 0 : 1);
  BC_ASSIGN_OR_RETURN(int visible, cuda::VisibleDeviceCount());
  BC_ASSIGN_OR_RETURN(device_,
                      GpuForTrainer(index, trainers, in.options.trainers_per_gpu, visible));
  BC_ASSIGN_OR_RETURN(*bus, cuda::DevicePciBusId(device_));
  return Status::Ok();
}

Status GpuRuntime::StartLeaderSide(const GpuRuntimeInput& in, std::string* nccl_id) {
  BC_ASSIGN_OR_RETURN(int device, cuda::DeviceByPciBusId(plan_.stager_bus));
  GpuStagerConfig cfg;
  BC_RETURN_IF_ERROR(StagerConfigFromOptions(in.options, &cfg));
  cfg.device = device;
  cfg.collector = in.collector;
  if (in.leader.ring == nullptr)
    return InternalError("gpu: node {}: the leader has no ring to stage from", in.node_id);
  auto stager = GpuStager::Create(in.leader, cfg);
  if (!stager.ok()) return stager.status();
  stager_ = std::move(stager).value();
  if (device_ < 0) device_ = device;  // the leader only leads: its NCCL rank uses this GPU
  if (plan_.nccl_ranks() > 0) {
    BC_ASSIGN_OR_RETURN(*nccl_id, cuda::NcclBroadcast::NewUniqueId());
  }
  return Status::Ok();
}

Status GpuRuntime::StartNccl(const GpuRuntimeInput& in, const std::string& nccl_id,
                             uint32_t num_slots, uint64_t slot_bytes) {
  const int rank = plan_.NcclRank(in.local_rank);
  if (rank < 0) return Status::Ok();
  const int device = rank == 0 ? stager_->ring().device() : device_;
  BC_ASSIGN_OR_RETURN(auto comm,
                      cuda::NcclBroadcast::Create(nccl_id, plan_.nccl_ranks(), rank, device));
  if (rank == 0) {
    BC_ASSIGN_OR_RETURN(auto fanout, cuda::NcclFanout::CreateRoot(std::move(comm), device));
    stager_->SetFanout(std::move(fanout));
    return Status::Ok();
  }
  relay_index_ = rank - 1;
  BC_ASSIGN_OR_RETURN(auto fanout, cuda::NcclFanout::CreateRelay(std::move(comm), device));
  GpuRelayConfig rc;
  rc.device = device;
  rc.num_slots = num_slots;
  rc.host_slot_bytes = slot_bytes;
  rc.finish = in.options.gpu_finish;
  rc.handle_socket = GpuRelaySocket(in.address, relay_index_);
  rc.collector = in.collector;
  BC_ASSIGN_OR_RETURN(relay_, GpuRelay::Create(rc, std::move(fanout)));
  MPI_Comm world = in.world;
  const int node_id = in.node_id;
  relay_->Start([world, node_id](const Status& st) {
    log::Report(log::kCuda, fmt::format("gpu relay of node {} failed: {}", node_id, st.message()));
    MPI_Abort(world, 1);  // its trainers would wait on the device forever
  });
  return Status::Ok();
}

Result<std::unique_ptr<GpuRuntime>> GpuRuntime::Setup(const GpuRuntimeInput& in) {
  std::unique_ptr<GpuRuntime> g(new GpuRuntime());
  g->local_rank_ = in.local_rank;
  g->address_ = in.address;
  g->node_ = in.node;
  g->node_id_ = in.node_id;
  BC_ASSIGN_OR_RETURN(GpuMode mode, ParseGpuMode(in.options.gpu));
  g->mode_ = mode;
  std::string bus, reason;
  Status st = g->DecideTrainer(in, mode, &bus, &reason);
  BC_RETURN_IF_ERROR(mpi::AgreeOnStatus(in.node, st));
  if (bus.empty()) g->device_ = -1;

  char mine[kRowBytes] = {};
  std::snprintf(mine, kBusBytes, "%s", bus.c_str());
  if (bus.empty()) std::snprintf(mine + kBusBytes, kReasonBytes, "%s", reason.c_str());
  std::vector<char> all(kRowBytes * static_cast<size_t>(in.node_size));
  BC_MPI(MPI_Allgather(mine, kRowBytes, MPI_CHAR, all.data(), kRowBytes, MPI_CHAR, in.node),
         "MPI_Allgather (gpu placement)");
  std::vector<std::string> buses(static_cast<size_t>(in.node_size));
  std::string host_reason;  // the first trainer's reason for the host path
  for (int r = 0; r < in.node_size; ++r) {
    const char* row = &all[kRowBytes * size_t(r)];
    buses[r] = std::string(row, strnlen(row, kBusBytes));
    if (host_reason.empty())
      host_reason = std::string(row + kBusBytes, strnlen(row + kBusBytes, kReasonBytes));
  }
  g->plan_ = PlanNodeGpus(buses);

  LeaderVerdict v;
  if (in.local_rank == 0 && g->plan_.any()) {
    std::string id;
    Status ls = g->StartLeaderSide(in, &id);
    if (!ls.ok()) {
      v.code = static_cast<int32_t>(ls.code());
      v.fallback = mode == GpuMode::kAuto;
      std::snprintf(v.message, sizeof v.message, "%s", ls.message().c_str());
      g->stager_.reset();
    } else {
      v.num_slots = producer::RingMaxSlots(*in.leader.ring);
      v.slot_bytes = producer::RingSlotBytes(*in.leader.ring);
      std::memcpy(v.nccl_id, id.data(), std::min(id.size(), sizeof v.nccl_id));
    }
  }
  BC_MPI(MPI_Bcast(&v, sizeof v, MPI_BYTE, 0, in.node), "MPI_Bcast (gpu leader verdict)");
  if (v.code != 0) {
    const std::string why = strnlen(v.message, sizeof v.message) < sizeof v.message
                                ? std::string(v.message) : std::string("unknown");
    if (!v.fallback)
      return FailedPreconditionError("gpu=on, but the leader of node {} cannot stage batches on "
                                     "its trainers' GPU: {}", in.node_id, why);
    if (in.local_rank == 0)
      BC_LOG(Warn, Cuda, "gpu: node {}: gpu=auto, host path: the leader cannot stage batches on "
             "its trainers' GPU ({})", in.node_id, why);
    g->plan_ = NodeGpuPlan{};
    g->device_ = -1;
    return g;
  }
  if (g->plan_.nccl_ranks() > 0) {
    st = g->StartNccl(in, std::string(v.nccl_id, sizeof v.nccl_id), v.num_slots, v.slot_bytes);
    BC_RETURN_IF_ERROR(mpi::AgreeOnStatus(in.node, st));
  }
  if (in.local_rank == 0) {
    if (g->plan_.any())
      BC_LOG(Info, Cuda, "gpu: node {}: device path: stager on GPU {}, {} NCCL relay(s)",
             in.node_id, g->plan_.stager_bus, g->plan_.relay_bus.size());
    else if (host_reason.find("multi-node") != std::string::npos)  // a GPU was there
      BC_LOG(Warn, Cuda, "gpu: node {}: host path for every trainer: {}", in.node_id,
             host_reason);
    else
      BC_LOG(Info, Cuda, "gpu: node {}: host path for every trainer{}{}", in.node_id,
             host_reason.empty() ? "" : ": ", host_reason);
  } else if (in.trainer && !g->plan_.any() && mode != GpuMode::kOff) {
    BC_LOG(Debug, Cuda, "gpu: {}", reason);
  }
  return g;
}

Result<std::unique_ptr<cuda::DeviceMap>> GpuRuntime::OpenConsumerMap() {
  if (!trainer_on_device_path()) return std::unique_ptr<cuda::DeviceMap>();
  const int source = plan_.source[local_rank_];
  auto open = [&]() -> Result<std::unique_ptr<cuda::DeviceMap>> {
    if (source == 0 && stager_) return stager_->OpenLocalMap();  // the leader also trains
    if (source > 0 && relay_ && relay_index_ == source - 1)
      return relay_->OpenLocalMap();                               // this rank is the relay
    const std::string socket =
        source == 0 ? GpuHandleSocket(address_) : GpuRelaySocket(address_, source - 1);
    return cuda::DeviceMap::Open(socket, device_, 60000);
  };
  auto map = OpenCheckedMap(mode_, open, "", &check_failure_);  // one WARN per node
  if (!map.ok()) return map.status().WithContext("gpu consumer");
  return map;
}

bool GpuRuntime::AgreeOnDevicePath() {
  if (!plan_.any()) return false;  // the same on every rank of the node
  char mine[kReasonBytes * 2] = {};
  if (!check_failure_.ok())
    std::snprintf(mine, sizeof mine, "%s", check_failure_.message().c_str());
  int size = 0;
  if (MPI_Comm_size(node_, &size) != MPI_SUCCESS) return false;
  std::vector<char> all(sizeof mine * size_t(size));
  if (MPI_Allgather(mine, sizeof mine, MPI_CHAR, all.data(), sizeof mine, MPI_CHAR, node_) !=
      MPI_SUCCESS) {
    BC_LOG(Warn, Cuda, "gpu: node {}: MPI_Allgather of the device-path checks failed; host path",
           node_id_);
    return false;
  }
  for (int r = 0; r < size; ++r) {
    const char* row = &all[sizeof mine * size_t(r)];
    if (row[0] == '\0') continue;
    if (local_rank_ == 0)
      BC_LOG(Warn, Cuda, "{}", FallbackWarning(
          fmt::format("gpu: node {} (local rank {}'s check; every trainer of the node)", node_id_, r),
          Status(StatusCode::kUnavailable, std::string(row, strnlen(row, sizeof mine)))));
    return false;
  }
  return true;
}

Status GpuRuntime::FinishLeader() {
  if (!stager_) return Status::Ok();
  return stager_->Finish();
}

Status GpuRuntime::Shutdown() {
  Status st;
  if (relay_) st = relay_->Join();
  relay_.reset();
  stager_.reset();
  return st;
}

}  // namespace batchcast::gpu
