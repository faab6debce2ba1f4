// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "telemetry/rank_data.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cmath>
#include <limits>

#include "core/errors.h"

namespace batchcast::telemetry {

std::string ColumnName(int c) {
  if (c == col::kTime) return "time_s";
  if (c < col::kTimerNs) return std::string(CounterName(static_cast<Counter>(c - col::kCounters)));
  if (c < col::kTimerCount)
    return std::string(TimerName(static_cast<Timer>(c - col::kTimerNs))) + "_ns";
  if (c < col::kGauges)
    return std::string(TimerName(static_cast<Timer>(c - col::kTimerCount))) + "_count";
  if (c < col::kCpuCores) return std::string(GaugeName(static_cast<Gauge>(c - col::kGauges)));
  switch (c) {
    case col::kCpuCores: return "cpu_cores";
    case col::kRssBytes: return "rss_bytes";
    case col::kGpuUtil: return "gpu_util_pct";
    case col::kGpuMem: return "gpu_mem_bytes";
    case col::kCpuEnergy: return "cpu_energy_j";
    case col::kGpuEnergy: return "gpu_energy_j";
    case col::kNodeCpu: return "node_cpu_s";
    default: return "column_" + std::to_string(c);
  }
}

bool ColumnIsInteger(int c) {
  return (c >= col::kCounters && c < col::kGauges) || c == col::kRssBytes || c == col::kGpuMem;
}

bool ColumnPresent(const RankData& d, int c) {
  if (ColumnIsGpu(c)) return d.gpu_present;
  if (c == col::kCpuEnergy) return d.cpu_energy_present;
  if (c == col::kGpuEnergy) return d.gpu_energy_present;
  return true;
}

Status ValidateSeriesName(std::string_view name) {
  if (name.empty() || name.size() > 200)
    return InvalidArgumentError("telemetry: series name '{}' must have 1 to 200 characters", name);
  size_t segment = 0;
  for (size_t i = 0; i <= name.size(); ++i) {
    if (i == name.size() || name[i] == '/') {
      if (i == segment || name.substr(segment, i - segment) == "." ||
          name.substr(segment, i - segment) == "..")
        return InvalidArgumentError(
            "telemetry: series name '{}' has an empty, '.' or '..' segment; write segments "
            "separated by single '/', e.g. model/lenet/loss", name);
      segment = i + 1;
      continue;
    }
    const auto c = static_cast<unsigned char>(name[i]);
    if (!std::isalnum(c) && c != '_' && c != '.' && c != '-')
      return InvalidArgumentError(
          "telemetry: series name '{}' has '{}' at position {}; use letters, digits, '_', '.', "
          "'-' and '/' between segments", name, name[i], i);
  }
  return Status::Ok();
}

const NamedSeries* RankData::Named(std::string_view name) const {
  for (const NamedSeries& s : named)
    if (s.name == name) return &s;
  return nullptr;
}

namespace {

constexpr const char* kTransportNames[kNumTransports] = {"shm", "mpi", "h2d", "ipc", "nccl"};

nlohmann::json Measured(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }
double MeasuredFrom(const nlohmann::json& j) {
  return j.is_null() ? std::numeric_limits<double>::quiet_NaN() : j.get<double>();
}

}  // namespace

std::string TrialsJson(const std::vector<TrialRecord>& trials, const LedgerTotals& t) {
  nlohmann::json j;
  j["totals"] = {{"unattributed_cpu_s", Measured(t.unattributed_cpu_s)},
                 {"unattributed_gpu_s", Measured(t.unattributed_gpu_s)},
                 {"unattributed_energy_j", Measured(t.unattributed_energy_j)},
                 {"samples_published", t.samples_published},
                 {"batches_published", t.batches_published},
                 {"epochs_published", t.epochs_published}};
  nlohmann::json list = nlohmann::json::array();
  for (const TrialRecord& r : trials) {
    nlohmann::json bytes;
    for (int i = 0; i < kNumTransports; ++i) bytes[kTransportNames[i]] = r.transport_bytes[i];
    list.push_back({{"member", r.member}, {"pid", r.pid}, {"rank", r.rank}, {"name", r.name},
                    {"attach_s", Measured(r.attach_s)}, {"leave_s", Measured(r.leave_s)},
                    {"end", std::string(TrialEndName(r.end))}, {"batches", r.batches},
                    {"samples", r.samples}, {"bytes", r.bytes}, {"epochs", r.epochs},
                    {"own_cpu_s", Measured(r.own_cpu_s)},
                    {"own_peak_rss_bytes", r.own_peak_rss_bytes},
                    {"own_energy_j", Measured(r.own_energy_j)}, {"own_note", r.own_note},
                    {"leader_cpu_s", Measured(r.leader_cpu_s)},
                    {"leader_gpu_s", Measured(r.leader_gpu_s)},
                    {"leader_energy_j", Measured(r.leader_energy_j)},
                    {"leader_bytes", std::move(bytes)}});
  }
  j["trials"] = std::move(list);
  return j.dump();
}

Status ParseTrialsJson(std::string_view text, std::vector<TrialRecord>* trials,
                       LedgerTotals* totals) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return CorruptDataError("telemetry: the trial ledger is not a JSON object");
  try {
    const auto& t = j.at("totals");
    totals->unattributed_cpu_s = MeasuredFrom(t.at("unattributed_cpu_s"));
    totals->unattributed_gpu_s = MeasuredFrom(t.at("unattributed_gpu_s"));
    totals->unattributed_energy_j = MeasuredFrom(t.at("unattributed_energy_j"));
    totals->samples_published = t.at("samples_published");
    totals->batches_published = t.at("batches_published");
    totals->epochs_published = t.at("epochs_published");
    trials->clear();
    for (const auto& e : j.at("trials")) {
      TrialRecord r;
      r.member = e.at("member");
      r.pid = e.at("pid");
      r.rank = e.at("rank");
      r.name = e.at("name").get<std::string>();
      r.attach_s = MeasuredFrom(e.at("attach_s"));
      r.leave_s = MeasuredFrom(e.at("leave_s"));
      if (!ParseTrialEnd(e.at("end").get<std::string>(), &r.end))
        return CorruptDataError("telemetry: trial '{}' ended in an unknown way '{}'", r.name,
                                e.at("end").get<std::string>());
      r.batches = e.at("batches");
      r.samples = e.at("samples");
      r.bytes = e.at("bytes");
      r.epochs = e.at("epochs");
      r.own_cpu_s = MeasuredFrom(e.at("own_cpu_s"));
      r.own_peak_rss_bytes = e.at("own_peak_rss_bytes");
      r.own_energy_j = MeasuredFrom(e.at("own_energy_j"));
      r.own_note = e.at("own_note").get<std::string>();
      r.leader_cpu_s = MeasuredFrom(e.at("leader_cpu_s"));
      r.leader_gpu_s = MeasuredFrom(e.at("leader_gpu_s"));
      r.leader_energy_j = MeasuredFrom(e.at("leader_energy_j"));
      for (int i = 0; i < kNumTransports; ++i)
        r.transport_bytes[i] = e.at("leader_bytes").at(kTransportNames[i]);
      trials->push_back(std::move(r));
    }
  } catch (const nlohmann::json::exception& e) {
    return CorruptDataError("telemetry: the trial ledger is malformed: {}", e.what());
  }
  return Status::Ok();
}

std::string SerializeRankData(const RankData& d) {
  nlohmann::json j;
  j["tags"] = {d.tags.experiment, d.tags.workload,   d.tags.run,
               d.tags.host,       d.tags.rank,       d.tags.local_rank,
               static_cast<int>(d.tags.role), d.tags.gpu};
  j["pid"] = d.pid;
  j["start"] = {d.start_unix_s, d.start_mono_ns};
  j["proc"] = {d.interval_s, d.wall_s, d.cpu_seconds, d.peak_rss_bytes, d.cores_available};
  j["gpu"] = {d.gpu_present, d.gpu_name, d.gpu_index};
  j["dropped"] = d.spans_dropped;
  j["rows"] = d.rows;  // NaN becomes null in JSON but CBOR keeps it
  std::vector<int64_t> spans;
  spans.reserve(d.spans.size() * 5);
  for (const auto& s : d.spans) {
    spans.insert(spans.end(), {s.kind, s.tid, static_cast<int64_t>(s.seq), s.begin_ns, s.end_ns});
  }
  j["spans"] = std::move(spans);
  j["notes"] = d.annotations;
  nlohmann::json named = nlohmann::json::array();
  for (const NamedSeries& s : d.named) named.push_back({s.name, s.stride, s.time_s, s.value});
  j["named"] = std::move(named);
  j["energy"] = {d.cpu_energy_present, d.gpu_energy_present, d.cpu_energy_source,
                 d.gpu_energy_source};
  j["trials"] = TrialsJson(d.trials, d.trial_totals);
  std::vector<uint8_t> cbor = nlohmann::json::to_cbor(j);
  return std::string(cbor.begin(), cbor.end());
}

Result<RankData> DeserializeRankData(std::string_view bytes) {
  nlohmann::json j = nlohmann::json::from_cbor(bytes.begin(), bytes.end(), true, false);
  if (j.is_discarded() || !j.is_object())
    return CorruptDataError("telemetry: gathered rank record of {} bytes is not valid CBOR",
                            bytes.size());
  RankData d;
  try {
    const auto& t = j.at("tags");
    d.tags = Tags{t[0], t[1], t[2], t[3], t[4], t[5], static_cast<Role>(t[6].get<int>()), t[7]};
    d.pid = j.at("pid");
    d.start_unix_s = j.at("start")[0];
    d.start_mono_ns = j.at("start")[1];
    const auto& p = j.at("proc");
    d.interval_s = p[0];
    d.wall_s = p[1];
    d.cpu_seconds = p[2];
    d.peak_rss_bytes = p[3];
    d.cores_available = p[4];
    d.gpu_present = j.at("gpu")[0];
    d.gpu_name = j.at("gpu")[1];
    if (j.at("gpu").size() > 2) d.gpu_index = j.at("gpu")[2];
    d.spans_dropped = j.at("dropped");
    d.rows = j.at("rows").get<std::vector<double>>();
    if (j.contains("notes")) d.annotations = j.at("notes").get<std::string>();
    if (j.contains("named")) {
      for (const auto& s : j.at("named")) {
        NamedSeries n{s.at(0).get<std::string>(), s.at(2).get<std::vector<double>>(),
                      s.at(3).get<std::vector<double>>(), s.at(1).get<int64_t>()};
        if (n.time_s.size() != n.value.size())
          return CorruptDataError("telemetry: series '{}' has {} times and {} values", n.name,
                                  n.time_s.size(), n.value.size());
        d.named.push_back(std::move(n));
      }
    }
    if (j.contains("energy")) {
      const auto& e = j.at("energy");
      d.cpu_energy_present = e.at(0);
      d.gpu_energy_present = e.at(1);
      d.cpu_energy_source = e.at(2).get<std::string>();
      d.gpu_energy_source = e.at(3).get<std::string>();
    }
    if (j.contains("trials"))
      BC_RETURN_IF_ERROR(ParseTrialsJson(j.at("trials").get<std::string>(), &d.trials,
                                         &d.trial_totals));
    auto spans = j.at("spans").get<std::vector<int64_t>>();
    for (size_t i = 0; i + 4 < spans.size(); i += 5)
      d.spans.push_back({static_cast<int32_t>(spans[i]), static_cast<int32_t>(spans[i + 1]),
                         static_cast<uint64_t>(spans[i + 2]), spans[i + 3], spans[i + 4]});
  } catch (const nlohmann::json::exception& e) {
    return CorruptDataError("telemetry: gathered rank record is malformed: {}", e.what());
  }
  if (d.rows.size() % col::kNum != 0)
    return CorruptDataError("telemetry: rank {} sent {} values, not a multiple of {} columns",
                            d.tags.rank, d.rows.size(), col::kNum);
  return d;
}

}  // namespace batchcast::telemetry
