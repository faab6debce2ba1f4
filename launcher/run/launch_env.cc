// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "run/launch_env.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <numeric>

#include "core/environment.h"
#include "core/errors.h"

namespace batchcast::run {
namespace {

const std::string* Get(const EnvMap& env, const std::string& key) {
  auto it = env.find(key);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

Result<int> GetInt(const EnvMap& env, const std::string& key) {
  const std::string* v = Get(env, key);
  if (v == nullptr) return NotFoundError("launch: environment variable {} is not set", key);
  char* end = nullptr;
  long x = std::strtol(v->c_str(), &end, 10);
  if (end == v->c_str() || *end != '\0' || x < 0 || x > (1 << 24))
    return InvalidArgumentError("launch: environment variable {}='{}' is not a task count or rank",
                                key, *v);
  return static_cast<int>(x);
}

std::string SanitizeId(std::string id) {
  for (auto& c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  if (id.size() > 40) id = id.substr(id.size() - 40);
  return id;
}

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

// Checks the shape and this task's place in it.
Status CheckShape(const LaunchEnv& e) {
  if (e.tasks_per_node.empty()) return InternalError("launch: no nodes in the job shape");
  int sum = std::accumulate(e.tasks_per_node.begin(), e.tasks_per_node.end(), 0);
  if (sum != e.world_size)
    return InvalidArgumentError(
        "launch ({}): tasks per node add up to {}, but the job has {} tasks",
        LauncherName(e.launcher), sum, e.world_size);
  if (e.node_id >= e.num_nodes())
    return InvalidArgumentError("launch ({}): node id {} is outside the job's {} nodes",
                                LauncherName(e.launcher), e.node_id, e.num_nodes());
  if (e.local_rank >= e.local_size())
    return InvalidArgumentError("launch ({}): local rank {} is outside node {}'s {} tasks",
                                LauncherName(e.launcher), e.local_rank, e.node_id, e.local_size());
  if (!e.hosts.empty() && e.hosts.size() != e.tasks_per_node.size())
    return InvalidArgumentError("launch ({}): {} hosts in the node list but {} nodes of tasks",
                                LauncherName(e.launcher), e.hosts.size(), e.tasks_per_node.size());
  return Status::Ok();
}

Status DetectSlurm(const EnvMap& env, LaunchEnv* e) {
  BC_ASSIGN_OR_RETURN(e->rank, GetInt(env, "SLURM_PROCID"));
  BC_ASSIGN_OR_RETURN(e->local_rank, GetInt(env, "SLURM_LOCALID"));
  BC_ASSIGN_OR_RETURN(e->node_id, GetInt(env, "SLURM_NODEID"));
  auto n = GetInt(env, "SLURM_STEP_NUM_TASKS");
  if (!n.ok()) n = GetInt(env, "SLURM_NTASKS");
  if (!n.ok()) return n.status();
  e->world_size = n.value();
  const std::string* tpn = Get(env, "SLURM_STEP_TASKS_PER_NODE");
  if (tpn == nullptr) tpn = Get(env, "SLURM_TASKS_PER_NODE");
  if (tpn == nullptr)
    return NotFoundError(
        "launch (slurm): neither SLURM_STEP_TASKS_PER_NODE nor "
        "SLURM_TASKS_PER_NODE is set; run batchcast-run under srun");
  BC_ASSIGN_OR_RETURN(e->tasks_per_node, ExpandTasksPerNode(*tpn));
  const std::string* nodes = Get(env, "SLURM_STEP_NODELIST");
  if (nodes == nullptr) nodes = Get(env, "SLURM_JOB_NODELIST");
  if (nodes != nullptr) {
    BC_ASSIGN_OR_RETURN(e->hosts, ExpandHostList(*nodes));
  }
  const std::string* step = Get(env, "SLURM_STEP_ID");
  e->job_id = *Get(env, "SLURM_JOB_ID") + "." + (step ? *step : std::string("0"));
  return Status::Ok();
}

// Open MPI and torchrun-style scripts give the local size only: ranks must be placed in
// blocks of the same size per node (mpirun's default --map-by slot with equal slots).
Status FromUniformBlocks(const EnvMap& env, const std::string& num_nodes_var, LaunchEnv* e) {
  const char* var =
      e->launcher == Launcher::kOpenMpi ? "OMPI_COMM_WORLD_LOCAL_SIZE" : "LOCAL_WORLD_SIZE";
  BC_ASSIGN_OR_RETURN(int local_size, GetInt(env, var));
  if (local_size == 0 || e->world_size % local_size != 0 || e->local_rank != e->rank % local_size)
    return InvalidArgumentError(
        "launch ({}): rank {} has local rank {} of {} in a job of {}; batchcast-run needs the same "
        "number of tasks on every node, placed in blocks (mpirun --map-by slot, or use srun, "
        "which reports any layout)",
        LauncherName(e->launcher), e->rank, e->local_rank, local_size, e->world_size);
  int nodes = e->world_size / local_size;
  if (auto declared = GetInt(env, num_nodes_var); declared.ok() && declared.value() != nodes)
    return InvalidArgumentError(
        "launch ({}): {} nodes with {} tasks each do not make {} tasks; batchcast-run needs the "
        "same number of tasks on every node (or use srun)",
        LauncherName(e->launcher), declared.value(), local_size, e->world_size);
  e->node_id = e->rank / local_size;
  e->tasks_per_node.assign(static_cast<size_t>(nodes), local_size);
  return Status::Ok();
}

Status DetectOpenMpi(const EnvMap& env, LaunchEnv* e) {
  BC_ASSIGN_OR_RETURN(e->rank, GetInt(env, "OMPI_COMM_WORLD_RANK"));
  BC_ASSIGN_OR_RETURN(e->world_size, GetInt(env, "OMPI_COMM_WORLD_SIZE"));
  BC_ASSIGN_OR_RETURN(e->local_rank, GetInt(env, "OMPI_COMM_WORLD_LOCAL_RANK"));
  BC_RETURN_IF_ERROR(FromUniformBlocks(env, "OMPI_MCA_orte_num_nodes", e));
  const std::string* id = Get(env, "OMPI_MCA_ess_base_jobid");
  if (id == nullptr) id = Get(env, "PMIX_NAMESPACE");
  e->job_id = id ? *id : "";
  if (e->num_nodes() == 1) {
    e->hosts = {e->hostname};
  } else if (const std::string* nodes = Get(env, "SLURM_JOB_NODELIST")) {
    // mpirun inside a Slurm allocation maps nodes in allocation order.
    auto hosts = ExpandHostList(*nodes);
    if (hosts.ok() && static_cast<int>(hosts.value().size()) == e->num_nodes())
      e->hosts = hosts.value();
  }
  return Status::Ok();
}

Status DetectTorchrun(const EnvMap& env, LaunchEnv* e) {
  BC_ASSIGN_OR_RETURN(e->rank, GetInt(env, "RANK"));
  BC_ASSIGN_OR_RETURN(e->world_size, GetInt(env, "WORLD_SIZE"));
  BC_ASSIGN_OR_RETURN(e->local_rank, GetInt(env, "LOCAL_RANK"));
  BC_RETURN_IF_ERROR(FromUniformBlocks(env, "GROUP_WORLD_SIZE", e));
  if (e->num_nodes() == 1) e->hosts = {e->hostname};
  if (const std::string* a = Get(env, "MASTER_ADDR"); a != nullptr)
    e->node0_host = *a;  // rank 0 runs on node 0 in block placement
  const std::string* run_id = Get(env, "TORCHELASTIC_RUN_ID");
  const std::string* addr = Get(env, "MASTER_ADDR");
  const std::string* port = Get(env, "MASTER_PORT");
  if (run_id != nullptr)
    e->job_id = *run_id;
  else if (addr != nullptr && port != nullptr)
    e->job_id = *addr + "-" + *port;
  return Status::Ok();
}

}  // namespace

const char* LauncherName(Launcher l) {
  switch (l) {
    case Launcher::kSlurm:
      return "slurm";
    case Launcher::kOpenMpi:
      return "mpirun";
    case Launcher::kTorchrun:
      return "torchrun";
    case Launcher::kNone:
      return "none";
  }
  return "?";
}

EnvMap CurrentEnvironment() {
  EnvMap env;
  for (auto& [name, value] : env::Snapshot()) env[name] = std::move(value);
  return env;
}

Result<LaunchEnv> DetectLaunchEnv(const EnvMap& env) {
  LaunchEnv e;
  e.hostname = Hostname();
  if (const std::string* h = Get(env, "BATCHCAST_RUN_HOSTNAME")) e.hostname = *h;  // tests
  Status st;
  if (Get(env, "OMPI_COMM_WORLD_RANK") != nullptr) {
    e.launcher = Launcher::kOpenMpi;
    st = DetectOpenMpi(env, &e);
  } else if (Get(env, "SLURM_PROCID") != nullptr && Get(env, "SLURM_STEP_NUM_TASKS") != nullptr) {
    e.launcher = Launcher::kSlurm;
    st = DetectSlurm(env, &e);
  } else if (Get(env, "RANK") != nullptr && Get(env, "WORLD_SIZE") != nullptr) {
    e.launcher = Launcher::kTorchrun;
    st = DetectTorchrun(env, &e);
  } else if (Get(env, "SLURM_JOB_ID") != nullptr && Get(env, "SLURM_STEP_NUM_TASKS") == nullptr) {
    return FailedPreconditionError(
        "launch: SLURM_JOB_ID is set but this is not a job step (no SLURM_STEP_NUM_TASKS); start "
        "batchcast-run with srun inside the batch script, e.g. srun batchcast-run -- ./train");
  } else {
    e.tasks_per_node = {1};
    e.hosts = {e.hostname};
    e.job_id = "pid" + std::to_string(getpid());
  }
  if (!st.ok()) return st;
  e.job_id = SanitizeId(e.job_id);
  if (e.node0_host.empty() && !e.hosts.empty()) e.node0_host = e.hosts[0];
  BC_RETURN_IF_ERROR(CheckShape(e));
  return e;
}

Result<std::vector<std::string>> ExpandHostList(const std::string& list) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < list.size()) {
    size_t j = i;
    while (j < list.size() && list[j] != ',' && list[j] != '[') ++j;
    std::string prefix = list.substr(i, j - i);
    if (j < list.size() && list[j] == '[') {
      size_t close = list.find(']', j);
      if (close == std::string::npos)
        return InvalidArgumentError("host list '{}': '[' at position {} is never closed", list, j);
      std::string ranges = list.substr(j + 1, close - j - 1);
      size_t k = 0;
      while (k <= ranges.size()) {
        size_t comma = ranges.find(',', k);
        if (comma == std::string::npos) comma = ranges.size();
        std::string r = ranges.substr(k, comma - k);
        size_t dash = r.find('-');
        std::string lo = r.substr(0, dash),
                    hi = dash == std::string::npos ? lo : r.substr(dash + 1);
        if (lo.empty() || hi.empty() || lo.find_first_not_of("0123456789") != std::string::npos ||
            hi.find_first_not_of("0123456789") != std::string::npos)
          return InvalidArgumentError("host list '{}': bad range '{}'", list, r);
        long a = std::stol(lo), b = std::stol(hi);
        if (b < a || b - a > 100000)
          return InvalidArgumentError("host list '{}': bad range '{}'", list, r);
        for (long x = a; x <= b; ++x) {
          std::string num = std::to_string(x);
          if (num.size() < lo.size()) num.insert(0, lo.size() - num.size(), '0');  // zero padding
          out.push_back(prefix + num);
        }
        k = comma + 1;
      }
      j = close + 1;
      // Text after ']' up to the next ',' is a suffix of every host in the range (rare).
      size_t end = list.find(',', j);
      if (end == std::string::npos) end = list.size();
      if (end > j)
        return InvalidArgumentError("host list '{}': text after ']' is not supported", list);
      i = end + 1;
    } else {
      if (!prefix.empty()) out.push_back(prefix);
      i = j + 1;
    }
  }
  if (out.empty()) return InvalidArgumentError("host list '{}' names no host", list);
  return out;
}

Result<std::vector<int>> ExpandTasksPerNode(const std::string& spec) {
  std::vector<int> out;
  size_t i = 0;
  while (i < spec.size()) {
    size_t comma = spec.find(',', i);
    if (comma == std::string::npos) comma = spec.size();
    std::string item = spec.substr(i, comma - i);
    int count = 0, repeat = 1;
    char tail = 0;
    if (std::sscanf(item.c_str(), "%d(x%d)%c", &count, &repeat, &tail) == 2 ||
        (std::sscanf(item.c_str(), "%d%c", &count, &tail) == 1 && (repeat = 1))) {
      if (count < 0 || repeat < 1 || repeat > 100000)
        return InvalidArgumentError("tasks per node '{}': bad item '{}'", spec, item);
      out.insert(out.end(), static_cast<size_t>(repeat), count);
    } else {
      return InvalidArgumentError("tasks per node '{}': bad item '{}' (expected N or N(xM))", spec,
                                  item);
    }
    i = comma + 1;
  }
  if (out.empty()) return InvalidArgumentError("tasks per node '{}' is empty", spec);
  return out;
}

}  // namespace batchcast::run
