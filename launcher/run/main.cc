// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// batchcast-run [run options] [Batchcast options] -- <trainer command...>
//
// Runs as every task of a job step (srun, mpirun, torchrun-style scripts). Per node, local
// task 0 becomes the leader (reads and decodes once into shared memory) and the other tasks
// run the trainer command as the trainers-only world, with torchrun's variables. See
// docs/launch.md.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "batchcast/options.h"
#include "batchcast/version.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/option_scope.h"
#include "core/suggest.h"
#include "run/gpu.h"
#include "run/launch_env.h"
#include "run/leader_task.h"
#include "run/placement.h"

namespace batchcast::run {
namespace {

constexpr const char* kUsage =
    R"(Usage: batchcast-run [run options] [Batchcast options] -- TRAINER COMMAND...

Run as every task of a job step (srun, mpirun, or a torchrun-style launcher that sets RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE). Local task 0 of each node leads: it reads and
decodes the dataset once into shared memory. Every other task runs TRAINER COMMAND with
RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT for the trainers-only
world, BATCHCAST_ADDRESS and BATCHCAST_* options (attach with AttachFromEnvironment).

Run options:
  --leader-trains          local task 0 also runs a trainer (no extra task per node)
  --trainers-per-gpu K     collocate up to K trainers on each GPU (default 1 when GPUs are used)
  --gpus auto|none|LIST    GPUs to place trainers on: indices and GPU-/MIG- UUIDs (default auto:
                           CUDA_VISIBLE_DEVICES if set, else every GPU nvidia-smi -L lists)
  --mps                    start a CUDA MPS daemon per node for the collocated trainers
  --master-addr HOST       MASTER_ADDR for the trainers (default: the host of node 0)
  --master-port PORT       MASTER_PORT (default: 29500 + hash(job id) mod 3000)
  --join-timeout SECONDS   how long the leader waits for its trainers (default 300)
  --on-trainer-loss fail|continue
                           a trainer that dies or stops heart-beating: fail the job (default;
                           data-parallel jobs), or detach it, report and count it and let the
                           others finish (sweeps of independent trials; its task exits 0)
  --max-batch-size N       largest batch a trainer on the node asks for (default --batch-size)
  --nvidia-smi PATH        nvidia-smi to list GPUs with (default: from PATH)
  --mps-control PATH       nvidia-cuda-mps-control to use (default: from PATH)
  --dry-run                print this task's placement and exit without starting anything
  --version                print batchcast-run's version
  -h, --help               this text
Exit codes: 0 ok, 1 runtime error, 2 usage error; a trainer task exits with its trainer's
status (docs/troubleshooting.md).
Batchcast options (--dataset, --batch-size, --epochs, --job-id, ...): `batchcast info -c`.
)";

struct Args {
  RunConfig config;
  int64_t join_timeout_s = 300;
  int max_batch_size = 0;
  bool continue_on_trainer_loss = false;
  std::string nvidia_smi, mps_control;
  bool dry_run = false;
  std::vector<std::string> batchcast_flags;
  std::vector<std::string> command;
};

Result<int> ParseInt(const std::string& flag, const std::string& v, int lo, int hi) {
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < lo || x > hi)
    return InvalidArgumentError("batchcast-run: {} '{}' must be an integer in [{}, {}]", flag, v,
                                lo, hi);
  return static_cast<int>(x);
}

// Splits "--flag=value" / "--flag value" for the run options; the rest goes to Batchcast.
Result<Args> ParseArgs(int argc, char** argv) {
  Args a;
  std::vector<std::string> words(argv + 1, argv + argc);
  size_t i = 0;
  auto value = [&](const std::string& flag, std::string* inline_value) -> Result<std::string> {
    if (!inline_value->empty()) return *inline_value;
    if (i + 1 >= words.size() || words[i + 1] == "--")
      return InvalidArgumentError("batchcast-run: {} needs a value", flag);
    return words[++i];
  };
  for (; i < words.size(); ++i) {
    std::string w = words[i];
    if (w == "--") {
      a.command.assign(words.begin() + static_cast<long>(i) + 1, words.end());
      break;
    }
    std::string flag = w, inline_value;
    if (size_t eq = w.find('='); eq != std::string::npos && w.rfind("--", 0) == 0) {
      flag = w.substr(0, eq);
      inline_value = w.substr(eq + 1);
    }
    if (flag == "-h" || flag == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (flag == "--version") {
      std::printf("batchcast-run %s\n", Version());
      std::exit(0);
    } else if (flag == "--trainers-per-gpu") {
      BC_ASSIGN_OR_RETURN(std::string v, value(flag, &inline_value));
      BC_ASSIGN_OR_RETURN(a.config.trainers_per_gpu, ParseInt(flag, v, 1, 1024));
    } else if (flag == "--gpus") {
      BC_ASSIGN_OR_RETURN(a.config.gpus, value(flag, &inline_value));
    } else if (flag == "--mps") {
      a.config.mps = true;
    } else if (flag == "--master-addr") {
      BC_ASSIGN_OR_RETURN(a.config.master_addr, value(flag, &inline_value));
    } else if (flag == "--master-port") {
      BC_ASSIGN_OR_RETURN(std::string v, value(flag, &inline_value));
      BC_ASSIGN_OR_RETURN(a.config.master_port, ParseInt(flag, v, 1, 65535));
    } else if (flag == "--join-timeout") {
      BC_ASSIGN_OR_RETURN(std::string v, value(flag, &inline_value));
      BC_ASSIGN_OR_RETURN(int s, ParseInt(flag, v, 1, 7 * 24 * 3600));
      a.join_timeout_s = s;
    } else if (flag == "--max-batch-size") {
      BC_ASSIGN_OR_RETURN(std::string v, value(flag, &inline_value));
      BC_ASSIGN_OR_RETURN(a.max_batch_size, ParseInt(flag, v, 1, 1 << 20));
    } else if (flag == "--on-trainer-loss") {
      BC_ASSIGN_OR_RETURN(std::string v, value(flag, &inline_value));
      if (v != "fail" && v != "continue")
        return InvalidArgumentError(
            "batchcast-run: --on-trainer-loss '{}' is neither 'fail' (a lost trainer fails the "
            "job: data-parallel training) nor 'continue' (it is reported and the others "
            "finish: a sweep of independent trials)", v);
      a.continue_on_trainer_loss = v == "continue";
    } else if (flag == "--nvidia-smi") {
      BC_ASSIGN_OR_RETURN(a.nvidia_smi, value(flag, &inline_value));
    } else if (flag == "--mps-control") {
      BC_ASSIGN_OR_RETURN(a.mps_control, value(flag, &inline_value));
    } else if (flag == "--dry-run") {
      a.dry_run = true;
    } else {
      a.batchcast_flags.push_back(w);
    }
  }
  if (a.command.empty() && !a.dry_run)
    return InvalidArgumentError(
        "batchcast-run: no trainer command; usage: batchcast-run [options] -- TRAINER COMMAND "
        "(see batchcast-run --help)");
  return a;
}

void PrintPlan(const TaskContext& t) {
  const TaskPlan& p = t.plan;
  std::printf(
      "batchcast-run plan: launcher=%s task=%d/%d host=%s node=%d/%d local=%d/%d role=%s "
      "trainer_rank=%d world=%d local_rank=%d local_world=%d master=%s:%d "
      "socket=@%s gpu=%s mps=%s\n",
      LauncherName(t.env.launcher), t.env.rank, t.env.world_size, t.env.hostname.c_str(), p.node_id,
      t.env.num_nodes(), t.env.local_rank, t.env.local_size(), RoleName(p.role), p.trainer_rank,
      p.trainer_world_size, p.trainer_local_rank, p.trainers_on_node, p.master_addr.c_str(),
      p.master_port, p.socket_name.c_str(),
      p.cuda_visible_devices.empty() ? "-" : p.cuda_visible_devices.c_str(),
      p.mps_pipe_dir.empty() ? "off" : p.mps_pipe_dir.c_str());
  std::fflush(stdout);
}

Result<TaskContext> Prepare(int argc, char** argv, bool* dry_run) {
  BC_ASSIGN_OR_RETURN(Args a, ParseArgs(argc, argv));
  *dry_run = a.dry_run;
  std::vector<std::string> rest;
  BC_ASSIGN_OR_RETURN(Options options, ResolveOptions(a.batchcast_flags, &rest));
  if (!rest.empty()) {
    static const std::vector<std::string> kRunFlags = {
        "--trainers-per-gpu", "--gpus", "--mps", "--master-addr",
        "--master-port", "--join-timeout", "--max-batch-size", "--on-trainer-loss",
        "--nvidia-smi", "--mps-control",
        "--dry-run", "--help", "--version"};
    std::string best = ClosestMatch(rest[0].substr(0, rest[0].find('=')), kRunFlags);
    return InvalidArgumentError("batchcast-run: unexpected word '{}' before '--'{} (see --help)",
                                rest[0], best.empty() ? "" : " (did you mean '" + best + "'?)");
  }
  BC_RETURN_IF_ERROR(ValidateOptions(options));
  // Every task checks (a trainer task must not wait for a leader that refuses them): 'rank'
  // and 'world_size' would give every trainer the same shard, for one.
  BC_RETURN_IF_ERROR(CheckFrontDoorOptions(options, FrontDoor::kLauncher));
  EnvMap env = CurrentEnvironment();
  BC_ASSIGN_OR_RETURN(LaunchEnv launch, DetectLaunchEnv(env));
  TaskContext t;
  t.env = launch;
  t.config = a.config;
  t.config.leader_trains = options.leader_trains;
  t.config.job_id = options.job_id;
  if (auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end())
    t.config.visible_devices = it->second;
  std::vector<GpuDevice> gpus;
  if (t.config.gpus != "none") gpus = DetectGpus(a.nvidia_smi);
  BC_ASSIGN_OR_RETURN(t.plan, PlanTask(launch, t.config, gpus, getuid()));
  if (t.plan.leads() && options.dataset.empty() && !a.dry_run)
    return InvalidArgumentError(
        "batchcast-run: no dataset; the leader needs --dataset FILE.h5 (or BATCHCAST_DATASET)");
  t.options = options;
  t.command = a.command;
  t.join_timeout_ms = a.join_timeout_s * 1000;
  t.max_batch_size = a.max_batch_size;
  t.continue_on_trainer_loss = a.continue_on_trainer_loss;
  t.mps_control = a.mps_control;
  return t;
}

}  // namespace
}  // namespace batchcast::run

int main(int argc, char** argv) {
  using namespace batchcast::run;
  bool dry_run = false;
  auto t = Prepare(argc, argv, &dry_run);
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", t.status().message().c_str());
    return 2;
  }
  batchcast::log::SetRank(t.value().env.rank, t.value().env.local_rank);
  if (dry_run) {
    PrintPlan(t.value());
    return 0;
  }
  return t.value().plan.leads() ? RunLeaderTask(t.value()) : RunTrainerTask(t.value());
}
