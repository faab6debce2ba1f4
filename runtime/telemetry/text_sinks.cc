// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// CSV, JSON and Chrome-trace sinks. They stream with fmt into a FILE so that a large
// trace never needs a document tree in memory.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "core/errors.h"
#include "core/log.h"
#include "telemetry/sinks.h"

namespace batchcast::telemetry {
namespace {

class OutFile {
 public:
  static Result<OutFile> Open(const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) return ErrnoError(errno, "telemetry: cannot create {}", path);
    return OutFile(f, path);
  }
  OutFile(OutFile&& o) noexcept : f_(o.f_), path_(std::move(o.path_)) { o.f_ = nullptr; }
  ~OutFile() {
    if (f_ != nullptr) std::fclose(f_);
  }
  template <typename... Args>
  void Print(fmt::format_string<Args...> f, Args&&... args) {
    fmt::print(f_, f, std::forward<Args>(args)...);
  }
  Status Close() {
    bool bad = std::ferror(f_) != 0;
    int rc = std::fclose(f_);
    f_ = nullptr;
    if (bad || rc != 0) return ErrnoError(errno, "telemetry: writing {} failed", path_);
    return Status::Ok();
  }

 private:
  OutFile(FILE* f, std::string path) : f_(f), path_(std::move(path)) {}
  FILE* f_;
  std::string path_;
};

std::string Quote(const std::string& s) { return nlohmann::json(s).dump(); }

// A value as text: integers without a fraction, NaN as `nan_text`.
std::string Value(double v, int column, const char* nan_text) {
  if (std::isnan(v)) return nan_text;
  if (ColumnIsInteger(column)) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{:.6g}", v);
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// JSON number or null (JSON has no NaN).
std::string JsonNumber(double v) { return std::isnan(v) ? "null" : fmt::format("{:.9g}", v); }
// A recorded value exactly (shortest round-trip form); null when not finite.
std::string ExactNumber(double v) { return std::isfinite(v) ? fmt::format("{}", v) : "null"; }

}  // namespace

std::string NamedCsvPath(const std::string& csv_path) {
  const std::string ext = ".csv";
  if (csv_path.size() > ext.size() && csv_path.ends_with(ext))
    return csv_path.substr(0, csv_path.size() - ext.size()) + ".series.csv";
  return csv_path + ".series.csv";
}

namespace {

// The named series in long form: a row per point.
Status WriteNamedCsv(const std::string& path, const std::vector<RankData>& ranks) {
  BC_ASSIGN_OR_RETURN(OutFile out, OutFile::Open(path));
  out.Print("rank,local_rank,host,role,series,time_s,value\n");
  for (const auto& d : ranks) {
    std::string prefix = fmt::format("{},{},{},{}", d.tags.rank, d.tags.local_rank,
                                     CsvField(d.tags.host), RoleName(d.tags.role));
    for (const NamedSeries& s : d.named)
      for (size_t i = 0; i < s.time_s.size(); ++i)
        out.Print("{},{},{:.6f},{}\n", prefix, s.name, s.time_s[i],
                  std::isfinite(s.value[i]) ? fmt::format("{}", s.value[i]) : "");
  }
  return out.Close();
}

}  // namespace

Status WriteCsv(const std::string& path, const std::vector<RankData>& ranks) {
  // The side file only when some rank recorded a named series: csv=/dev/stdout, or a CSV in
  // a directory where no sibling can be made, then works as before the series existed.
  bool any_named = false;
  for (const auto& d : ranks) any_named = any_named || !d.named.empty();
  if (any_named) BC_RETURN_IF_ERROR(WriteNamedCsv(NamedCsvPath(path), ranks));
  BC_ASSIGN_OR_RETURN(OutFile out, OutFile::Open(path));
  out.Print("rank,local_rank,host,role");
  for (int c = 0; c < col::kNum; ++c) out.Print(",{}", ColumnName(c));
  out.Print("\n");
  for (const auto& d : ranks) {
    std::string prefix = fmt::format("{},{},{},{}", d.tags.rank, d.tags.local_rank,
                                     CsvField(d.tags.host), RoleName(d.tags.role));
    for (int64_t r = 0; r < d.num_rows(); ++r) {
      out.Print("{}", prefix);
      for (int c = 0; c < col::kNum; ++c) out.Print(",{}", Value(d.At(r, c), c, ""));
      out.Print("\n");
    }
  }
  return out.Close();
}

Status WriteJson(const std::string& path, const std::vector<RankData>& ranks,
                 const JobSummary& j, const Diagnosis& diag) {
  BC_ASSIGN_OR_RETURN(OutFile out, OutFile::Open(path));
  nlohmann::json notes = diag.notes;
  out.Print("{{\"format\":\"batchcast-telemetry\",\"format_version\":{},", kFormatVersion);
  out.Print("\"experiment\":{},\"workload\":{},\"run\":{},\"wall_s\":{},", Quote(j.experiment),
            Quote(j.workload), Quote(j.run), JsonNumber(j.wall_s));
  out.Print("\"diagnosis\":{{\"bottleneck\":\"{}\",\"stage\":{},\"headline\":{},\"notes\":{}}},",
            BottleneckName(diag.bottleneck), Quote(diag.stage), Quote(diag.headline),
            notes.dump());
  out.Print("\"ranks\":[");
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankData& d = ranks[i];
    RankStats s = ComputeRankStats(d);
    out.Print("{}{{\"rank\":{},\"local_rank\":{},\"host\":{},\"role\":\"{}\",\"pid\":{},",
              i ? "," : "", d.tags.rank, d.tags.local_rank, Quote(d.tags.host),
              RoleName(d.tags.role), d.pid);
    out.Print("\"experiment\":{},\"workload\":{},\"run\":{},\"annotations\":{},",
              Quote(d.tags.experiment), Quote(d.tags.workload), Quote(d.tags.run),
              Quote(d.annotations));
    out.Print("\"start_unix_s\":{},\"interval_s\":{},\"wall_s\":{},\"gpu_present\":{},",
              JsonNumber(d.start_unix_s), JsonNumber(d.interval_s), JsonNumber(d.wall_s),
              d.gpu_present ? "true" : "false");
    out.Print("\"cpu_seconds\":{},\"cpu_energy_source\":{},\"gpu_energy_source\":{},",
              JsonNumber(d.cpu_seconds), Quote(d.cpu_energy_source), Quote(d.gpu_energy_source));
    if (!d.trials.empty()) out.Print("\"trials\":{},", TrialsJson(d.trials, d.trial_totals));
    out.Print("\"stats\":{{\"samples_per_s\":{},\"batches_per_s\":{},\"data_wait_pct\":{},"
              "\"step_ms\":{},\"cpu_cores\":{},\"rss_peak_mib\":{},\"gpu_util_pct\":{},"
              "\"worker_util\":{},\"spans_dropped\":{}}},",
              JsonNumber(s.samples_per_s), JsonNumber(s.batches_per_s),
              JsonNumber(s.data_wait_pct), JsonNumber(s.step_ms), JsonNumber(s.cpu_cores),
              JsonNumber(s.rss_peak_mib), JsonNumber(s.gpu_util_pct), JsonNumber(s.worker_util),
              d.spans_dropped);
    out.Print("\"series\":{{");
    bool first = true;
    for (int c = 0; c < col::kNum; ++c) {
      if (!ColumnPresent(d, c)) continue;
      out.Print("{}\"{}\":[", first ? "" : ",", ColumnName(c));
      first = false;
      for (int64_t r = 0; r < d.num_rows(); ++r)
        out.Print("{}{}", r ? "," : "", Value(d.At(r, c), c, "null"));
      out.Print("]");
    }
    out.Print("}},\"named\":{{");
    for (size_t k = 0; k < d.named.size(); ++k) {
      const NamedSeries& n = d.named[k];
      out.Print("{}{}:{{\"stride\":{},\"time_s\":[", k ? "," : "", Quote(n.name), n.stride);
      for (size_t p = 0; p < n.time_s.size(); ++p)
        out.Print("{}{}", p ? "," : "", JsonNumber(n.time_s[p]));
      out.Print("],\"value\":[");
      for (size_t p = 0; p < n.value.size(); ++p)
        out.Print("{}{}", p ? "," : "", ExactNumber(n.value[p]));
      out.Print("]}}");
    }
    out.Print("}}}}");
  }
  out.Print("]}}\n");
  return out.Close();
}

Status WriteTrace(const std::string& path, const std::vector<RankData>& ranks) {
  BC_ASSIGN_OR_RETURN(OutFile out, OutFile::Open(path));
  double t0 = ranks.empty() ? 0 : ranks[0].start_unix_s;
  for (const auto& d : ranks) t0 = std::min(t0, d.start_unix_s);
  // Timestamps in µs since the earliest collector start, via each rank's realtime anchor.
  auto ts_us = [t0](const RankData& d, int64_t mono_ns) {
    return (d.start_unix_s - t0) * 1e6 + static_cast<double>(mono_ns - d.start_mono_ns) * 1e-3;
  };
  out.Print("{{\"displayTimeUnit\":\"ms\",\"otherData\":{{\"format\":\"batchcast-trace\"}},"
            "\"traceEvents\":[\n");
  bool first = true;
  auto sep = [&first] {
    const char* s = first ? "" : ",\n";
    first = false;
    return s;
  };
  // Where each producer batch was published (or produced): the start of its flow arrows.
  struct Origin {
    int pid, tid;
    double ts;
  };
  std::unordered_map<uint64_t, Origin> origin;
  for (const auto& d : ranks) {
    out.Print("{}{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"args\":{{\"name\":{}}}}}",
              sep(), d.tags.rank,
              Quote(fmt::format("rank {} {} ({})", d.tags.rank, RoleName(d.tags.role),
                                d.tags.host)));
    out.Print("{}{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{},"
              "\"args\":{{\"sort_index\":{}}}}}",
              sep(), d.tags.rank, d.tags.rank);
    for (const auto& s : d.spans) {
      auto kind = static_cast<SpanKind>(s.kind);
      if (kind != SpanKind::kPublish && kind != SpanKind::kProduce) continue;
      auto it = origin.find(s.seq);
      if (it == origin.end() || kind == SpanKind::kPublish)
        origin[s.seq] = {d.tags.rank, s.tid, ts_us(d, s.begin_ns)};
    }
  }
  int64_t flow_id = 0;
  for (const auto& d : ranks) {
    // Named series as counter tracks of the rank's process (one track per name).
    for (const NamedSeries& n : d.named)
      for (size_t p = 0; p < n.time_s.size(); ++p)
        if (std::isfinite(n.value[p]))
          out.Print("{}{{\"ph\":\"C\",\"name\":{},\"pid\":{},\"ts\":{:.3f},"
                    "\"args\":{{\"value\":{}}}}}",
                    sep(), Quote(n.name), d.tags.rank, (d.start_unix_s - t0 + n.time_s[p]) * 1e6,
                    ExactNumber(n.value[p]));
    for (const auto& s : d.spans) {
      if (s.kind < 0 || s.kind >= kNumSpanKinds) continue;
      auto kind = static_cast<SpanKind>(s.kind);
      double ts = ts_us(d, s.begin_ns);
      double dur = std::max(0.0, static_cast<double>(s.end_ns - s.begin_ns) * 1e-3);
      out.Print("{}{{\"ph\":\"X\",\"name\":\"{} #{}\",\"cat\":\"{}\",\"pid\":{},\"tid\":{},"
                "\"ts\":{:.3f},\"dur\":{:.3f},\"args\":{{\"seq\":{}}}}}",
                sep(), SpanKindName(kind), s.seq, SpanKindName(kind), d.tags.rank, s.tid, ts,
                dur, s.seq);
      if (kind != SpanKind::kStep) continue;
      auto it = origin.find(s.seq);
      if (it == origin.end()) continue;
      ++flow_id;
      out.Print("{}{{\"ph\":\"s\",\"name\":\"batch\",\"cat\":\"flow\",\"id\":{},\"pid\":{},"
                "\"tid\":{},\"ts\":{:.3f}}}",
                sep(), flow_id, it->second.pid, it->second.tid, it->second.ts);
      out.Print("{}{{\"ph\":\"f\",\"bp\":\"e\",\"name\":\"batch\",\"cat\":\"flow\",\"id\":{},"
                "\"pid\":{},\"tid\":{},\"ts\":{:.3f}}}",
                sep(), flow_id, d.tags.rank, s.tid, ts);
    }
  }
  out.Print("\n]}}\n");
  return out.Close();
}

}  // namespace batchcast::telemetry
