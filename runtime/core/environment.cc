// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The one file that reads the process environment (environment.h). No logging here: the
// logger reads its own setup through this file.
#include "core/environment.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>

#include "core/errors.h"

extern char** environ;

namespace batchcast::env {
namespace {

constexpr const char* kBatchcastRun = "batchcast-run";
constexpr std::string_view kOwnPrefix = "BATCHCAST_";

const std::vector<VarInfo>& Table() {
  static const std::vector<VarInfo> kTable = {
      {Var::kConfig, "BATCHCAST_CONFIG", "the user",
       "config file of options, read before BATCHCAST_<KEY> (docs/configuration.md)"},
      {Var::kDebug, "BATCHCAST_DEBUG", "the user", "log level: ERROR, WARN, INFO, DEBUG or TRACE"},
      {Var::kDebugSubsys, "BATCHCAST_DEBUG_SUBSYS", "the user",
       "subsystems that log, e.g. INIT,SHM (^ excludes)"},
      {Var::kDebugFile, "BATCHCAST_DEBUG_FILE", "the user",
       "log file pattern instead of stderr (%h host, %p pid, %r rank)"},
      {Var::kAddress, "BATCHCAST_ADDRESS", kBatchcastRun,
       "the node leader's address a trainer attaches to (AttachFromEnvironment, "
       "batchcast.Consumer, train-many)"},
      {Var::kSocket, "BATCHCAST_SOCKET", "the user",
       "older name of BATCHCAST_ADDRESS, read when BATCHCAST_ADDRESS is unset"},
      {Var::kStageModule, "BATCHCAST_STAGE_MODULE", "the user",
       "the LibTorch model stage module, tried before the build's (docs/model-stage.md)"},
      {Var::kRunHostname, "BATCHCAST_RUN_HOSTNAME", "tests",
       "the host name batchcast-run uses instead of gethostname (launcher tests)"},
      {Var::kRank, "RANK", "batchcast-run, torchrun",
       "this trainer's rank (mode=shard's default rank; consumer names)"},
      {Var::kWorldSize, "WORLD_SIZE", "batchcast-run, torchrun", "mode=shard's default world size"},
      {Var::kLocalRank, "LOCAL_RANK", "batchcast-run, torchrun",
       "this trainer's rank on its node (GPU selection, telemetry)"},
      {Var::kOmpiRank, "OMPI_COMM_WORLD_RANK", "mpirun (Open MPI)", "the rank in messages"},
      {Var::kOmpiSize, "OMPI_COMM_WORLD_SIZE", "mpirun (Open MPI)",
       "whether MPI started this process"},
      {Var::kOmpiLocalRank, "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun (Open MPI)",
       "the rank on the node (GPU selection)"},
      {Var::kOmpiJobId, "OMPI_MCA_ess_base_jobid", "mpirun (Open MPI)",
       "the job id in segment and socket names"},
      {Var::kPmixRank, "PMIX_RANK", "PMIx (mpirun, srun --mpi=pmix)",
       "the rank in messages; whether MPI started this process"},
      {Var::kPmixNamespace, "PMIX_NAMESPACE", "PMIx (mpirun, srun --mpi=pmix)",
       "the job id in segment and socket names"},
      {Var::kPmiRank, "PMI_RANK", "PMI (MPICH, srun --mpi=pmi2)", "the rank in messages"},
      {Var::kPmiSize, "PMI_SIZE", "PMI (MPICH, srun --mpi=pmi2)",
       "whether MPI started this process"},
      {Var::kSlurmProcId, "SLURM_PROCID", "srun", "the rank in messages"},
      {Var::kSlurmLocalId, "SLURM_LOCALID", "srun", "the rank on the node (GPU selection)"},
      {Var::kSlurmJobId, "SLURM_JOB_ID", "Slurm", "the job id in segment and socket names"},
      {Var::kSlurmdNodeName, "SLURMD_NODENAME", "srun", "the node's name in consumer names"},
      {Var::kCudaVisibleDevices, "CUDA_VISIBLE_DEVICES", "the launcher or the user",
       "the GPUs this process sees (GPU selection, telemetry's NVML device)"},
  };
  return kTable;
}

// The first of `vars` that holds an integer in [min, max] (skipping unusable values when
// `lenient`), with the error of the first unusable one otherwise.
Result<std::optional<int64_t>> FirstInt(std::initializer_list<Var> vars, int64_t min,
                                        int64_t max, bool lenient) {
  for (Var v : vars) {
    Result<std::optional<int64_t>> r = GetInt(v, min, max);
    if (!r.ok() && lenient) continue;
    if (!r.ok() || r->has_value()) return r;
  }
  return std::optional<int64_t>();
}

}  // namespace

const std::vector<VarInfo>& Variables() { return Table(); }

const char* Name(Var var) { return Table()[static_cast<size_t>(var)].name; }

std::optional<std::string> Get(Var var) {
  const char* v = std::getenv(Name(var));
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

Result<std::optional<int64_t>> GetInt(Var var, int64_t min, int64_t max) {
  std::optional<std::string> text = Get(var);
  if (!text) return std::optional<int64_t>();
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(text->c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || x < min || x > max) {
    const VarInfo& info = Table()[static_cast<size_t>(var)];
    return InvalidArgumentError("environment variable {}='{}' is not an integer from {} to {} "
                                "(set by {}: {})", info.name, *text, min, max, info.set_by,
                                info.use);
  }
  return std::optional<int64_t>(x);
}

int LauncherRank() {
  auto r = FirstInt({Var::kRank, Var::kOmpiRank, Var::kPmixRank, Var::kPmiRank,
                     Var::kSlurmProcId}, 0, INT32_MAX, /*lenient=*/true);
  return r.ok() && r->has_value() ? static_cast<int>(**r) : -1;
}

Result<std::optional<int>> LauncherLocalRank() {
  BC_ASSIGN_OR_RETURN(std::optional<int64_t> r,
                      FirstInt({Var::kLocalRank, Var::kOmpiLocalRank, Var::kSlurmLocalId}, 0,
                               INT32_MAX, /*lenient=*/false));
  if (!r) return std::optional<int>();
  return std::optional<int>(static_cast<int>(*r));
}

std::string LauncherJobId() {
  for (Var v : {Var::kSlurmJobId, Var::kPmixNamespace, Var::kOmpiJobId})
    if (std::optional<std::string> id = Get(v)) return *id;
  return "";
}

bool UnderMpiLauncher() {
  return Get(Var::kOmpiSize) || Get(Var::kPmiSize) || Get(Var::kPmixRank);
}

std::optional<std::string> LeaderAddress() {
  if (std::optional<std::string> a = Get(Var::kAddress)) return a;
  return Get(Var::kSocket);
}

bool IsOwnVariable(std::string_view name) {
  if (name.rfind(kOwnPrefix, 0) != 0) return false;
  for (const VarInfo& v : Table())
    if (name == v.name) return true;
  return false;
}

std::vector<std::pair<std::string, std::string>> Snapshot() {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    const std::string_view kv(*p);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    out.emplace_back(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return out;
}

}  // namespace batchcast::env
