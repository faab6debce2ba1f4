// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The end-of-run summary: per-rank and per-role aggregates of the gathered RankData, and a
// diagnosis that names the bottleneck. Diagnose() is a pure function of the aggregates so
// its rules (documented in docs/telemetry.md, "Diagnosis rules") are unit-testable.
#pragma once

#include <string>
#include <vector>

#include "telemetry/metrics.h"
#include "telemetry/rank_data.h"

namespace batchcast::telemetry {

// Aggregates of one rank over its whole run. NaN marks "not measured" (e.g. data-wait of
// a rank that never waited nor stepped, GPU utilisation without NVML).
struct RankStats {
  int rank = 0;
  int local_rank = 0;
  Role role = Role::kConsumer;
  std::string host;
  double wall_s = 0;
  double samples_per_s = 0;     // received (consumer/both) or produced (leader)
  double batches_per_s = 0;
  double data_wait_pct = 0;     // data_wait / (data_wait + step) × 100; NaN if neither
  double step_ms = 0;           // mean step; NaN if no steps
  double cpu_cores = 0;         // process CPU seconds / wall seconds
  double rss_peak_mib = 0;
  double gpu_util_pct = 0;      // mean over rows; NaN without a GPU
  double stage_s[kNumTimers] = {};  // total seconds per timer
  double worker_threads = 0;    // mean of Gauge::kWorkerThreads (0 if never set)
  double worker_util = 0;       // Σ worker-stage time / (threads × wall); NaN without threads
  int cores_available = 1;
  double samples_produced = 0;
  double samples_received = 0;
  double samples_skipped = 0;
  double bytes[5] = {};         // shm, mpi, h2d, ipc, nccl
  int64_t spans_dropped = 0;
  int pid = 0;
  double cpu_seconds = 0;       // process CPU over the run
  double cpu_energy_j = 0;      // the node's RAPL packages over this rank's run; NaN: n/a
  double gpu_energy_j = 0;      // this rank's GPU over its run; NaN: n/a
  bool is_consumer() const { return role != Role::kLeader; }
  bool is_leader() const { return role != Role::kConsumer; }
};

struct RoleStats {
  Role role = Role::kConsumer;
  int ranks = 0;
  double samples_per_s = 0;      // sum over the role's ranks
  double batches_per_s = 0;
  double data_wait_pct = 0;      // mean over ranks that measured it; NaN if none
  double step_ms = 0;            // mean; NaN if none
  double cpu_cores = 0;          // mean per rank
  double rss_peak_mib = 0;       // max over ranks
  double gpu_util_pct = 0;       // mean over ranks with a GPU; NaN if none
};

// The trials of the job's leaders and what they cost (docs/telemetry.md "Cost model").
struct CostSummary {
  int trials = 0;                // records in the leaders' ledgers
  int trials_died = 0;           // ended "died" or "silent" (killed, crashed, stopped)
  double samples_received = 0;   // Σ over trials
  double samples_published = 0;  // Σ over leaders: samples that reached >= 1 trial
  double epochs_published = 0;   // Σ over leaders
  double leader_cpu_s = 0;       // Σ leader CPU apportioned to trials
  double unattributed_cpu_s = 0; // leader CPU in intervals nobody received anything
  double own_cpu_s = 0;          // Σ trials' own CPU (those readable)
  // What every trial decoding alone would have spent: each trial's samples at the leaders'
  // CPU per published sample; saved = alone - leader_cpu_s; sharing = received / published.
  double alone_cpu_s = 0;
  double saved_cpu_s = 0;
  double sharing = 0;
  // Energy of the nodes (RAPL packages; per host the rank that measured longest) and of
  // the GPUs; NaN when not measured, with the reason in energy_note.
  double cpu_energy_j = 0, gpu_energy_j = 0;
  double joules_per_epoch = 0, joules_per_1000_samples = 0;
  std::string energy_note;
};

struct JobSummary {
  std::string experiment, workload, run;
  double wall_s = 0;  // longest rank
  std::vector<RankStats> ranks;
  std::vector<RoleStats> roles;  // only roles present, in Role order
  CostSummary cost;
};

enum class Bottleneck { kUnknown, kInput, kCompute };

struct Diagnosis {
  Bottleneck bottleneck = Bottleneck::kUnknown;
  std::string stage;               // the leader stage blamed when input-bound ("decode", ...)
  std::string headline;            // one sentence, e.g. "trainers waited 38% ...: consider ..."
  std::vector<std::string> notes;  // further findings (imbalance, skips, dropped spans)
};

// Thresholds of the diagnosis rules (docs/telemetry.md).
inline constexpr double kInputBoundWaitPct = 10.0;   // mean consumer data-wait at/above: input-bound
inline constexpr double kWorkersSaturated = 0.85;    // worker utilisation at/above: saturated
inline constexpr double kCpuSaturated = 0.90;        // node CPU use / cores at/above: saturated
inline constexpr double kImbalancePts = 20.0;        // consumer data-wait spread worth a note
inline constexpr double kSpareWorkersBelow = 0.30;   // compute-bound + workers below: spare capacity
inline constexpr double kGpuIdleBelowPct = 50.0;     // compute-bound + GPU below: host-bound step

inline constexpr double kBackpressureNotePct = 30.0;  // leader waiting for slots: a note

RankStats ComputeRankStats(const RankData& data);
// The job's per-trial cost from the leaders' ledgers and the ranks' energy.
CostSummary SummarizeCost(const std::vector<RankData>& ranks);
JobSummary Summarize(const std::vector<RankData>& ranks);
Diagnosis Diagnose(const JobSummary& summary);
// The printed table: per role, optionally per rank (up to 16 ranks), then the diagnosis.
std::string FormatSummary(const JobSummary& summary, const Diagnosis& diagnosis);
// Every rank's annotations (Collector::Annotate), headed by the rank; "" when none has any.
std::string FormatAnnotations(const std::vector<RankData>& ranks);
// One line per named series (Collector::Record): rank, name, points, first and last value;
// at most 64 lines (then a count of the rest); "" when no rank recorded any.
std::string FormatNamedSeries(const std::vector<RankData>& ranks);
// The per-trial table of every leader's ledger, the cost and saving, and the energy lines;
// "" when no leader fed a trial and no energy was measured.
std::string FormatTrials(const std::vector<RankData>& ranks, const CostSummary& cost);
std::string_view BottleneckName(Bottleneck b);

}  // namespace batchcast::telemetry
