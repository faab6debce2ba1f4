// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "run/placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "core/errors.h"

namespace batchcast::run {
namespace {

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

bool IsIndex(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// One requested id (index, GPU-/MIG- UUID) checked against what the node has.
Result<std::string> ResolveGpu(const std::string& id, const std::vector<GpuDevice>& gpus,
                               const std::string& host) {
  if (IsIndex(id)) {
    int i = std::stoi(id);
    if (i >= static_cast<int>(gpus.size()))
      return NotFoundError("placement: GPU index {} requested but host {} has {} GPU(s)", i, host,
                           gpus.size());
    return id;
  }
  for (const auto& g : gpus) {
    if (g.uuid == id) return id;
    if (std::find(g.mig_uuids.begin(), g.mig_uuids.end(), id) != g.mig_uuids.end()) return id;
  }
  return NotFoundError("placement: GPU or MIG instance '{}' is not on host {} (see nvidia-smi -L)",
                       id, host);
}

// The GPU ids this node places trainers on (empty: CPU-only trainers).
Result<std::vector<std::string>> NodeGpus(const RunConfig& c, const std::vector<GpuDevice>& gpus,
                                          const std::string& host) {
  std::vector<std::string> ids;
  if (c.gpus == "none") return ids;
  if (c.gpus == "auto" || c.gpus.empty()) {
    if (!c.visible_devices.empty() && c.visible_devices != "NoDevFiles") {
      ids = SplitList(c.visible_devices);  // e.g. Slurm's GRES binding: keep within it
    } else {
      for (const auto& g : gpus) ids.push_back(g.uuid.empty() ? std::to_string(g.index) : g.uuid);
    }
    return ids;
  }
  if (gpus.empty())
    return FailedPreconditionError(
        "placement: --gpus {} requested but host {} has no GPU (nvidia-smi -L and "
        "/proc/driver/nvidia found none); drop --gpus to run trainers on CPUs",
        c.gpus, host);
  for (const auto& id : SplitList(c.gpus)) {
    BC_ASSIGN_OR_RETURN(std::string r, ResolveGpu(id, gpus, host));
    ids.push_back(r);
  }
  return ids;
}

int Trainers(const LaunchEnv& env, const RunConfig& c, int node) {
  return env.tasks_per_node[static_cast<size_t>(node)] - (c.leader_trains ? 0 : 1);
}

std::string HostOf(const LaunchEnv& env, int node) {
  return node < static_cast<int>(env.hosts.size()) ? env.hosts[static_cast<size_t>(node)]
                                                   : fmt::format("node {}", node);
}

Status CheckNodes(const LaunchEnv& env, const RunConfig& c) {
  for (int n = 0; n < env.num_nodes(); ++n) {
    if (Trainers(env, c, n) <= 0)
      return FailedPreconditionError(
          "placement: node {} ({}) has {} task(s), only its leader; launch at least one more "
          "task per node (e.g. srun --ntasks-per-node=K+1) or pass --leader-trains",
          n, HostOf(env, n), env.tasks_per_node[static_cast<size_t>(n)]);
  }
  return Status::Ok();
}

Status PlaceGpu(const RunConfig& c, const std::string& host, TaskPlan* p) {
  const auto& ids = p->node_gpus;
  if (ids.empty()) {
    if (c.mps)
      return FailedPreconditionError(
          "placement: --mps asked for, but host {} has no GPU for MPS to share; drop --mps", host);
    if (c.trainers_per_gpu > 0)
      return FailedPreconditionError(
          "placement: --trainers-per-gpu {} asked for, but host {} has no GPU; drop it to run "
          "trainers on CPUs",
          c.trainers_per_gpu, host);
    return Status::Ok();
  }
  int k = c.trainers_per_gpu > 0 ? c.trainers_per_gpu : 1;
  int slots = static_cast<int>(ids.size()) * k;
  if (p->trainers_on_node > slots)
    return ResourceExhaustedError(
        "placement: node {} ({}) has {} trainers but only {} slots ({} GPU(s) x {} trainer(s) per "
        "GPU); raise --trainers-per-gpu, add --mps for collocation, or launch fewer tasks per node",
        p->node_id, host, p->trainers_on_node, slots, ids.size(), k);
  if (p->trains())
    p->cuda_visible_devices = ids[static_cast<size_t>(p->trainer_local_rank) % ids.size()];
  return Status::Ok();
}

}  // namespace

const char* RoleName(Role r) {
  switch (r) {
    case Role::kLeader:
      return "leader";
    case Role::kTrainer:
      return "trainer";
    case Role::kLeaderTrainer:
      return "leader+trainer";
  }
  return "?";
}

int DeriveMasterPort(const std::string& job_id) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char ch : job_id) h = (h ^ ch) * 1099511628211ULL;
  return kMasterPortBase + static_cast<int>(h % kMasterPortRange);
}

std::string LeaderSocketName(unsigned uid, const std::string& job_id, int node_id) {
  return fmt::format("batchcast-run-{}-{}-n{}", uid, job_id, node_id);
}

Result<TaskPlan> PlanTask(const LaunchEnv& env, const RunConfig& c,
                          const std::vector<GpuDevice>& gpus, unsigned uid) {
  BC_RETURN_IF_ERROR(CheckNodes(env, c));
  TaskPlan p;
  p.node_id = env.node_id;
  p.job_id = c.job_id.empty() ? env.job_id : c.job_id;
  if (p.job_id.empty())
    return FailedPreconditionError(
        "placement: no job id from the {} environment; pass --job-id (the same on every task)",
        LauncherName(env.launcher));
  p.role = env.local_rank == 0 ? (c.leader_trains ? Role::kLeaderTrainer : Role::kLeader)
                               : Role::kTrainer;
  p.trainers_on_node = Trainers(env, c, env.node_id);
  int before = 0;
  for (int n = 0; n < env.num_nodes(); ++n) {
    if (n < env.node_id) before += Trainers(env, c, n);
    p.trainer_world_size += Trainers(env, c, n);
  }
  if (p.trains()) {
    p.trainer_local_rank = env.local_rank - (c.leader_trains ? 0 : 1);
    p.trainer_rank = before + p.trainer_local_rank;
  }
  std::string host = HostOf(env, env.node_id);
  BC_ASSIGN_OR_RETURN(p.node_gpus, NodeGpus(c, gpus, host));
  BC_RETURN_IF_ERROR(PlaceGpu(c, host, &p));
  p.master_addr = c.master_addr;
  if (p.master_addr.empty()) {
    if (env.node0_host.empty())
      return FailedPreconditionError(
          "placement: the host of trainer rank 0 is not known under {} across {} nodes; pass "
          "--master-addr HOST (the host running node 0's tasks)",
          LauncherName(env.launcher), env.num_nodes());
    p.master_addr = env.node0_host;
  }
  p.master_port = c.master_port > 0 ? c.master_port : DeriveMasterPort(p.job_id);
  p.socket_name = LeaderSocketName(uid, p.job_id, env.node_id);
  if (c.mps)
    p.mps_pipe_dir = fmt::format("/tmp/batchcast-mps-{}-{}-n{}", uid, p.job_id, env.node_id);
  return p;
}

}  // namespace batchcast::run
