// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Placement: from the launch environment and the run options, what this task is (the node's
// leader, a trainer, or both), its rank in the trainers-only world, its GPU, and where the
// node's leader listens. Pure: every task computes the same plan for the whole job, so an
// impossible layout fails on every task, with the same message, before anything starts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "run/gpu.h"
#include "run/launch_env.h"

namespace batchcast::run {

struct RunConfig {
  bool leader_trains = false;
  int trainers_per_gpu = 0;   // 0: not given (1 when GPUs are used)
  std::string gpus = "auto";  // auto | none | comma list of indices and GPU-/MIG- UUIDs
  bool mps = false;
  std::string master_addr;      // "" = the host of trainer rank 0
  int master_port = 0;          // 0 = derived from the job id
  std::string job_id;           // "" = from the launcher
  std::string visible_devices;  // CUDA_VISIBLE_DEVICES the launcher saw ("" = unset)
};

enum class Role { kLeader, kTrainer, kLeaderTrainer };
const char* RoleName(Role r);

struct TaskPlan {
  Role role = Role::kTrainer;
  int node_id = 0;
  int trainers_on_node = 0;  // consumers the node's leader waits for
  int trainer_rank = -1;     // in the trainers-only world (-1: leader only)
  int trainer_local_rank = -1;
  int trainer_world_size = 0;
  std::string master_addr;
  int master_port = 0;
  std::string socket_name;  // the node leader's abstract control socket
  std::string job_id;
  std::string cuda_visible_devices;    // "" = leave the environment as it is
  std::string mps_pipe_dir;            // "" = no MPS
  std::vector<std::string> node_gpus;  // the GPU ids this node places trainers on
  bool trains() const { return role != Role::kLeader; }
  bool leads() const { return role != Role::kTrainer; }
};

// The first port of the MASTER_PORT range and its size: [29500, 32499].
inline constexpr int kMasterPortBase = 29500;
inline constexpr int kMasterPortRange = 3000;
int DeriveMasterPort(const std::string& job_id);

// The leader's socket name, a function of (uid, job id, node id) only.
std::string LeaderSocketName(unsigned uid, const std::string& job_id, int node_id);

// The plan for this task; `gpus` are the GPUs detected on this task's node.
Result<TaskPlan> PlanTask(const LaunchEnv& env, const RunConfig& config,
                          const std::vector<GpuDevice>& gpus, unsigned uid);

}  // namespace batchcast::run
