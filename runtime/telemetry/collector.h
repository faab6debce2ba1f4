// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The per-process telemetry collector (docs/telemetry.md).
//
//   auto c = telemetry::Collector::Create(tags, {.interval_ms = 1000});   // one per process
//   c->Add(Counter::kBatchesReceived, 1);                                 // hot path: lock-free
//   { telemetry::ScopedTimer t(c.get(), Timer::kDecode); Decode(...); }   // RAII timing
//   c->Span(SpanKind::kStep, seq, acquired_ns, telemetry::NowNs());        // lifecycle span
//   c->Finish(MPI_COMM_WORLD, sinks);                                     // collective, at the end
//
// Cost model: Add/AddTime/SetGauge are one or two relaxed atomic adds on a cache line that
// belongs (mostly) to the calling thread — no locks, no allocation, no system call. Span
// is a fetch_add on one shared index plus five relaxed stores into a preallocated ring.
// Telemetry off means the data plane holds a null Collector*: every helper here checks
// the pointer first (one branch) and ScopedTimer then does not even read the clock.
//
// A sampler thread snapshots the counters every `interval_ms` into a preallocated table
// of at most `max_rows` rows; when the table is full every other row is dropped and the
// interval doubles, so memory stays bounded (max_rows × col::kNum × 8 bytes, ~1.8 MB at
// the default 4096 rows) while the series still covers the whole run.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API only: Open MPI's C++ bindings need libmpi_cxx
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "batchcast/status.h"
#include "telemetry/energy.h"
#include "telemetry/metrics.h"
#include "telemetry/rank_data.h"
#include "telemetry/trial_ledger.h"

namespace batchcast {
struct Options;
}

namespace batchcast::telemetry {

struct Nvml;
struct GpuReading;
struct JobSummary;

// CLOCK_MONOTONIC in nanoseconds: the time base of timers and spans.
int64_t NowNs();

struct CollectorOptions {
  int64_t interval_ms = 1000;  // sampling interval of the time series
  int64_t max_rows = 4096;     // time-series rows kept (older rows thinned 2:1 when full)
  int64_t max_spans = 65536;   // lifecycle spans kept (rounded up to a power of two; the
                               // oldest are overwritten and counted as dropped)
  bool gpu = true;             // probe NVML for GPU utilisation / memory
  bool energy = true;          // read RAPL package energy (and NVML energy with gpu)
  std::string powercap_root = kPowercapRoot;  // where RAPL lives (tests: a fake tree)
};

// Where Finish() writes. Empty paths are disabled; any subset works.
struct Sinks {
  std::string hdf5;   // one file, a group per rank (docs/telemetry-format.md)
  std::string csv;    // one table, a row per (rank, interval)
  std::string json;   // tags, totals, summary and series of every rank
  std::string trace;  // Chrome trace JSON of batch lifecycles (Perfetto, chrome://tracing)
  bool print_summary = true;    // print the summary table and diagnosis on rank 0
  FILE* summary_to = nullptr;   // where to print it (nullptr: stdout)
};

// What Finish() computed on rank 0 (empty on other ranks).
struct FinishReport {
  std::vector<RankData> ranks;
  std::string summary_text;  // the table and diagnosis as printed
};

class Collector {
 public:
  // Starts the sampler thread. Tags.host defaults to gethostname().
  [[nodiscard]] static Result<std::unique_ptr<Collector>> Create(Tags tags,
                                                                 CollectorOptions options = {});
  ~Collector();  // stops the sampler if Finish() was not called; never throws
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;

  void Add(Counter c, int64_t n) {
    Shard().counters[static_cast<int>(c)].fetch_add(n, std::memory_order_relaxed);
  }
  void AddTime(Timer t, int64_t ns) {
    ShardT& s = Shard();
    s.timer_ns[static_cast<int>(t)].fetch_add(ns, std::memory_order_relaxed);
    s.timer_count[static_cast<int>(t)].fetch_add(1, std::memory_order_relaxed);
  }
  void SetGauge(Gauge g, double v) {
    ShardT& s = Shard();
    s.gauge_sum[static_cast<int>(g)].fetch_add(v, std::memory_order_relaxed);
    s.gauge_count[static_cast<int>(g)].fetch_add(1, std::memory_order_relaxed);
    gauge_last_[static_cast<int>(g)].store(v, std::memory_order_relaxed);
  }
  // Appends one line to this rank's annotations: rare, human-readable facts of the run (the
  // progressive-resizing plan, what an epoch trained at which size, an evaluation). Every
  // sink writes them and the summary prints them. Takes a lock: not for hot paths. At most
  // kMaxAnnotationBytes are kept; later lines are counted and dropped.
  void Annotate(std::string_view line);
  static constexpr size_t kMaxAnnotationBytes = 256 * 1024;

  // Appends the point (now, value) to this rank's named series `name`: values the trainer
  // computes, such as "model/lenet/loss" or "model/lenet/samples_per_s" (docs/telemetry.md
  // "Named series"), written by every sink next to the sampled columns. Names are segments
  // of [A-Za-z0-9_.-] separated by '/', and no name may be a path prefix of another (each
  // is one HDF5 dataset under named/). Takes a lock: a point per step or per epoch, not per
  // sample. A series keeps at most `max_rows` points: when full, every other point is
  // dropped and from then on only every second point is kept (the stride doubles), so it
  // still covers the whole run. At most kMaxNamedSeries names; a new name past that, a bad
  // name or a prefix clash is an error naming the series.
  [[nodiscard]] Status Record(std::string_view name, double value);
  static constexpr size_t kMaxNamedSeries = 1024;

  // Records one lifecycle span [begin_ns, end_ns] (NowNs() clock) of producer batch `seq`.
  void Span(SpanKind kind, uint64_t seq, int64_t begin_ns, int64_t end_ns);

  // Stops sampling (taking a final row), gathers every rank's data to rank 0 of `comm`,
  // writes the enabled sinks and prints the summary there. Collective over `comm`: every
  // rank must call it; all ranks return rank 0's status. Call it after the data plane has
  // stopped (the HDF5 sink runs on the calling thread under Hdf5Lock()). `report`, if
  // given, receives what rank 0 computed. Callable once.
  [[nodiscard]] Status Finish(MPI_Comm comm, const Sinks& sinks, FinishReport* report = nullptr);
  // The single-process path (no MPI needed): this rank's data only.
  [[nodiscard]] Status Finish(const Sinks& sinks, FinishReport* report = nullptr);

  // This rank's data so far (takes a row now). For tests and the single-process path.
  RankData Snapshot();
  const Tags& tags() const { return tags_; }
  // Seconds since the collector started (the clock of time_s, named series and the ledger).
  double ElapsedS() const { return (NowNs() - start_mono_ns_) * 1e-9; }
  // The leader's per-trial ledger (telemetry/trial_ledger.h): the producer records who was
  // admitted, who left and what each received; the sampler apportions the cost.
  TrialLedger& trials() { return ledger_; }

 private:
  static constexpr int kShards = 16;
  struct alignas(64) ShardT {
    std::atomic<int64_t> counters[kNumCounters] = {};
    std::atomic<int64_t> timer_ns[kNumTimers] = {};
    std::atomic<int64_t> timer_count[kNumTimers] = {};
    std::atomic<double> gauge_sum[kNumGauges] = {};
    std::atomic<int64_t> gauge_count[kNumGauges] = {};
  };
  struct SpanSlot {  // 40 bytes; 64k slots = 2.5 MB
    std::atomic<uint64_t> version{0};  // index + 1 once written; 0 while being written
    std::atomic<uint64_t> kind_tid{0};
    std::atomic<uint64_t> seq{0};
    std::atomic<int64_t> begin_ns{0};
    std::atomic<int64_t> end_ns{0};
  };

  Collector(Tags tags, CollectorOptions options);
  ShardT& Shard() { return shards_[ThreadIndex() & (kShards - 1)]; }
  static int ThreadIndex();
  void SamplerLoop();
  void TakeRow();  // sampler thread or under sample_mu_
  void ReadGpuEnergy(const GpuReading& gpu, double dt);
  void ThinRows();
  void StopSampler();
  RankData BuildRankData();
  Status WriteOutputs(const std::vector<RankData>& ranks, const Sinks& sinks,
                      FinishReport* report);

  Tags tags_;
  CollectorOptions options_;
  ShardT shards_[kShards];
  std::atomic<double> gauge_last_[kNumGauges] = {};
  std::unique_ptr<SpanSlot[]> spans_;
  uint64_t span_mask_ = 0;
  std::atomic<uint64_t> span_head_{0};

  // Sampler state (sample_mu_ guards the table and the previous snapshot).
  std::mutex sample_mu_;
  std::condition_variable sample_cv_;
  bool stop_ = false;
  bool finished_ = false;
  std::thread sampler_;
  std::vector<double> rows_;
  int64_t stride_ = 1;        // sampler ticks per row (doubles when rows are thinned)
  int64_t start_mono_ns_ = 0;
  double start_unix_s_ = 0;
  int64_t last_row_ns_ = 0;
  double last_cpu_s_ = 0;
  double start_cpu_s_ = 0;     // process CPU seconds when the collector started
  double prev_gauge_sum_[kNumGauges] = {};
  int64_t prev_gauge_count_[kNumGauges] = {};
  std::unique_ptr<Nvml> nvml_;
  // Energy (sampler state, under sample_mu_): RAPL packages, the GPU's counter or power.
  std::unique_ptr<RaplReader> rapl_;
  std::string cpu_energy_source_, gpu_energy_source_;
  bool rapl_warned_ = false;
  double cpu_energy_j_ = 0, last_cpu_energy_j_ = 0;
  int64_t gpu_energy_base_mj_ = -1;
  double gpu_energy_j_ = std::numeric_limits<double>::quiet_NaN();
  double start_node_busy_s_ = 0, last_node_busy_s_ = 0;
  double last_bytes_[kNumTransports] = {};
  TrialLedger ledger_;
  std::mutex notes_mu_;
  std::string annotations_;          // guarded by notes_mu_
  int64_t annotations_dropped_ = 0;  // guarded by notes_mu_
  struct NamedState {
    NamedSeries series;
    int64_t offered = 0;  // points offered since the last kept one
  };
  std::map<std::string, NamedState, std::less<>> named_;  // guarded by notes_mu_
};

// Times a scope into a Timer (and optionally a lifecycle span). With a null collector it
// does nothing at all, not even read the clock.
class ScopedTimer {
 public:
  ScopedTimer(Collector* c, Timer t) : c_(c), timer_(t), begin_(c ? NowNs() : 0) {}
  ScopedTimer(Collector* c, Timer t, SpanKind span, uint64_t seq)
      : c_(c), timer_(t), span_(static_cast<int>(span)), seq_(seq), begin_(c ? NowNs() : 0) {}
  ~ScopedTimer() {
    if (c_ == nullptr) return;
    int64_t end = NowNs();
    c_->AddTime(timer_, end - begin_);
    if (span_ >= 0) c_->Span(static_cast<SpanKind>(span_), seq_, begin_, end);
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Collector* c_;
  Timer timer_;
  int span_ = -1;
  uint64_t seq_ = 0;
  int64_t begin_;
};

// Null-safe one-liners for call sites that hold a possibly-null Collector*.
inline void Add(Collector* c, Counter k, int64_t n) {
  if (c) c->Add(k, n);
}
inline void AddTime(Collector* c, Timer t, int64_t ns) {
  if (c) c->AddTime(t, ns);
}
inline void SetGauge(Collector* c, Gauge g, double v) {
  if (c) c->SetGauge(g, v);
}
inline void Span(Collector* c, SpanKind k, uint64_t seq, int64_t begin_ns, int64_t end_ns) {
  if (c) c->Span(k, seq, begin_ns, end_ns);
}

}  // namespace batchcast::telemetry
