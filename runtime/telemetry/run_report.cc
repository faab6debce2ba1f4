// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "telemetry/run_report.h"

#include <dirent.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "core/errors.h"
#include "telemetry/hdf5_reader.h"
#include "telemetry/summary.h"

namespace batchcast::telemetry {
namespace {

constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

using Json = nlohmann::json;

Json JsonNum(double v) { return std::isfinite(v) ? Json(v) : Json(); }

double Ratio(double a, double b) { return b > 0 ? a / b : kNoValue; }

Result<std::vector<std::string>> TelemetryFilesIn(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return ErrnoError(errno, "report: cannot list run directory {}", dir);
  std::vector<std::string> files;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 3 && name.compare(name.size() - 3, 3, ".h5") == 0)
      files.push_back(dir + "/" + name);
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

// One process: every rank of it (a Python Leader and Consumer in one process are two ranks
// of one pid) counts its CPU and RSS once.
struct Process {
  std::string host;
  int pid = 0;
  double cpu_s = 0, rss_peak_mib = 0;
};

std::vector<Process> Processes(const std::vector<RankStats>& ranks) {
  std::map<std::pair<std::string, int>, Process> by;
  for (const RankStats& r : ranks) {
    Process& p = by[{r.host, r.pid}];
    p.host = r.host;
    p.pid = r.pid;
    p.cpu_s = std::max(p.cpu_s, r.cpu_seconds);
    p.rss_peak_mib = std::max(p.rss_peak_mib, r.rss_peak_mib);
  }
  std::vector<Process> out;
  for (auto& [key, p] : by) out.push_back(p);
  return out;
}

Json StageSeconds(const RankStats& s) {
  Json j = Json::object();
  for (int t = 0; t < kNumTimers; ++t) j[std::string(TimerName(static_cast<Timer>(t)))] = s.stage_s[t];
  return j;
}

Json RankTable(const RunFiles& run, const JobSummary& job) {
  Json out = Json::array();
  for (size_t i = 0; i < run.ranks.size(); ++i) {
    const RankData& d = run.ranks[i];
    const RankStats& s = job.ranks[i];
    out.push_back({{"rank", s.rank}, {"file", run.rank_file[i]}, {"rank_in_file", run.rank_in_file[i]},
                   {"host", s.host}, {"pid", s.pid}, {"role", std::string(RoleName(s.role))},
                   {"run", d.tags.run}, {"wall_s", JsonNum(s.wall_s)},
                   {"start_unix_s", JsonNum(d.start_unix_s)}, {"samples_per_s", JsonNum(s.samples_per_s)},
                   {"batches_per_s", JsonNum(s.batches_per_s)}, {"data_wait_pct", JsonNum(s.data_wait_pct)},
                   {"step_ms", JsonNum(s.step_ms)}, {"cpu_cores", JsonNum(s.cpu_cores)},
                   {"cpu_s", JsonNum(s.cpu_seconds)}, {"rss_peak_mib", JsonNum(s.rss_peak_mib)},
                   {"gpu_util_pct", JsonNum(s.gpu_util_pct)}, {"worker_threads", JsonNum(s.worker_threads)},
                   {"worker_util", JsonNum(s.worker_util)}, {"stage_s", StageSeconds(s)},
                   {"samples_produced", s.samples_produced},
                   {"samples_received", s.samples_received},
                   {"cpu_energy_source", d.cpu_energy_source},
                   {"gpu_energy_source", d.gpu_energy_source}});
  }
  return out;
}

// The consumer rank a trial's own process wrote (same host and pid as the ledger's), if any.
const RankStats* OwnRank(const JobSummary& job, const std::string& host, int pid) {
  for (const RankStats& r : job.ranks)
    if (r.is_consumer() && r.host == host && r.pid == pid && pid > 0) return &r;
  return nullptr;
}

Json TrialsTable(const RunFiles& run, const JobSummary& job) {
  Json out = Json::array();
  for (size_t i = 0; i < run.ranks.size(); ++i) {
    const RankData& d = run.ranks[i];
    for (const TrialRecord& t : d.trials) {
      const double total_cpu = std::isnan(t.own_cpu_s) ? kNoValue : t.own_cpu_s + t.leader_cpu_s;
      const double energy = std::isnan(t.own_energy_j) || std::isnan(t.leader_energy_j)
                                ? kNoValue : t.own_energy_j + t.leader_energy_j;
      Json bytes = Json::object();
      const char* names[kNumTransports] = {"shm", "mpi", "h2d", "ipc", "nccl"};
      for (int k = 0; k < kNumTransports; ++k) bytes[names[k]] = t.transport_bytes[k];
      Json own;  // the trial's own telemetry file, when it wrote one
      if (const RankStats* r = OwnRank(job, d.tags.host, t.pid))
        own = {{"rank", r->rank}, {"data_wait_pct", JsonNum(r->data_wait_pct)},
               {"step_ms", JsonNum(r->step_ms)}, {"samples_per_s", JsonNum(r->samples_per_s)},
               {"samples_received", r->samples_received}};
      out.push_back({{"name", t.name}, {"leader_rank", d.tags.rank},
                     {"leader_file", run.rank_file[i]}, {"host", d.tags.host}, {"pid", t.pid},
                     {"end", std::string(TrialEndName(t.end))}, {"attach_s", JsonNum(t.attach_s)},
                     {"leave_s", JsonNum(t.leave_s)}, {"batches", t.batches},
                     {"samples", t.samples}, {"bytes", t.bytes}, {"epochs", t.epochs},
                     {"own_cpu_s", JsonNum(t.own_cpu_s)}, {"leader_cpu_s", JsonNum(t.leader_cpu_s)},
                     {"total_cpu_s", JsonNum(total_cpu)}, {"own_energy_j", JsonNum(t.own_energy_j)},
                     {"leader_energy_j", JsonNum(t.leader_energy_j)}, {"energy_j", JsonNum(energy)},
                     {"leader_gpu_s", JsonNum(t.leader_gpu_s)},
                     {"own_peak_rss_mib", static_cast<double>(t.own_peak_rss_bytes) / (1 << 20)},
                     {"leader_bytes", std::move(bytes)}, {"own_note", t.own_note},
                     {"own", std::move(own)}});
    }
  }
  return out;
}

Json NodeTable(const RunFiles& run, const JobSummary& job) {
  std::map<std::string, Json> nodes;
  std::vector<Process> procs = Processes(job.ranks);
  for (const RankStats& r : job.ranks) {
    Json& n = nodes[r.host];
    if (n.is_null())
      n = {{"host", r.host}, {"ranks", 0}, {"processes", 0}, {"cpu_s", 0.0},
           {"rss_peak_mib", 0.0}, {"samples_produced", 0.0}, {"samples_delivered", 0.0},
           {"wall_s", 0.0}};
    n["ranks"] = n["ranks"].get<int>() + 1;
    n["samples_produced"] = n["samples_produced"].get<double>() + r.samples_produced;
    n["wall_s"] = std::max(n["wall_s"].get<double>(), r.wall_s);
  }
  for (const Process& p : procs) {
    Json& n = nodes[p.host];
    n["processes"] = n["processes"].get<int>() + 1;
    n["cpu_s"] = n["cpu_s"].get<double>() + p.cpu_s;
    n["rss_peak_mib"] = n["rss_peak_mib"].get<double>() + p.rss_peak_mib;
  }
  for (const RankData& d : run.ranks)
    for (const TrialRecord& t : d.trials)
      nodes[d.tags.host]["samples_delivered"] =
          nodes[d.tags.host]["samples_delivered"].get<double>() + static_cast<double>(t.samples);
  // Energy per host: the rank that measured the longest (they read the same counters).
  for (auto& [host, n] : nodes) {
    double wall = -1, cpu_j = kNoValue, gpu_j = kNoValue;
    std::map<int, std::pair<double, double>> gpus;  // device -> (wall, J)
    for (size_t i = 0; i < run.ranks.size(); ++i) {
      const RankData& d = run.ranks[i];
      if (d.tags.host != host) continue;
      if (d.cpu_energy_present && d.wall_s > wall) wall = d.wall_s, cpu_j = job.ranks[i].cpu_energy_j;
      if (d.gpu_energy_present) {
        auto& g = gpus[d.gpu_index];
        if (d.wall_s >= g.first) g = {d.wall_s, job.ranks[i].gpu_energy_j};
      }
    }
    for (const auto& [dev, g] : gpus) gpu_j = (std::isnan(gpu_j) ? 0.0 : gpu_j) + g.second;
    n["cpu_energy_j"] = JsonNum(cpu_j);
    n["gpu_energy_j"] = JsonNum(gpu_j);
  }
  Json out = Json::array();
  for (auto& [host, n] : nodes) out.push_back(n);
  return out;
}

Json JobTable(const RunFiles& run, const JobSummary& job, const Diagnosis& diag) {
  const CostSummary& c = job.cost;
  double first = std::numeric_limits<double>::infinity(), last = 0;
  for (const RankData& d : run.ranks) {
    first = std::min(first, d.start_unix_s);
    last = std::max(last, d.start_unix_s + d.wall_s);
  }
  const double wall = run.ranks.empty() ? 0 : last - first;
  std::vector<Process> procs = Processes(job.ranks);
  double cpu = 0, rss = 0;
  for (const Process& p : procs) cpu += p.cpu_s, rss += p.rss_peak_mib;
  double delivered = c.samples_received, wait_sum = 0, gpu_sum = 0;
  int waits = 0, gpus = 0;
  for (const RankStats& r : job.ranks) {
    if (c.trials == 0 && r.is_consumer()) delivered += r.samples_received;
    if (r.is_consumer() && !std::isnan(r.data_wait_pct)) wait_sum += r.data_wait_pct, ++waits;
    if (!std::isnan(r.gpu_util_pct)) gpu_sum += r.gpu_util_pct, ++gpus;
  }
  double trial_total = 0;
  int trials_counted = 0;
  for (const RankData& d : run.ranks)
    for (const TrialRecord& t : d.trials)
      if (!std::isnan(t.own_cpu_s)) trial_total += t.own_cpu_s + t.leader_cpu_s, ++trials_counted;
  return {{"wall_s", JsonNum(wall)}, {"files", run.files.size()},
          {"unfinished_files", run.unfinished.size()}, {"processes", procs.size()},
          {"ranks", run.ranks.size()}, {"trials", c.trials}, {"trials_died", c.trials_died},
          {"samples_delivered", delivered}, {"samples_per_s", JsonNum(Ratio(delivered, wall))},
          {"data_wait_pct", JsonNum(waits > 0 ? wait_sum / waits : kNoValue)}, {"cpu_s", JsonNum(cpu)},
          {"cpu_s_per_1000_samples", JsonNum(Ratio(1000.0 * cpu, delivered))},
          {"rss_peak_mib", JsonNum(rss)}, {"gpu_util_pct", JsonNum(gpus > 0 ? gpu_sum / gpus : kNoValue)},
          {"cpu_energy_j", JsonNum(c.cpu_energy_j)}, {"gpu_energy_j", JsonNum(c.gpu_energy_j)},
          {"joules_per_epoch", JsonNum(c.joules_per_epoch)},
          {"joules_per_1000_samples", JsonNum(c.joules_per_1000_samples)},
          {"energy_note", c.energy_note}, {"leader_cpu_s", JsonNum(c.leader_cpu_s)},
          {"unattributed_cpu_s", JsonNum(c.unattributed_cpu_s)}, {"own_cpu_s", JsonNum(c.own_cpu_s)},
          {"alone_cpu_s", JsonNum(c.alone_cpu_s)}, {"saved_cpu_s", JsonNum(c.saved_cpu_s)},
          {"sharing", JsonNum(c.sharing)},
          {"cost_per_trial_cpu_s", JsonNum(trials_counted > 0 ? trial_total / trials_counted : kNoValue)},
          {"bottleneck", std::string(BottleneckName(diag.bottleneck))},
          {"stage", diag.stage}, {"headline", diag.headline}, {"notes", diag.notes}};
}

}  // namespace

Result<RunFiles> LoadRun(const std::string& path, const std::string& label) {
  RunFiles run;
  run.label = label;
  run.source = path;
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return ErrnoError(errno, "report: cannot read {}", path);
  std::vector<std::string> files;
  if (S_ISDIR(st.st_mode)) {
    BC_ASSIGN_OR_RETURN(files, TelemetryFilesIn(path));
    if (files.empty())
      return NotFoundError("report: run directory {} holds no telemetry file (*.h5); was the "
                           "run started with telemetry=dir:{}?", path, path);
  } else {
    files.push_back(path);
  }
  for (const std::string& f : files) {
    struct stat fs {};
    if (stat(f.c_str(), &fs) == 0 && fs.st_size == 0) {  // claimed at start, never written
      run.unfinished.push_back(f);
      continue;
    }
    BC_ASSIGN_OR_RETURN(std::vector<RankData> ranks, ReadTelemetryFile(f));
    run.files.push_back(f);
    for (RankData& d : ranks) {
      run.rank_in_file.push_back(d.tags.rank);
      d.tags.rank = static_cast<int>(run.ranks.size());
      run.rank_file.push_back(f);
      run.ranks.push_back(std::move(d));
    }
  }
  if (run.ranks.empty())
    return NotFoundError("report: {} has no written telemetry ({} file(s) empty: their "
                         "processes were killed or are still running)", path,
                         run.unfinished.size());
  return run;
}

std::string RunReportJson(const RunFiles& run, std::string* summary_text) {
  JobSummary job = Summarize(run.ranks);
  Diagnosis diag = Diagnose(job);
  // Summarize sorts by rank, which is the load order: job.ranks[i] is run.ranks[i].
  Json j;
  j["label"] = run.label;
  j["source"] = run.source;
  j["files"] = run.files;
  j["unfinished"] = run.unfinished;
  j["summary_text"] = FormatSummary(job, diag) + FormatTrials(run.ranks, job.cost);
  if (summary_text != nullptr) *summary_text = j["summary_text"].get<std::string>();
  j["diagnosis"] = {{"bottleneck", std::string(BottleneckName(diag.bottleneck))},
                    {"stage", diag.stage}, {"headline", diag.headline}, {"notes", diag.notes}};
  j["ranks"] = RankTable(run, job);
  j["trials"] = TrialsTable(run, job);
  j["nodes"] = NodeTable(run, job);
  j["job"] = JobTable(run, job, diag);
  return j.dump(1);
}

}  // namespace batchcast::telemetry
