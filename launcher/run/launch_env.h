// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Where batchcast-run is running: which launcher started this task (Slurm srun, Open MPI
// mpirun, a torchrun-style script, or nothing), this task's rank, its node and the shape of
// the job. Read from environment variables only: no MPI, no PMIx, no network.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "batchcast/status.h"

namespace batchcast::run {

enum class Launcher { kSlurm, kOpenMpi, kTorchrun, kNone };
const char* LauncherName(Launcher l);

struct LaunchEnv {
  Launcher launcher = Launcher::kNone;
  int rank = 0;  // this task in the whole step (leaders included)
  int world_size = 1;
  int local_rank = 0;               // this task on its node
  int node_id = 0;                  // 0 .. num_nodes-1, in node-list order
  std::vector<int> tasks_per_node;  // tasks of every node, by node id
  std::vector<std::string> hosts;   // host names by node id (empty when unknown)
  std::string job_id;               // job (and step) identity, sanitized for socket names
  std::string hostname;             // this machine
  std::string node0_host;           // the host of node 0 ("" = unknown)
  int num_nodes() const { return static_cast<int>(tasks_per_node.size()); }
  int local_size() const { return tasks_per_node.at(static_cast<size_t>(node_id)); }
};

// Environment as a map, so detection can be tested without touching the process.
using EnvMap = std::map<std::string, std::string>;
EnvMap CurrentEnvironment();

// Detects the launcher, in this order: Open MPI (OMPI_COMM_WORLD_*), Slurm (SLURM_PROCID with
// SLURM_STEP_ID or SLURM_JOB_ID), torchrun-style (RANK + WORLD_SIZE), none (one task).
Result<LaunchEnv> DetectLaunchEnv(const EnvMap& env);

// Slurm's compressed host lists: "n[1-3,7],gpu01,a[08-10]" -> n1 n2 n3 n7 gpu01 a08 a09 a10.
Result<std::vector<std::string>> ExpandHostList(const std::string& list);
// Slurm's task counts: "3(x2),1" -> 3 3 1.
Result<std::vector<int>> ExpandTasksPerNode(const std::string& spec);

}  // namespace batchcast::run
