// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The process environment, read in one place. Options are BATCHCAST_<KEY> variables the
// options registry reads (options.cc, through BatchcastVariables() below). Every other
// variable Batchcast reads is a row of the table in environment.cc — Batchcast's own
// variables that are not options (logging, the config file, the leader's address, the model
// stage module) and those a launcher sets (ranks, local ranks, the job id, the node name,
// the visible GPUs) — read through the functions here. Nothing else calls getenv or walks
// environ: runtime/CMakeLists.txt (batchcast_check_environment) fails the configure when a
// source of runtime/, launcher/ or bindings/ does.
//
// The view is read-only and reads the live environment on every call (nothing is cached
// but the logging setup, read once at the first log line), so a test sets a variable for
// one scope with ScopedEnv (tests/unit/core/scoped_env.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "batchcast/options.h"
#include "batchcast/status.h"

namespace batchcast::env {

// Every environment variable Batchcast reads by name that is not an option.
enum class Var {
  // Batchcast's own.
  kConfig,              // BATCHCAST_CONFIG
  kDebug,               // BATCHCAST_DEBUG
  kDebugSubsys,         // BATCHCAST_DEBUG_SUBSYS
  kDebugFile,           // BATCHCAST_DEBUG_FILE
  kAddress,             // BATCHCAST_ADDRESS
  kSocket,              // BATCHCAST_SOCKET
  kStageModule,         // BATCHCAST_STAGE_MODULE
  kRunHostname,         // BATCHCAST_RUN_HOSTNAME
  // Set by launchers.
  kRank,                // RANK
  kWorldSize,           // WORLD_SIZE
  kLocalRank,           // LOCAL_RANK
  kOmpiRank,            // OMPI_COMM_WORLD_RANK
  kOmpiSize,            // OMPI_COMM_WORLD_SIZE
  kOmpiLocalRank,       // OMPI_COMM_WORLD_LOCAL_RANK
  kOmpiJobId,           // OMPI_MCA_ess_base_jobid
  kPmixRank,            // PMIX_RANK
  kPmixNamespace,       // PMIX_NAMESPACE
  kPmiRank,             // PMI_RANK
  kPmiSize,             // PMI_SIZE
  kSlurmProcId,         // SLURM_PROCID
  kSlurmLocalId,        // SLURM_LOCALID
  kSlurmJobId,          // SLURM_JOB_ID
  kSlurmdNodeName,      // SLURMD_NODENAME
  kCudaVisibleDevices,  // CUDA_VISIBLE_DEVICES
  kCount,
};

// A row of the table: the variable's name, who sets it, what Batchcast reads it for.
struct VarInfo {
  Var var;
  const char* name;
  const char* set_by;
  const char* use;
};

// The table, in the order of Var.
const std::vector<VarInfo>& Variables();
const char* Name(Var var);

// The value of `var`; nullopt when it is unset or empty.
std::optional<std::string> Get(Var var);

// An integer in [min, max]; nullopt when unset or empty. Any other value is an
// InvalidArgument error naming the variable, its value, the range and who sets it.
Result<std::optional<int64_t>> GetInt(Var var, int64_t min, int64_t max);

// ---- Launcher conventions, each decided here once.

// This process's rank from its launcher: the first of RANK (batchcast-run, torchrun),
// OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID that holds a number; -1 if none.
// For messages and default identities: it never fails.
int LauncherRank();
// This process's rank among the ranks of its node: the first of LOCAL_RANK,
// OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID that is set; nullopt when none is. A set value
// that is not a rank is an error naming it.
Result<std::optional<int>> LauncherLocalRank();
// The launcher's job id: SLURM_JOB_ID, PMIX_NAMESPACE or OMPI_MCA_ess_base_jobid; "" if none.
std::string LauncherJobId();
// Whether an MPI launcher started this process (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK).
bool UnderMpiLauncher();
// The node leader's address that batchcast-run exports: BATCHCAST_ADDRESS, or its older
// name BATCHCAST_SOCKET; nullopt when neither is set.
std::optional<std::string> LeaderAddress();

// ---- For the options registry and the launcher.

// Whether `name` (e.g. "BATCHCAST_DEBUG") is one of Batchcast's own variables of the table:
// the registry does not warn about it as an unknown option.
bool IsOwnVariable(std::string_view name);
// Every variable of the environment as (name, value), in the environment's order: the
// registry takes the BATCHCAST_* ones, batchcast-run detects its launcher in it and passes
// it on to the trainers it starts.
std::vector<std::pair<std::string, std::string>> Snapshot();

// Option `key` (a registry key) as its BATCHCAST_<KEY> variable sets it, parsed by the
// registry as ResolveOptions parses it, into *options (unchanged when the variable is unset;
// an error names the variable). For code that runs without resolved Options (SelectGpu).
// Defined with the registry, in options.cc.
Status ApplyOption(std::string_view key, Options* options);

}  // namespace batchcast::env
