// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The two kinds of task batchcast-run becomes: the node's leader (a producer::Producer fed by the
// native pipeline, optionally also starting a trainer child) and a trainer (waits for the
// leader's socket, runs the trainer command with the exported variables, passes on its exit).
#pragma once

#include <string>
#include <vector>

#include "batchcast/options.h"
#include "run/launch_env.h"
#include "run/placement.h"
#include "run/process.h"

namespace batchcast::run {

struct TaskContext {
  LaunchEnv env;
  RunConfig config;
  TaskPlan plan;
  Options options;
  std::vector<std::string> command;  // the trainer command
  int64_t join_timeout_ms = 300000;
  int max_batch_size = 0;   // 0 = options.batch_size
  std::string mps_control;  // nvidia-cuda-mps-control path ("" = PATH)
  // --on-trainer-loss: what a trainer that dies or stops heart-beating does to the job.
  // fail (default, data-parallel jobs): the node's leader fails and the launcher ends the
  // job. continue (sweeps: independent trials): the leader detaches it, reports and counts
  // it, and the others finish; its trainer task reports it and exits 0, so that no launcher
  // (mpirun, srun --kill-on-bad-exit) ends the others.
  bool continue_on_trainer_loss = false;
};

// The variables a trainer gets: torchrun's, Batchcast's address and options, GPU pinning.
EnvList TrainerEnvironment(const TaskContext& t);

// Both return the process exit code and print one line on failure naming the task.
int RunLeaderTask(const TaskContext& t);
int RunTrainerTask(const TaskContext& t);

// True once an abstract Unix socket named `name` listens in this network namespace
// (read from /proc/net/unix; no connection is made).
bool AbstractSocketListens(const std::string& name);

}  // namespace batchcast::run
