// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "telemetry/spec.h"

#include <charconv>
#include <string>

#include "core/errors.h"
#include "core/log.h"
#include "core/units.h"

namespace batchcast::telemetry {
namespace {

constexpr const char* kKeys =
    "dir, hdf5, csv, json, trace, interval, rows, spans, gpu, energy, summary";

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool ParseInt(std::string_view s, int64_t* out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && *out >= 0;
}

// "250ms", "1s", "2m", "500" (ms) → milliseconds, by the options registry's rule.
bool ParseMs(std::string_view s, int64_t* out) {
  return ParseDuration(s, out).ok();
}

bool ParseFlag(std::string_view s, bool* out) {
  if (s == "1" || s == "true" || s == "on" || s == "yes") *out = true;
  else if (s == "0" || s == "false" || s == "off" || s == "no") *out = false;
  else return false;
  return true;
}

Status SpecError(std::string_view text, size_t pos, const std::string& what) {
  return InvalidArgumentError("telemetry spec '{}': {} at position {}\n  {}\n  {}^", text, what,
                              pos, text, std::string(pos, ' '));
}

Status ApplyKey(std::string_view text, size_t pos, std::string_view key, std::string_view value,
                TelemetrySpec* spec) {
  std::string v(value);
  bool ok = true;
  if (key == "dir") spec->dir = v;
  else if (key == "hdf5") spec->sinks.hdf5 = v;
  else if (key == "csv") spec->sinks.csv = v;
  else if (key == "json") spec->sinks.json = v;
  else if (key == "trace") spec->sinks.trace = v;
  else if (key == "interval") ok = ParseMs(value, &spec->collector.interval_ms);
  else if (key == "rows") ok = ParseInt(value, &spec->collector.max_rows);
  else if (key == "spans") ok = ParseInt(value, &spec->collector.max_spans);
  else if (key == "gpu") ok = ParseFlag(value, &spec->collector.gpu);
  else if (key == "energy") ok = ParseFlag(value, &spec->collector.energy);
  else if (key == "summary") ok = ParseFlag(value, &spec->sinks.print_summary);
  else return SpecError(text, pos, fmt::format("unknown key '{}' (expected {})", key, kKeys));
  if (!ok) return SpecError(text, pos, fmt::format("bad value '{}' for '{}'", value, key));
  if (value.empty()) return SpecError(text, pos, fmt::format("empty value for '{}'", key));
  return Status::Ok();
}

// With a run directory the CSV, JSON and trace outputs are switched on or off (their files are
// named by the rule); without one they are paths, and "on" would be a file named "on".
Status CheckDirOutputs(std::string_view text, TelemetrySpec* spec) {
  Sinks& s = spec->sinks;
  if (!spec->dir.empty() && !s.hdf5.empty())
    return InvalidArgumentError(
        "telemetry spec '{}': hdf5={} and dir={} both given; a run directory always holds "
        "each process's HDF5 file (drop hdf5=)", text, s.hdf5, spec->dir);
  for (auto [key, value] : {std::pair{"csv", &s.csv}, {"json", &s.json}, {"trace", &s.trace}}) {
    bool flag = false;
    const bool is_flag = ParseFlag(*value, &flag);
    if (!spec->dir.empty()) {
      if (!value->empty() && !is_flag)
        return InvalidArgumentError(
            "telemetry spec '{}': {}={} with dir={}: in a run directory every file is named "
            "by the run's rule; write {}=on (or give no dir= and a path)",
            text, key, *value, spec->dir, key);
      *value = flag ? "on" : "";
    } else if (is_flag) {
      if (flag)
        return InvalidArgumentError(
            "telemetry spec '{}': {}={} needs a run directory (dir=RUN) to name the file; "
            "give a path instead ({}=run.{})",
            text, key, *value, key, std::string_view(key) == "trace" ? "trace.json" : key);
      value->clear();
    }
  }
  return Status::Ok();
}

}  // namespace

Result<TelemetrySpec> ParseTelemetrySpec(std::string_view text) {
  TelemetrySpec spec;
  std::string_view t = Trim(text);
  if (t.empty() || t == "off" || t == "none" || t == "false" || t == "0") return spec;
  spec.enabled = true;
  if (t == "on" || t == "true" || t == "1") return spec;
  if (t.substr(0, 4) == "dir:") {  // the short form of telemetry(dir=RUN)
    spec.dir = std::string(Trim(t.substr(4)));
    if (spec.dir.empty())
      return SpecError(text, static_cast<size_t>(t.data() - text.data()) + 4,
                       "empty run directory after 'dir:'");
    return spec;
  }
  size_t base = static_cast<size_t>(t.data() - text.data());
  if (t.substr(0, 10) == "telemetry(") {
    if (t.back() != ')') return SpecError(text, base + t.size(), "missing ')'");
    t = t.substr(10, t.size() - 11);
    base += 10;
  }
  size_t start = 0;
  while (start <= t.size()) {
    size_t end = t.find(',', start);
    if (end == std::string_view::npos) end = t.size();
    std::string_view item = t.substr(start, end - start);
    size_t pos = base + start;
    size_t eq = item.find('=');
    if (Trim(item).empty()) {
      if (end == t.size() && start > 0) break;  // tolerate a trailing comma
      return SpecError(text, pos, "empty entry");
    }
    if (eq == std::string_view::npos) return SpecError(text, pos, "expected key=value");
    BC_RETURN_IF_ERROR(
        ApplyKey(text, pos, Trim(item.substr(0, eq)), Trim(item.substr(eq + 1)), &spec));
    start = end + 1;
  }
  if (spec.collector.interval_ms < 10)
    return InvalidArgumentError("telemetry spec '{}': interval must be at least 10ms", text);
  BC_RETURN_IF_ERROR(CheckDirOutputs(text, &spec));
  return spec;
}

}  // namespace batchcast::telemetry
