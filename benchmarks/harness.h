// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The shared benchmark harness: repeated measurements summarised as min/median/max, a
// printed table, and exactly one machine-readable JSON line printed last.
#pragma once

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace batchcast::bench {

inline double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU-seconds used by every thread of this process so far. On a shared machine the CPU a
// single-threaded chain uses per sample varies far less than its wall time (which counts
// the time other processes held the core): cost ratios of 1-thread chains use this.
inline double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct Stats {
  double min = 0, median = 0, max = 0;
};

inline Stats Summarize(std::vector<double> v) {
  if (v.empty()) return Stats{};
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return Stats{v.front(), median, v.back()};
}

// A table of metrics, each with min / median / max over repetitions.
class Table {
 public:
  explicit Table(std::string title) : title_(std::move(title)) {}
  void Add(std::string metric, const Stats& s, std::string unit) {
    rows_.push_back(Row{std::move(metric), s, std::move(unit)});
  }
  void Print() const {
    std::printf("\n%s\n", title_.c_str());
    std::printf("%-44s %12s %12s %12s  %s\n", "metric", "min", "median", "max", "unit");
    std::printf("%s\n", std::string(96, '-').c_str());
    for (const Row& r : rows_)
      std::printf("%-44s %12.4g %12.4g %12.4g  %s\n", r.metric.c_str(), r.stats.min,
                  r.stats.median, r.stats.max, r.unit.c_str());
    std::fflush(stdout);
  }

 private:
  struct Row {
    std::string metric;
    Stats stats;
    std::string unit;
  };
  std::string title_;
  std::vector<Row> rows_;
};

// One flat JSON object on one line; Print() it last.
class JsonLine {
 public:
  void Add(const std::string& key, double v) { fields_.emplace_back(key, fmt::format("{:.6g}", v)); }
  void Add(const std::string& key, int64_t v) { fields_.emplace_back(key, std::to_string(v)); }
  void Add(const std::string& key, int v) { Add(key, static_cast<int64_t>(v)); }
  void Add(const std::string& key, const std::string& v) {
    std::string quoted = "\"";
    for (char c : v) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += c;
    }
    fields_.emplace_back(key, quoted + "\"");
  }
  void Print() const {
    std::string line = "{";
    for (size_t i = 0; i < fields_.size(); ++i)
      line += fmt::format("{}\"{}\": {}", i ? ", " : "", fields_[i].first, fields_[i].second);
    std::printf("%s}\n", line.c_str());
    std::fflush(stdout);
  }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

}  // namespace batchcast::bench
