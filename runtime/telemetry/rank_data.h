// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// What one rank's collector hands to the sinks at the end of a job: its tags, its time
// series (a fixed column layout, one row per sampling interval) and its lifecycle spans.
// Rank 0 receives every rank's RankData over MPI (Serialize/Deserialize) and writes them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "batchcast/status.h"
#include "telemetry/metrics.h"
#include "telemetry/trial_ledger.h"

namespace batchcast::telemetry {

// Experiment-tracker style identity of a rank.
struct Tags {
  std::string experiment;  // e.g. the sweep ("resnet-sweep-3")
  std::string workload;    // a set of collocated runs sharing one stream
  std::string run;         // this run / trial
  std::string host;        // empty: gethostname()
  int rank = 0;            // rank in the job's communicator
  int local_rank = 0;      // rank on the node
  Role role = Role::kConsumer;
  int gpu = -1;            // NVML device index; -1: first of CUDA_VISIBLE_DEVICES, else local_rank
};

// The time-series columns, in order:
//   time_s | one per Counter (cumulative) | <timer>_ns, <timer>_count per Timer (cumulative)
//   | one per Gauge (interval mean) | cpu_cores | rss_bytes | gpu_util_pct | gpu_mem_bytes
//   | cpu_energy_j | gpu_energy_j | node_cpu_s
// cpu_cores is the interval's process CPU time / wall time (1.0 = one core busy). The GPU
// columns are NaN when NVML is absent (sinks then omit them: absent, never zero). The energy
// columns are cumulative joules since the collector started (the node's RAPL packages, the
// rank's GPU), NaN and omitted when the machine does not tell (RankData::*_energy_source
// says why); node_cpu_s is the node's busy CPU seconds since the start (/proc/stat), the
// denominator of the energy model.
namespace col {
inline constexpr int kTime = 0;
inline constexpr int kCounters = 1;
inline constexpr int kTimerNs = kCounters + kNumCounters;
inline constexpr int kTimerCount = kTimerNs + kNumTimers;
inline constexpr int kGauges = kTimerCount + kNumTimers;
inline constexpr int kCpuCores = kGauges + kNumGauges;
inline constexpr int kRssBytes = kCpuCores + 1;
inline constexpr int kGpuUtil = kRssBytes + 1;
inline constexpr int kGpuMem = kGpuUtil + 1;
inline constexpr int kCpuEnergy = kGpuMem + 1;
inline constexpr int kGpuEnergy = kCpuEnergy + 1;
inline constexpr int kNodeCpu = kGpuEnergy + 1;
inline constexpr int kNum = kNodeCpu + 1;
inline constexpr int Counter(telemetry::Counter c) { return kCounters + static_cast<int>(c); }
inline constexpr int TimerNs(telemetry::Timer t) { return kTimerNs + static_cast<int>(t); }
inline constexpr int TimerCount(telemetry::Timer t) { return kTimerCount + static_cast<int>(t); }
inline constexpr int Gauge(telemetry::Gauge g) { return kGauges + static_cast<int>(g); }
}  // namespace col

// "time_s", "batches_received", "decode_ns", "decode_count", "cpu_cores", ...
std::string ColumnName(int column);
// True for columns holding whole numbers (counters, timers, rss, gpu memory).
bool ColumnIsInteger(int column);
// True for the GPU columns (omitted from outputs when the rank has no GPU).
inline bool ColumnIsGpu(int column) { return column == col::kGpuUtil || column == col::kGpuMem; }
struct RankData;
// False for a column the rank did not measure (GPU columns without a GPU, energy columns
// without an energy counter): the sinks omit it rather than write NaN or zero.
bool ColumnPresent(const RankData& data, int column);

// One lifecycle span; times are CLOCK_MONOTONIC ns (shared by processes on one node).
struct SpanRecord {
  int32_t kind = 0;  // SpanKind
  int32_t tid = 0;   // small per-process thread number
  uint64_t seq = 0;  // producer-batch sequence number
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
};

// One named series of a rank (Collector::Record): points a trainer computed, e.g.
// "model/lenet/loss", at the times it recorded them (seconds since the collector started,
// the clock of the time_s column). After thinning only every `stride`-th point is kept.
struct NamedSeries {
  std::string name;
  std::vector<double> time_s;
  std::vector<double> value;
  int64_t stride = 1;
};

// A series name is one or more '/'-separated segments of [A-Za-z0-9_.-], at most 200
// characters ("model/lenet/loss"). The error names the offending character or segment.
Status ValidateSeriesName(std::string_view name);

struct RankData {
  Tags tags;
  int pid = 0;
  double start_unix_s = 0;      // CLOCK_REALTIME when the collector started
  int64_t start_mono_ns = 0;    // CLOCK_MONOTONIC at the same moment
  double interval_s = 1.0;      // spacing of rows (grows when old rows are thinned)
  double wall_s = 0;            // collector start .. Finish
  double cpu_seconds = 0;       // process user + system CPU spent during wall_s
  int64_t peak_rss_bytes = 0;   // getrusage ru_maxrss
  int cores_available = 1;      // CPUs in the process's affinity mask
  bool gpu_present = false;
  std::string gpu_name;
  int gpu_index = -1;           // the NVML device sampled (-1: none)
  int64_t spans_dropped = 0;    // oldest spans overwritten in the bounded span ring
  std::vector<double> rows;     // row-major, col::kNum values per row
  std::vector<SpanRecord> spans;
  std::string annotations;      // Collector::Annotate lines, each ending in '\n'
  std::vector<NamedSeries> named;  // Collector::Record series, sorted by name
  // Energy (docs/telemetry.md "Energy"): where the energy columns come from, or "n/a: why".
  bool cpu_energy_present = false;
  bool gpu_energy_present = false;
  std::string cpu_energy_source;
  std::string gpu_energy_source;
  // The leader's per-trial ledger (telemetry/trial_ledger.h): empty for a rank that fed no
  // consumer.
  std::vector<TrialRecord> trials;
  LedgerTotals trial_totals;

  int64_t num_rows() const { return static_cast<int64_t>(rows.size()) / col::kNum; }
  double At(int64_t row, int column) const { return rows[row * col::kNum + column]; }
  // The last row's value of a cumulative column (0 with no rows).
  double Total(int column) const { return rows.empty() ? 0.0 : At(num_rows() - 1, column); }
  // The named series `name`, or null.
  const NamedSeries* Named(std::string_view name) const;
};

// The ledger as JSON text (the HDF5 attribute `trials`, the JSON sink, the MPI gather; docs/
// telemetry-format.md): {"totals": {...}, "trials": [{...}, ...]}, NaN written as null.
std::string TrialsJson(const std::vector<TrialRecord>& trials, const LedgerTotals& totals);
Status ParseTrialsJson(std::string_view text, std::vector<TrialRecord>* trials,
                       LedgerTotals* totals);

// Binary form for the MPI gather (CBOR).
std::string SerializeRankData(const RankData& data);
Result<RankData> DeserializeRankData(std::string_view bytes);

}  // namespace batchcast::telemetry
