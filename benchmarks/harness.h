// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The shared benchmark harness: repeated measurements summarised as min/median/max, a
// printed table, and exactly one machine-readable JSON line printed last.
#pragma once

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
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

// The CPU-time cost ratios of 1-thread chains, measured in pairs (bench_decode, bench_views):
// one repetition walks the set in slices of --slice samples and runs every chain on a slice before the next
// slice (the first chain to run rotates from slice to slice), summing each chain's process
// CPU seconds. A change in the machine's speed (a busy vCPU sibling, another VM on the host)
// then hits every chain alike within milliseconds; whole-epoch runs one after another (the
// wall-clock rows) let it land on one chain and spread a quiet 2-vCPU VM's gaps over
// -0.05..0.34 within one run.
class PairedCpu {
 public:
  using Turn = std::function<double(uint64_t epoch, int64_t first, int64_t count)>;
  void Add(Turn turn) {
    turns_.push_back(std::move(turn));
    rates_.emplace_back();
  }
  void Epoch(uint64_t epoch, int64_t n, int slice) {
    std::vector<double> cpu(turns_.size(), 0.0);
    size_t start = 0;
    for (int64_t first = 0; first < n; first += slice, ++start) {
      const int64_t count = std::min<int64_t>(slice, n - first);
      for (size_t j = 0; j < turns_.size(); ++j) {
        const size_t t = (start + j) % turns_.size();
        cpu[t] += turns_[t](epoch, first, count);
      }
    }
    for (size_t t = 0; t < turns_.size(); ++t) rates_[t].push_back(double(n) / cpu[t]);
  }
  // Samples per CPU-second of turn t, one value per Epoch().
  const std::vector<double>& cpu_rates(size_t t) const { return rates_[t]; }

 private:
  std::vector<Turn> turns_;
  std::vector<std::vector<double>> rates_;
};


// The *.jpg files of `dir` in name order, at most `max` of them (the decode benchmark's
// real-photo set: bench_decode --make-set builds it).
inline std::vector<std::vector<uint8_t>> LoadJpegSet(const std::string& dir, size_t max) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".jpg") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.size() > max) files.resize(max);
  std::vector<std::vector<uint8_t>> set;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    set.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return set;
}

// The load average over 1, 5 and 15 minutes, as `uptime` prints it ("" when unknown).
inline std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double a = 0, b = 0, c = 0;
  if (!(in >> a >> b >> c)) return "";
  return fmt::format("{:.2f} {:.2f} {:.2f}", a, b, c);
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
