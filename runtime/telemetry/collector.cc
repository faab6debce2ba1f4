// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Collector: sharded lock-free recording, the sampler thread and the bounded tables.
#include "telemetry/collector.h"

#include <time.h>
#include <unistd.h>

#include <cmath>
#include <limits>

#include "core/cores.h"
#include "core/errors.h"
#include "core/log.h"
#include "telemetry/process_stats.h"
#include "telemetry/spec.h"

namespace batchcast::telemetry {

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

namespace {

double UnixNowS() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

uint64_t RoundUpPow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

std::atomic<int> g_next_thread{0};

}  // namespace

int Collector::ThreadIndex() {
  thread_local int index = g_next_thread.fetch_add(1, std::memory_order_relaxed);
  return index;
}

Result<std::unique_ptr<Collector>> Collector::Create(Tags tags, CollectorOptions options) {
  if (options.interval_ms < 10)
    return InvalidArgumentError("telemetry: interval must be at least 10ms, got {}ms",
                                options.interval_ms);
  if (options.max_rows < 16)
    return InvalidArgumentError("telemetry: rows must be at least 16, got {}", options.max_rows);
  if (options.max_spans < 0 || options.max_spans > (1LL << 26))
    return InvalidArgumentError("telemetry: spans must be in [0, 67108864], got {}",
                                options.max_spans);
  if (tags.host.empty()) tags.host = HostName();
  std::unique_ptr<Collector> c(new Collector(std::move(tags), options));
  c->sampler_ = std::thread([p = c.get()] { p->SamplerLoop(); });
  return c;
}

Collector::Collector(Tags tags, CollectorOptions options)
    : tags_(std::move(tags)), options_(std::move(options)), ledger_(static_cast<int>(getpid())) {
  if (options_.max_spans > 0) {
    uint64_t cap = RoundUpPow2(static_cast<uint64_t>(options_.max_spans));
    spans_.reset(new SpanSlot[cap]);
    span_mask_ = cap - 1;
  }
  rows_.reserve(static_cast<size_t>(options_.max_rows) * col::kNum);
  if (options_.gpu) nvml_ = Nvml::Open(PickGpuIndex(tags_.gpu, tags_.local_rank));
  start_unix_s_ = UnixNowS();
  start_mono_ns_ = NowNs();
  last_row_ns_ = start_mono_ns_;
  last_cpu_s_ = ProcessCpuSeconds();
  start_cpu_s_ = last_cpu_s_;
  start_node_busy_s_ = last_node_busy_s_ = NodeBusyCpuSeconds();
  std::string why = "telemetry energy=off";
  if (options_.energy) rapl_ = RaplReader::Open(options_.powercap_root, &why);
  cpu_energy_source_ = rapl_ ? rapl_->description() : "n/a: " + why;
  gpu_energy_source_ = !options_.gpu  ? "n/a: telemetry gpu=off"
                       : !nvml_       ? "n/a: no GPU seen through NVML"
                       : !options_.energy ? "n/a: telemetry energy=off"
                                      : "n/a: the GPU reported neither energy nor power";
  BC_LOG(Info, Telem, "telemetry: collecting every {}ms as {} (rank {}, {} span slots, gpu {}, "
         "cpu energy {})", options_.interval_ms, RoleName(tags_.role), tags_.rank,
         spans_ ? span_mask_ + 1 : 0, nvml_ ? nvml_->name : std::string("absent"),
         cpu_energy_source_);
}

Collector::~Collector() { StopSampler(); }

void Collector::Span(SpanKind kind, uint64_t seq, int64_t begin_ns, int64_t end_ns) {
  if (!spans_) return;
  uint64_t index = span_head_.fetch_add(1, std::memory_order_relaxed);
  SpanSlot& s = spans_[index & span_mask_];
  // A writer that laps another on the same slot makes the older record unreadable
  // (version mismatch) rather than torn; readers only run after the data plane stopped.
  s.version.store(0, std::memory_order_relaxed);
  s.kind_tid.store((static_cast<uint64_t>(kind) << 32) | static_cast<uint32_t>(ThreadIndex()),
                   std::memory_order_relaxed);
  s.seq.store(seq, std::memory_order_relaxed);
  s.begin_ns.store(begin_ns, std::memory_order_relaxed);
  s.end_ns.store(end_ns, std::memory_order_relaxed);
  s.version.store(index + 1, std::memory_order_release);
}

void Collector::SamplerLoop() {
  std::unique_lock lock(sample_mu_);
  while (!stop_) {
    int64_t due = last_row_ns_ + options_.interval_ms * 1000000LL * stride_;
    int64_t wait_ns = due - NowNs();
    if (wait_ns > 0) {
      sample_cv_.wait_for(lock, std::chrono::nanoseconds(wait_ns));
      continue;  // re-check stop_ and the deadline (spurious wake-ups)
    }
    TakeRow();
  }
}

void Collector::TakeRow() {
  int64_t now = NowNs();
  double row[col::kNum];
  row[col::kTime] = (now - start_mono_ns_) * 1e-9;
  for (int i = 0; i < kNumCounters; ++i) row[col::kCounters + i] = 0;
  for (int i = 0; i < kNumTimers; ++i) row[col::kTimerNs + i] = row[col::kTimerCount + i] = 0;
  double gauge_sum[kNumGauges] = {};
  int64_t gauge_count[kNumGauges] = {};
  for (const ShardT& s : shards_) {
    for (int i = 0; i < kNumCounters; ++i)
      row[col::kCounters + i] += static_cast<double>(s.counters[i].load(std::memory_order_relaxed));
    for (int i = 0; i < kNumTimers; ++i) {
      row[col::kTimerNs + i] += static_cast<double>(s.timer_ns[i].load(std::memory_order_relaxed));
      row[col::kTimerCount + i] +=
          static_cast<double>(s.timer_count[i].load(std::memory_order_relaxed));
    }
    for (int i = 0; i < kNumGauges; ++i) {
      gauge_sum[i] += s.gauge_sum[i].load(std::memory_order_relaxed);
      gauge_count[i] += s.gauge_count[i].load(std::memory_order_relaxed);
    }
  }
  for (int i = 0; i < kNumGauges; ++i) {
    int64_t n = gauge_count[i] - prev_gauge_count_[i];
    row[col::kGauges + i] = n > 0 ? (gauge_sum[i] - prev_gauge_sum_[i]) / static_cast<double>(n)
                                  : gauge_last_[i].load(std::memory_order_relaxed);
    prev_gauge_sum_[i] = gauge_sum[i];
    prev_gauge_count_[i] = gauge_count[i];
  }
  double cpu = ProcessCpuSeconds();
  double dt = (now - last_row_ns_) * 1e-9;
  row[col::kCpuCores] = dt > 0 ? (cpu - last_cpu_s_) / dt : 0.0;
  row[col::kRssBytes] = static_cast<double>(ProcessRssBytes());
  GpuReading gpu;
  bool have_gpu = nvml_ && nvml_->Read(&gpu);
  row[col::kGpuUtil] = have_gpu ? gpu.util_pct : std::numeric_limits<double>::quiet_NaN();
  row[col::kGpuMem] =
      have_gpu ? static_cast<double>(gpu.mem_used) : std::numeric_limits<double>::quiet_NaN();
  if (have_gpu && options_.energy) ReadGpuEnergy(gpu, dt);
  row[col::kGpuEnergy] = gpu_energy_j_;
  if (rapl_) {
    std::string why;
    if (!rapl_->Read(&cpu_energy_j_, &why) && !rapl_warned_) {
      rapl_warned_ = true;  // the total holds; the gap is not energy we measured
      BC_LOG(Warn, Telem, "telemetry: rapl: {}: energy of these intervals is missing", why);
    }
  }
  row[col::kCpuEnergy] = rapl_ ? cpu_energy_j_ : std::numeric_limits<double>::quiet_NaN();
  const double busy = NodeBusyCpuSeconds();
  row[col::kNodeCpu] = busy - start_node_busy_s_;
  // The trials' share of this interval (telemetry/trial_ledger.h).
  IntervalCost cost;
  cost.cpu_s = std::max(0.0, cpu - last_cpu_s_);
  if (have_gpu) cost.gpu_s = gpu.util_pct * 0.01 * dt;
  if (rapl_) cost.package_j = cpu_energy_j_ - last_cpu_energy_j_;
  cost.node_busy_s = busy - last_node_busy_s_;
  for (int t = 0; t < kNumTransports; ++t) {
    const double total = row[col::Counter(Counter::kBytesShm) + t];
    cost.bytes[t] = total - last_bytes_[t];
    last_bytes_[t] = total;
  }
  ledger_.Apportion(cost);
  last_cpu_energy_j_ = cpu_energy_j_;
  last_node_busy_s_ = busy;
  last_cpu_s_ = cpu;
  last_row_ns_ = now;
  if (rows_.size() + col::kNum > static_cast<size_t>(options_.max_rows) * col::kNum) ThinRows();
  rows_.insert(rows_.end(), row, row + col::kNum);
}

// The GPU's energy since the collector started: its total-energy counter when it has one,
// else its power draw times the interval (a rectangle per interval: less exact).
void Collector::ReadGpuEnergy(const GpuReading& gpu, double dt) {
  if (gpu.energy_mj >= 0) {
    if (gpu_energy_base_mj_ < 0) {
      gpu_energy_base_mj_ = gpu.energy_mj;
      gpu_energy_source_ = fmt::format("NVML total-energy counter of gpu {} ({})", nvml_->index,
                                       nvml_->name);
    }
    gpu_energy_j_ = static_cast<double>(gpu.energy_mj - gpu_energy_base_mj_) * 1e-3;
  } else if (gpu.power_mw >= 0) {
    if (std::isnan(gpu_energy_j_)) {
      gpu_energy_j_ = 0;
      gpu_energy_source_ = fmt::format("NVML power draw x interval of gpu {} ({}): no energy "
                                       "counter on this device", nvml_->index, nvml_->name);
    }
    gpu_energy_j_ += static_cast<double>(gpu.power_mw) * 1e-3 * dt;
  }
}

// Halves the table: keeps the later row of each pair (cumulative columns stay exact),
// averages the interval-mean columns over the pair, and doubles the sampling stride.
void Collector::ThinRows() {
  size_t n = rows_.size() / col::kNum;
  size_t kept = 0;
  for (size_t r = 1; r < n; r += 2, ++kept) {
    const double* a = &rows_[(r - 1) * col::kNum];
    const double* b = &rows_[r * col::kNum];
    double* out = &rows_[kept * col::kNum];
    double merged[col::kNum];
    for (int c = 0; c < col::kNum; ++c) {
      bool mean = (c >= col::kGauges && c <= col::kCpuCores) || c == col::kGpuUtil;
      merged[c] = mean ? 0.5 * (a[c] + b[c]) : b[c];
    }
    std::copy(merged, merged + col::kNum, out);
  }
  if (n % 2 == 1) {  // an odd last row stays as it is
    std::copy(&rows_[(n - 1) * col::kNum], &rows_[n * col::kNum], &rows_[kept * col::kNum]);
    ++kept;
  }
  rows_.resize(kept * col::kNum);
  stride_ *= 2;
  BC_LOG(Debug, Telem, "telemetry: series thinned to {} rows, one per {}ms", kept,
         options_.interval_ms * stride_);
}

void Collector::StopSampler() {
  {
    std::lock_guard lock(sample_mu_);
    stop_ = true;
  }
  sample_cv_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

void Collector::Annotate(std::string_view line) {
  std::lock_guard lock(notes_mu_);
  if (annotations_.size() + line.size() + 1 > kMaxAnnotationBytes) {
    ++annotations_dropped_;
    return;
  }
  annotations_.append(line);
  if (line.empty() || line.back() != '\n') annotations_.push_back('\n');
}

namespace {

// A name that is a path prefix of `name` (a/b for a/b/c) or has `name` as its prefix.
template <typename Map>
const std::string* PrefixClash(const Map& named, std::string_view name) {
  for (size_t i = name.find('/'); i != std::string_view::npos; i = name.find('/', i + 1))
    if (auto it = named.find(name.substr(0, i)); it != named.end()) return &it->first;
  const std::string below = std::string(name) + "/";
  auto it = named.lower_bound(below);
  if (it != named.end() && it->first.compare(0, below.size(), below) == 0) return &it->first;
  return nullptr;
}

}  // namespace

Status Collector::Record(std::string_view name, double value) {
  const double t = (NowNs() - start_mono_ns_) * 1e-9;
  std::lock_guard lock(notes_mu_);
  auto it = named_.find(name);
  if (it == named_.end()) {
    BC_RETURN_IF_ERROR(ValidateSeriesName(name));
    if (named_.size() >= kMaxNamedSeries)
      return ResourceExhaustedError(
          "telemetry: series '{}' would be the {}th named series of rank {}; at most {} "
          "(record fewer names, e.g. one per model and metric)",
          name, named_.size() + 1, tags_.rank, kMaxNamedSeries);
    if (const std::string* other = PrefixClash(named_, name))
      return InvalidArgumentError(
          "telemetry: series '{}' and '{}' clash: one is a path prefix of the other, and each "
          "series is one HDF5 dataset; rename one (e.g. '{}/value')",
          name, *other, name.size() < other->size() ? name : std::string_view(*other));
    it = named_.emplace(std::string(name), NamedState{}).first;
    it->second.series.name = std::string(name);
  }
  NamedState& st = it->second;
  NamedSeries& s = st.series;
  if (++st.offered < s.stride) return Status::Ok();
  st.offered = 0;
  if (s.time_s.size() >= static_cast<size_t>(options_.max_rows)) {  // keep the later of pairs
    size_t kept = 0;
    for (size_t i = 1; i < s.time_s.size(); i += 2, ++kept) {
      s.time_s[kept] = s.time_s[i];
      s.value[kept] = s.value[i];
    }
    s.time_s.resize(kept);
    s.value.resize(kept);
    s.stride *= 2;
  }
  s.time_s.push_back(t);
  s.value.push_back(value);
  return Status::Ok();
}

RankData Collector::BuildRankData() {
  RankData d;
  d.tags = tags_;
  {
    std::lock_guard lock(notes_mu_);
    d.annotations = annotations_;
    if (annotations_dropped_ > 0)
      d.annotations += fmt::format("({} more annotation lines dropped: over {} bytes)\n",
                                   annotations_dropped_, kMaxAnnotationBytes);
    for (const auto& [name, st] : named_) d.named.push_back(st.series);
  }
  d.pid = static_cast<int>(getpid());
  d.start_unix_s = start_unix_s_;
  d.start_mono_ns = start_mono_ns_;
  d.interval_s = options_.interval_ms * 1e-3 * static_cast<double>(stride_);
  d.wall_s = (last_row_ns_ - start_mono_ns_) * 1e-9;
  d.cpu_seconds = last_cpu_s_ - start_cpu_s_;  // CPU over the same span as wall_s
  d.peak_rss_bytes = ProcessPeakRssBytes();
  d.cores_available = AvailableCores();
  d.gpu_present = nvml_ != nullptr;
  if (nvml_) d.gpu_name = nvml_->name;
  if (nvml_) d.gpu_index = nvml_->index;
  d.cpu_energy_present = rapl_ != nullptr;
  d.gpu_energy_present = !std::isnan(gpu_energy_j_);
  d.cpu_energy_source = cpu_energy_source_;
  d.gpu_energy_source = gpu_energy_source_;
  d.trials = ledger_.Records();
  d.trial_totals = ledger_.Totals();
  d.rows = rows_;
  if (spans_) {
    uint64_t head = span_head_.load(std::memory_order_acquire);
    uint64_t cap = span_mask_ + 1;
    uint64_t first = head > cap ? head - cap : 0;
    d.spans.reserve(head - first);
    for (uint64_t i = first; i < head; ++i) {
      const SpanSlot& s = spans_[i & span_mask_];
      if (s.version.load(std::memory_order_acquire) != i + 1) continue;  // lapped or unfinished
      uint64_t kt = s.kind_tid.load(std::memory_order_relaxed);
      d.spans.push_back({static_cast<int32_t>(kt >> 32), static_cast<int32_t>(kt & 0xffffffffu),
                         s.seq.load(std::memory_order_relaxed),
                         s.begin_ns.load(std::memory_order_relaxed),
                         s.end_ns.load(std::memory_order_relaxed)});
    }
    d.spans_dropped = static_cast<int64_t>(head - d.spans.size());
  }
  return d;
}

RankData Collector::Snapshot() {
  std::lock_guard lock(sample_mu_);
  TakeRow();
  return BuildRankData();
}

// Declared in telemetry/spec.h; here so that the spec parser (spec.cc) stands alone (the
// libFuzzer target tests/fuzz/fuzz_spec.cc links it without the collector).
Result<std::unique_ptr<Collector>> CreateCollector(const Options& options,
                                                   const OutputIdentity& who, int local_rank,
                                                   Role role, Sinks* sinks) {
  Result<TelemetrySpec> parsed = ParseTelemetrySpec(options.telemetry);
  if (!parsed.ok()) return parsed.status().WithContext("option 'telemetry'");
  TelemetrySpec spec = std::move(parsed).value();
  if (!spec.enabled) {
    if (sinks != nullptr) *sinks = Sinks();
    return std::unique_ptr<Collector>();
  }
  // Every output path is created or refused now, not after the run (run_outputs.h).
  Result<Sinks> prepared = PrepareSinks(spec, who);
  if (!prepared.ok()) return prepared.status().WithContext("option 'telemetry'");
  if (sinks != nullptr) *sinks = std::move(prepared).value();
  Tags tags;
  tags.experiment = options.experiment;
  tags.workload = options.workload;
  tags.run = options.run_name;
  tags.rank = who.rank;
  tags.local_rank = local_rank;
  tags.role = role;
  return Collector::Create(std::move(tags), spec.collector);
}

}  // namespace batchcast::telemetry
