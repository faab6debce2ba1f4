// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "telemetry/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace batchcast::telemetry {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double SafeDiv(double a, double b) { return b > 0 ? a / b : 0.0; }

// Mean of a column over all rows, skipping NaN; NaN if none.
double ColumnMean(const RankData& d, int column) {
  double sum = 0;
  int64_t n = 0;
  for (int64_t r = 0; r < d.num_rows(); ++r) {
    double v = d.At(r, column);
    if (!std::isnan(v)) {
      sum += v;
      ++n;
    }
  }
  return n > 0 ? sum / static_cast<double>(n) : kNaN;
}

// Mean of the finite values; NaN if none.
template <typename F>
double MeanOf(const std::vector<const RankStats*>& ranks, F value) {
  double sum = 0;
  int n = 0;
  for (const RankStats* r : ranks) {
    double v = value(*r);
    if (!std::isnan(v)) {
      sum += v;
      ++n;
    }
  }
  return n > 0 ? sum / n : kNaN;
}

std::string Advice(const std::string& stage) {
  if (stage == "decode")
    return "consider progressive resizing, more decode threads, or pre-decoded storage";
  if (stage == "read")
    return "consider faster or local storage, the page cache, or more reader threads";
  if (stage == "transform")
    return "consider smaller output images, cheaper augmentation, or augmenting on the GPU";
  if (stage == "collate") return "consider uint8 output or larger producer batches";
  if (stage == "stage")
    return "the leader's model stage (--stage) dominates: run it on a GPU (device=cuda), in "
           "float16, or with a smaller model (docs/model-stage.md)";
  if (stage == "exchange")
    return "check the MPI exchange (network bandwidth, replicate-mode split across leaders)";
  return "check ring_slots and the number of consumers per leader";
}

std::string Pct(double v) { return std::isnan(v) ? "-" : fmt::format("{:.1f}", v); }
std::string Num(double v, int prec) {
  return std::isnan(v) ? "-" : fmt::format("{:.{}f}", v, prec);
}

}  // namespace

std::string_view BottleneckName(Bottleneck b) {
  switch (b) {
    case Bottleneck::kInput: return "input";
    case Bottleneck::kCompute: return "compute";
    case Bottleneck::kUnknown: break;
  }
  return "unknown";
}

RankStats ComputeRankStats(const RankData& d) {
  RankStats s;
  s.rank = d.tags.rank;
  s.local_rank = d.tags.local_rank;
  s.role = d.tags.role;
  s.host = d.tags.host;
  s.wall_s = d.wall_s;
  s.samples_produced = d.Total(col::Counter(Counter::kSamplesProduced));
  s.samples_received = d.Total(col::Counter(Counter::kSamplesReceived));
  s.samples_skipped = d.Total(col::Counter(Counter::kSamplesSkipped));
  double batches = s.is_consumer() ? d.Total(col::Counter(Counter::kBatchesReceived))
                                   : d.Total(col::Counter(Counter::kBatchesProduced));
  double samples = s.is_consumer() ? s.samples_received : s.samples_produced;
  s.samples_per_s = SafeDiv(samples, d.wall_s);
  s.batches_per_s = SafeDiv(batches, d.wall_s);
  for (int t = 0; t < kNumTimers; ++t) s.stage_s[t] = d.Total(col::kTimerNs + t) * 1e-9;
  double wait = s.stage_s[static_cast<int>(Timer::kDataWait)];
  double step = s.stage_s[static_cast<int>(Timer::kStep)];
  s.data_wait_pct = wait + step > 0 ? 100.0 * wait / (wait + step) : kNaN;
  double steps = d.Total(col::TimerCount(Timer::kStep));
  s.step_ms = steps > 0 ? 1e3 * step / steps : kNaN;
  s.cpu_cores = SafeDiv(d.cpu_seconds, d.wall_s);
  s.rss_peak_mib = static_cast<double>(d.peak_rss_bytes) / (1 << 20);
  s.gpu_util_pct = d.gpu_present ? ColumnMean(d, col::kGpuUtil) : kNaN;
  double threads = ColumnMean(d, col::Gauge(Gauge::kWorkerThreads));
  s.worker_threads = std::isnan(threads) ? 0 : threads;
  double busy = 0;
  for (int t = 0; t < kNumTimers; ++t)
    if (IsWorkerStage(static_cast<Timer>(t))) busy += s.stage_s[t];
  s.worker_util = s.worker_threads > 0 && d.wall_s > 0 ? busy / (s.worker_threads * d.wall_s)
                                                       : kNaN;
  s.cores_available = d.cores_available;
  for (int i = 0; i < 5; ++i) s.bytes[i] = d.Total(col::Counter(Counter::kBytesShm) + i);
  s.spans_dropped = d.spans_dropped;
  s.pid = d.pid;
  s.cpu_seconds = d.cpu_seconds;
  s.cpu_energy_j = d.cpu_energy_present ? d.Total(col::kCpuEnergy) : kNaN;
  s.gpu_energy_j = d.gpu_energy_present ? d.Total(col::kGpuEnergy) : kNaN;
  return s;
}

CostSummary SummarizeCost(const std::vector<RankData>& ranks) {
  CostSummary c;
  double published_cpu = 0;  // leader CPU of leaders that published to trials
  for (const RankData& d : ranks) {
    if (d.trials.empty()) continue;
    c.samples_published += static_cast<double>(d.trial_totals.samples_published);
    c.epochs_published += static_cast<double>(d.trial_totals.epochs_published);
    c.unattributed_cpu_s += d.trial_totals.unattributed_cpu_s;
    for (const TrialRecord& r : d.trials) {
      ++c.trials;
      if (r.end == TrialEnd::kDied || r.end == TrialEnd::kSilent) ++c.trials_died;
      c.samples_received += static_cast<double>(r.samples);
      c.leader_cpu_s += r.leader_cpu_s;
      published_cpu += r.leader_cpu_s;
      if (!std::isnan(r.own_cpu_s)) c.own_cpu_s += r.own_cpu_s;
    }
  }
  const double per_sample = SafeDiv(published_cpu, c.samples_published);
  c.alone_cpu_s = per_sample * c.samples_received;
  c.saved_cpu_s = per_sample * (c.samples_received - c.samples_published);  // exactly 0 alone
  c.sharing = SafeDiv(c.samples_received, c.samples_published);
  // Node energy: per host the rank that measured the longest (all ranks of a host read the
  // same package counters); GPUs: per (host, device) likewise.
  std::map<std::string, std::pair<double, double>> host_j;                 // host -> (wall, J)
  std::map<std::pair<std::string, int>, std::pair<double, double>> gpu_j;  // device -> (wall, J)
  for (const RankData& d : ranks) {
    if (d.cpu_energy_present) {
      auto& [wall, j] = host_j[d.tags.host];
      if (d.wall_s >= wall) wall = d.wall_s, j = d.Total(col::kCpuEnergy);
    }
    if (d.gpu_energy_present) {
      auto& [wall, j] = gpu_j[{d.tags.host, d.gpu_index}];
      if (d.wall_s >= wall) wall = d.wall_s, j = d.Total(col::kGpuEnergy);
    }
  }
  c.cpu_energy_j = host_j.empty() ? kNaN : 0.0;
  for (const auto& [host, v] : host_j) c.cpu_energy_j += v.second;
  c.gpu_energy_j = gpu_j.empty() ? kNaN : 0.0;
  for (const auto& [dev, v] : gpu_j) c.gpu_energy_j += v.second;
  const double total_j = std::isnan(c.cpu_energy_j) ? c.gpu_energy_j
                         : std::isnan(c.gpu_energy_j) ? c.cpu_energy_j
                                                      : c.cpu_energy_j + c.gpu_energy_j;
  double received = c.samples_received;
  if (received == 0)
    for (const RankData& d : ranks) received += d.Total(col::Counter(Counter::kSamplesReceived));
  c.joules_per_epoch = c.epochs_published > 0 ? total_j / c.epochs_published : kNaN;
  c.joules_per_1000_samples = received > 0 ? 1000.0 * total_j / received : kNaN;
  if (!ranks.empty()) {
    if (std::isnan(c.cpu_energy_j)) c.energy_note = "cpu packages: " + ranks[0].cpu_energy_source;
    if (std::isnan(c.gpu_energy_j))
      c.energy_note += (c.energy_note.empty() ? "" : "; ") + std::string("gpus: ") +
                       ranks[0].gpu_energy_source;
  }
  return c;
}

JobSummary Summarize(const std::vector<RankData>& ranks) {
  JobSummary j;
  if (!ranks.empty()) {
    j.experiment = ranks[0].tags.experiment;
    j.workload = ranks[0].tags.workload;
    j.run = ranks[0].tags.run;
  }
  for (const auto& d : ranks) {
    j.ranks.push_back(ComputeRankStats(d));
    j.wall_s = std::max(j.wall_s, d.wall_s);
  }
  std::sort(j.ranks.begin(), j.ranks.end(),
            [](const RankStats& a, const RankStats& b) { return a.rank < b.rank; });
  for (Role role : {Role::kLeader, Role::kConsumer, Role::kBoth}) {
    std::vector<const RankStats*> members;
    for (const auto& r : j.ranks)
      if (r.role == role) members.push_back(&r);
    if (members.empty()) continue;
    RoleStats rs;
    rs.role = role;
    rs.ranks = static_cast<int>(members.size());
    for (const RankStats* r : members) {
      rs.samples_per_s += r->samples_per_s;
      rs.batches_per_s += r->batches_per_s;
      rs.rss_peak_mib = std::max(rs.rss_peak_mib, r->rss_peak_mib);
    }
    rs.data_wait_pct = MeanOf(members, [](const RankStats& r) { return r.data_wait_pct; });
    rs.step_ms = MeanOf(members, [](const RankStats& r) { return r.step_ms; });
    rs.cpu_cores = MeanOf(members, [](const RankStats& r) { return r.cpu_cores; });
    rs.gpu_util_pct = MeanOf(members, [](const RankStats& r) { return r.gpu_util_pct; });
    j.roles.push_back(rs);
  }
  j.cost = SummarizeCost(ranks);
  return j;
}

namespace {

struct LeaderView {
  double stage_s[kNumTimers] = {};
  double busy_s = 0;          // Σ worker-stage seconds over leaders
  double threads = 0;         // Σ worker threads
  double threads_wall = 0;    // Σ threads × wall
  double wall_s = 0;          // longest leader
  int dominant = -1;          // Timer index with the most seconds (leader-side timers only)
};

LeaderView ViewLeaders(const std::vector<const RankStats*>& leaders) {
  LeaderView v;
  for (const RankStats* r : leaders) {
    for (int t = 0; t < kNumTimers; ++t) v.stage_s[t] += r->stage_s[t];
    for (int t = 0; t < kNumTimers; ++t)
      if (IsWorkerStage(static_cast<Timer>(t))) v.busy_s += r->stage_s[t];
    v.threads += r->worker_threads;
    v.threads_wall += r->worker_threads * r->wall_s;
    v.wall_s = std::max(v.wall_s, r->wall_s);
  }
  double best = 0;
  for (int t = 0; t < kNumTimers; ++t)
    if (IsLeaderWork(static_cast<Timer>(t)) && v.stage_s[t] > best) {
      best = v.stage_s[t];
      v.dominant = t;
    }
  return v;
}

// The highest (Σ cpu_cores of a host's ranks) / (cores available there), with the host.
double BusiestHost(const JobSummary& j, std::string* host, double* used, int* cores) {
  std::map<std::string, std::pair<double, int>> per_host;
  std::map<std::pair<std::string, int>, double> per_process;  // ranks of one process count once
  for (const auto& r : j.ranks) {
    double& seen = per_process[{r.host, r.pid}];
    auto& [sum, avail] = per_host[r.host];
    const double more = r.pid > 0 ? std::max(0.0, r.cpu_cores - seen) : r.cpu_cores;
    sum += more;
    seen += more;
    avail = std::max(avail, r.cores_available);
  }
  double worst = 0;
  for (const auto& [h, v] : per_host) {
    double ratio = SafeDiv(v.first, v.second);
    if (ratio >= worst) {
      worst = ratio;
      *host = h;
      *used = v.first;
      *cores = v.second;
    }
  }
  return worst;
}

std::string InputCause(const JobSummary& j, const std::vector<const RankStats*>& leaders,
                       Diagnosis* d) {
  if (leaders.empty()) return "no leader telemetry to name the slow stage";
  LeaderView v = ViewLeaders(leaders);
  if (v.dominant < 0)
    return "the leader recorded no stage times: time read/decode/transform/collate to find the "
           "slow stage";
  std::string stage(TimerName(static_cast<Timer>(v.dominant)));
  d->stage = stage;
  double util = v.threads_wall > 0 ? v.busy_s / v.threads_wall : kNaN;
  double stage_cores = SafeDiv(v.stage_s[v.dominant], v.wall_s);
  std::string host;
  double used = 0;
  int cores = 1;
  double cpu_ratio = BusiestHost(j, &host, &used, &cores);
  bool worker_stage = IsWorkerStage(static_cast<Timer>(v.dominant));
  // Workers that waited for the sample-path lock longer than the slowest stage worked: the
  // reads are serialised, and more threads only wait more (the plot shows lock_wait apart).
  const double lock_s = v.stage_s[static_cast<int>(Timer::kLockWait)];
  if (lock_s > v.stage_s[v.dominant]) {
    d->stage = "lock_wait";
    return fmt::format(
        "leader workers waited {:.1f} s for the process-wide HDF5 lock, more than any stage "
        "worked ({} {:.1f} s): reads are serialised, more threads only wait longer; consider "
        "`batchcast convert --upgrade FILE` (a layout version 1 file: samples are then read "
        "without the lock), uncompressed pixels (--compression none), or the decoded-sample "
        "cache (cache=)",
        lock_s, stage, v.stage_s[v.dominant]);
  }
  if (worker_stage && !std::isnan(util) && util >= kWorkersSaturated)
    return fmt::format("leader {} used {:.1f} of {:.0f} worker cores: {}", stage, stage_cores,
                       v.threads, Advice(stage));
  if (cpu_ratio >= kCpuSaturated) {
    d->stage = "cpu";
    return fmt::format(
        "the node's CPUs are saturated ({:.1f} of {} cores busy on {}; leader {} dominates): "
        "consider fewer collocated trainers per node, pre-decoded storage, or augmenting on "
        "the GPU",
        used, cores, host, stage);
  }
  if (!worker_stage)
    return fmt::format("the leader spent most of its time in {} ({:.1f} s): {}", stage,
                       v.stage_s[v.dominant], Advice(stage));
  if (!std::isnan(util))
    return fmt::format(
        "leader workers were busy only {:.0f}% of the time ({} dominates): the leader is not "
        "saturated: raise threads or prefetch deeper (ring_slots, buffer_depth)",
        100 * util, stage);
  return fmt::format("leader {} took the most time ({:.1f} s = {:.1f} cores): {}", stage,
                     v.stage_s[v.dominant], stage_cores, Advice(stage));
}

void AddNotes(const JobSummary& j, const std::vector<const RankStats*>& consumers,
              const std::vector<const RankStats*>& leaders, Diagnosis* d) {
  if (consumers.size() >= 2) {
    auto [lo, hi] = std::minmax_element(
        consumers.begin(), consumers.end(),
        [](const RankStats* a, const RankStats* b) { return a->data_wait_pct < b->data_wait_pct; });
    if ((*hi)->data_wait_pct - (*lo)->data_wait_pct >= kImbalancePts)
      d->notes.push_back(fmt::format(
          "consumers differ: rank {} waited {:.0f}% but rank {} only {:.0f}%: the shared stream "
          "paces to the slowest consumer (rank {}), the faster ones wait for it",
          (*hi)->rank, (*hi)->data_wait_pct, (*lo)->rank, (*lo)->data_wait_pct, (*lo)->rank));
  }
  double skipped = 0, produced = 0;
  int64_t dropped = 0;
  for (const auto& r : j.ranks) {
    skipped += r.samples_skipped;
    produced += r.samples_produced;
    dropped += r.spans_dropped;
  }
  if (skipped > 0)
    d->notes.push_back(fmt::format("{:.0f} samples were skipped as bad ({:.2f}% of produced)",
                                   skipped, 100 * SafeDiv(skipped, produced + skipped)));
  if (dropped > 0)
    d->notes.push_back(fmt::format(
        "the timeline trace dropped the {} oldest spans (raise telemetry spans=)", dropped));
}

}  // namespace

Diagnosis Diagnose(const JobSummary& j) {
  Diagnosis d;
  std::vector<const RankStats*> consumers, leaders;
  for (const auto& r : j.ranks) {
    if (r.is_consumer() && !std::isnan(r.data_wait_pct)) consumers.push_back(&r);
    if (r.is_leader()) leaders.push_back(&r);
  }
  if (consumers.empty()) {
    d.headline = "no consumer measured data-wait or step time: nothing to diagnose";
    AddNotes(j, consumers, leaders, &d);
    return d;
  }
  double wait = MeanOf(consumers, [](const RankStats& r) { return r.data_wait_pct; });
  if (wait >= kInputBoundWaitPct) {
    d.bottleneck = Bottleneck::kInput;
    d.headline = fmt::format("trainers waited {:.0f}% of step time for data; {}", wait,
                             InputCause(j, leaders, &d));
  } else {
    d.bottleneck = Bottleneck::kCompute;
    d.headline = fmt::format(
        "trainers waited {:.1f}% of step time for data: the input pipeline is not the bottleneck",
        wait);
    double gpu = MeanOf(consumers, [](const RankStats& r) { return r.gpu_util_pct; });
    if (!std::isnan(gpu) && gpu < kGpuIdleBelowPct)
      d.notes.push_back(fmt::format(
          "GPUs were busy only {:.0f}% of the time: the training step is bound by host-side "
          "work or synchronisation, not by data",
          gpu));
    LeaderView v = ViewLeaders(leaders);
    const double slot_wait = v.stage_s[static_cast<int>(Timer::kSlotWait)];
    if (v.wall_s > 0 && 100 * slot_wait / (v.wall_s * static_cast<double>(leaders.size())) >=
                            kBackpressureNotePct)
      d.notes.push_back(fmt::format(
          "the leader waited {:.0f}% of its run for a free ring slot (backpressure): the "
          "trainers set the pace",
          100 * slot_wait / (v.wall_s * static_cast<double>(leaders.size()))));
    if (v.threads_wall > 0 && v.busy_s / v.threads_wall < kSpareWorkersBelow)
      d.notes.push_back(fmt::format(
          "leader workers were busy {:.0f}% of the time: the node has spare input capacity "
          "for more collocated trainers",
          100 * v.busy_s / v.threads_wall));
  }
  AddNotes(j, consumers, leaders, &d);
  return d;
}

std::string FormatSummary(const JobSummary& j, const Diagnosis& d) {
  std::string out = fmt::format(
      "batchcast telemetry: experiment={} workload={} run={}  ranks={}  wall={:.1f}s\n",
      j.experiment.empty() ? "-" : j.experiment, j.workload.empty() ? "-" : j.workload,
      j.run.empty() ? "-" : j.run, j.ranks.size(), j.wall_s);
  out += fmt::format("{:<9} {:>5} {:>10} {:>9} {:>6} {:>8} {:>6} {:>8} {:>5}\n", "role",
                     "ranks", "samples/s", "batches/s", "wait%", "step ms", "cpu", "rss MiB",
                     "gpu%");
  for (const auto& r : j.roles)
    out += fmt::format("{:<9} {:>5} {:>10.1f} {:>9.2f} {:>6} {:>8} {:>6.2f} {:>8.0f} {:>5}\n",
                       RoleName(r.role), r.ranks, r.samples_per_s, r.batches_per_s,
                       Pct(r.data_wait_pct), Num(r.step_ms, 2), r.cpu_cores, r.rss_peak_mib,
                       Pct(r.gpu_util_pct));
  if (j.ranks.size() > 1 && j.ranks.size() <= 16) {
    out += fmt::format("{:<11} {:<14} {:>10} {:>6} {:>8} {:>6} {:>8} {:>5} {:>6}\n", "rank",
                       "host", "samples/s", "wait%", "step ms", "cpu", "rss MiB", "gpu%",
                       "wkr%");
    for (const auto& r : j.ranks)
      out += fmt::format("{:<11} {:<14} {:>10.1f} {:>6} {:>8} {:>6.2f} {:>8.0f} {:>5} {:>6}\n",
                         fmt::format("{} {}", r.rank, RoleName(r.role)), r.host.substr(0, 14),
                         r.samples_per_s, Pct(r.data_wait_pct), Num(r.step_ms, 2), r.cpu_cores,
                         r.rss_peak_mib, Pct(r.gpu_util_pct),
                         Pct(std::isnan(r.worker_util) ? kNaN : 100 * r.worker_util));
  }
  out += fmt::format("diagnosis ({}-bound): {}\n", BottleneckName(d.bottleneck), d.headline);
  if (d.bottleneck == Bottleneck::kUnknown)
    out.replace(out.rfind("diagnosis (unknown-bound)"), 25, "diagnosis");
  for (const auto& n : d.notes) out += "  - " + n + "\n";
  return out;
}

std::string FormatAnnotations(const std::vector<RankData>& ranks) {
  std::string out;
  for (const RankData& d : ranks) {
    if (d.annotations.empty()) continue;
    if (out.empty()) out = "annotations (progressive resizing, evaluations, ...):\n";
    out += fmt::format("-- rank {} ({})\n", d.tags.rank, RoleName(d.tags.role));
    out += d.annotations;
  }
  return out;
}

std::string FormatNamedSeries(const std::vector<RankData>& ranks) {
  constexpr int kMaxLines = 64;
  std::string out;
  int lines = 0, more = 0;
  for (const RankData& d : ranks) {
    for (const NamedSeries& s : d.named) {
      if (lines == kMaxLines) {
        ++more;
        continue;
      }
      if (out.empty()) out = "named series (rank, name, points, first -> last value):\n";
      ++lines;
      if (s.value.empty()) {
        out += fmt::format("  {:>4} {} 0 points\n", d.tags.rank, s.name);
        continue;
      }
      out += fmt::format("  {:>4} {} {} points{}, {:.6g} -> {:.6g}\n", d.tags.rank, s.name,
                         s.value.size(), s.stride > 1 ? fmt::format(" (every {})", s.stride) : "",
                         s.value.front(), s.value.back());
    }
  }
  if (more > 0) out += fmt::format("  ({} more series in the output files)\n", more);
  return out;
}

namespace {

std::string Joules(double j) { return std::isnan(j) ? "n/a" : fmt::format("{:.1f}", j); }

std::string TrialTable(const RankData& d) {
  std::string out = fmt::format(
      "  leader rank {} on {} (pid {}): {} trials, {} epochs and {} samples published to "
      "them, {:.2f} CPU-s while no trial received anything\n",
      d.tags.rank, d.tags.host, d.pid, d.trials.size(), d.trial_totals.epochs_published,
      d.trial_totals.samples_published, d.trial_totals.unattributed_cpu_s);
  out += fmt::format("  {:<18} {:<8} {:>7} {:>9} {:>6} {:>9} {:>10} {:>9} {:>9} {:>8}\n",
                     "trial", "end", "pid", "sent", "epochs", "own cpu", "leader cpu",
                     "total cpu", "energy J", "rss MiB");
  for (const TrialRecord& r : d.trials) {
    const double total = std::isnan(r.own_cpu_s) ? kNaN : r.own_cpu_s + r.leader_cpu_s;
    const double energy = std::isnan(r.own_energy_j) || std::isnan(r.leader_energy_j)
                              ? kNaN
                              : r.own_energy_j + r.leader_energy_j;
    out += fmt::format("  {:<18} {:<8} {:>7} {:>9} {:>6} {:>9} {:>10.2f} {:>9} {:>9} {:>8.0f}\n",
                       r.name.substr(0, 18), TrialEndName(r.end), r.pid, r.samples, r.epochs,
                       Num(r.own_cpu_s, 2), r.leader_cpu_s, Num(total, 2), Joules(energy),
                       static_cast<double>(r.own_peak_rss_bytes) / (1 << 20));
  }
  return out;
}

}  // namespace

std::string FormatTrials(const std::vector<RankData>& ranks, const CostSummary& c) {
  std::string out;
  for (const RankData& d : ranks) {
    if (d.trials.empty()) continue;
    if (out.empty()) out = "trials (per-trial cost; docs/telemetry.md \"Cost model\"):\n";
    out += TrialTable(d);
  }
  if (c.trials > 0)
    out += fmt::format(
        "cost: the leaders spent {:.2f} CPU-s on {} trials ({} died or went silent); each "
        "decoding alone would have spent {:.2f} CPU-s: sharing saved {:.2f} CPU-s ({:.2f} "
        "samples delivered per sample decoded)\n",
        c.leader_cpu_s, c.trials, c.trials_died, c.alone_cpu_s, c.saved_cpu_s, c.sharing);
  const bool cpu = !std::isnan(c.cpu_energy_j), gpu = !std::isnan(c.gpu_energy_j);
  if (cpu || gpu) {
    out += fmt::format("energy: cpu packages {} J, gpus {} J; {} J per epoch, {} J per 1000 "
                       "samples delivered{}\n",
                       Joules(c.cpu_energy_j), Joules(c.gpu_energy_j),
                       Joules(c.joules_per_epoch), Joules(c.joules_per_1000_samples),
                       c.energy_note.empty() ? "" : " (" + c.energy_note + ")");
  } else if (!c.energy_note.empty()) {
    out += "energy: n/a (" + c.energy_note + ")\n";
  }
  return out;
}

}  // namespace batchcast::telemetry
