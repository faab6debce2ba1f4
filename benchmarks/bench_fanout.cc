// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// bench_fanout: one leader decodes, K consumer processes train on the same batches
// zero-copy (a trivial step: touch one byte per page of every batch). Real processes
// (fork), real shared memory and control socket, real JPEG data: the decode benchmark's
// recipe (500x375 real-photo crops, quality 90) written to HDF5 and decoded with
// RandomResizedCrop(224) + flip. Side by side in one run, repetitions interleaved:
//   shared(K)       one leader (T decode threads) + K consumers, K = 1, 2, 4, 8
//   independent(4)  4 processes, each its own Pipeline with T/4 threads over the same stream
// Reported (median over repetitions, min/max in the table):
//   min_consumer_rate_ratio  slowest consumer's distinct samples/s over the leader's
//                            production rate, both over their first-to-last batch span (K=8)
//   handoff_p50_us           publish -> a waiting consumer holding the batch
//                            (BatchInfo.handoff_ns, batches that found the consumer waiting; K=8)
//   handoff_floor_p50_us     the scheduler's share of it: K=8 processes woken by one futex
//                            wake, same step, same decode load, same pace (RunPingFloor)
//   handoff_vs_floor         handoff_p50_us over handoff_floor_p50_us, repetition by
//                            repetition (1 = the data plane adds nothing to the scheduler)
//   handoff_first_vs_floor   the same for the consumer woken first by each publish (p50 over
//   handoff_last_vs_floor    the publishes) and for the one woken last: where in the wake
//                            order the excess over the floor builds up
//   consumer_cpu_per_publish_us   a consumer's thread CPU from one hand-off to the next, p50
//   floor_waiter_cpu_per_ping_us  (warm: no start-up), and a floor waiter's per ping
//   consumer_cpu_per_publish_vs_floor  all consumer CPU (wait4) per publish and consumer over
//                            the floor waiters' per ping, start-up included
//   leader_switches_per_publish  the leader process's voluntary context switches per publish
//                            (wait4): constant in K unless consumers wake the leader
//   cpu_ratio                CPU-s per delivered sample, shared(4) over independent(4); the CPU
//                            of every process comes from wait4()
//   throughput_ratio         delivered samples/s, shared(4) over independent(4)
//   scaling_vs_k             mean per-consumer samples/s at K=8 over the same at K=1
//                            (scaling_vs_k4: at K=4 over K=1)
//   leader_idle_fraction     share of the leader's stream time (first fill to last publish)
//                            with every decode worker idle, less its waits for a slot with
//                            nothing in flight (the consumers' backpressure); K=8
//   cpu_s_per_sample         CPU-seconds of all processes per delivered sample, K=8
//   roi_decode_ratio         the 224 RandomResizedCrop chain, 1 thread, the same 256 samples
//                            (warm pipelines): CPU cost with crop decoding over CPU cost with
//                            a full decode
//   decode_ms_per_sample     that chain's CPU-ms per sample with crop decoding (1 thread)
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "batchcast/consumer.h"
#include "harness.h"
#include "photo_chain.h"
#include "node/consumer_internal.h"
#include "producer/producer.h"
#include "telemetry/spec.h"
#include "transport/shm/futex.h"
#include "producer/stream_plan.h"

namespace batchcast::bench {
namespace {

constexpr int kMaxConsumers = 16;
constexpr int kMaxHandoffs = 4096;

struct Args {
  int images = 300, epochs = 4, reps = 3, batch = 32, threads = 4, image_size = 224;
  std::vector<int> ks = {1, 2, 4, 8};
  int compare_k = 4;
  int idle_threads = 1;  // second sweep: a leader that leaves a core idle (hand-off latency)
  bool compare_telemetry = false;  // `make bench B=telemetry`: overhead of telemetry on vs off
  std::string cache = "fanout_set";
};

// Written by the children, read by the parent after wait4 (MAP_SHARED | MAP_ANONYMOUS).
// A rate is taken from the first producer batch to the last: samples of the first producer
// batch (for a consumer: every carve of it) do not count, so leader and consumer spans
// cover the same producer batches.
struct Span {
  double t_first = 0, t_last = 0;   // when the first / last batch was complete
  uint64_t first_seq = ~0ULL;       // producer position of the first batch
  int64_t first_samples = 0;        // distinct samples of the first producer batch
  int64_t samples = 0;              // distinct samples in all batches
  int64_t batches = 0;
  double Rate() const {
    return t_last > t_first ? double(samples - first_samples) / (t_last - t_first) : 0.0;
  }
  void Add(double now, uint64_t seq, int64_t n) {
    if (samples == 0) {
      t_first = now;
      first_seq = seq;
    }
    if (seq == first_seq) first_samples += n;
    t_last = now;
    samples += n;
    ++batches;
  }
  // Mean time between two batches over the span.
  double Interval() const { return batches > 1 ? (t_last - t_first) / double(batches - 1) : 0.0; }
};
struct ConsumerRecord {
  Span span;
  int32_t handoffs = 0;
  int64_t handoff_ns[kMaxHandoffs];
  uint64_t handoff_seq[kMaxHandoffs];  // the publish (ping) each hand-off belongs to
  // CPU of the waiting thread from one hand-off to the next: its work per publish once warm
  // (the step, the data plane's calls, going back to sleep), without start-up costs.
  int32_t cycles = 0;
  int64_t cycle_cpu_ns[kMaxHandoffs];
  int64_t last_cpu_ns = -1;
  // Minor page faults of the waiting thread from its first hand-off to its last (the step's
  // page touching; a slot first used after attach faults 16 pages at a time).
  int64_t first_faults = -1, faults = 0;
  void AddHandoff(uint64_t seq, int64_t ns) {
    if (handoffs >= kMaxHandoffs) return;
    handoff_seq[handoffs] = seq;
    handoff_ns[handoffs++] = ns;
    const int64_t cpu = ThreadCpuNs();
    if (last_cpu_ns >= 0) cycle_cpu_ns[cycles++] = cpu - last_cpu_ns;
    last_cpu_ns = cpu;
    rusage ru{};
    getrusage(RUSAGE_THREAD, &ru);
    if (first_faults < 0) first_faults = ru.ru_minflt;
    faults = ru.ru_minflt - first_faults;
  }
  static int64_t ThreadCpuNs() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return int64_t(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
  }
};

// Minor faults per hand-off after each waiting thread's first (mean over `records`).
double FaultsPerHandoff(const ConsumerRecord* records, int k) {
  double faults = 0, handoffs = 0;
  for (int i = 0; i < k; ++i) {
    faults += double(records[i].faults);
    handoffs += double(std::max(0, records[i].handoffs - 1));
  }
  return handoffs > 0 ? faults / handoffs : 0.0;
}

// Median CPU per publish (µs) of the waiting threads of `records`.
double CycleCpuUs(const ConsumerRecord* records, int k) {
  std::vector<double> v;
  for (int i = 0; i < k; ++i)
    v.insert(v.end(), records[i].cycle_cpu_ns, records[i].cycle_cpu_ns + records[i].cycles);
  return Summarize(v).median / 1e3;
}

// The hand-offs of one publish in the order the consumers got them: the first and the last
// consumer's latency, p50 over the publishes that at least two consumers waited for.
struct WakeOrder {
  double first_p50_us = 0, last_p50_us = 0;
};

WakeOrder WakeOrderOf(const ConsumerRecord* records, int k) {
  std::map<uint64_t, std::vector<int64_t>> by_publish;
  for (int i = 0; i < k; ++i)
    for (int32_t j = 0; j < records[i].handoffs; ++j)
      by_publish[records[i].handoff_seq[j]].push_back(records[i].handoff_ns[j]);
  std::vector<double> first, last;
  for (auto& [seq, v] : by_publish) {
    if (v.size() < 2) continue;
    first.push_back(double(*std::min_element(v.begin(), v.end())));
    last.push_back(double(*std::max_element(v.begin(), v.end())));
  }
  return WakeOrder{Summarize(first).median / 1e3, Summarize(last).median / 1e3};
}
struct SharedRecords {
  Span leader;
  int64_t stream_ns = 0, source_idle_ns = 0, starved_wait_ns = 0;  // the leader's WriterStats
  ConsumerRecord consumers[kMaxConsumers];
  char error[512];
};

SharedRecords* MapRecords() {
  void* p = mmap(nullptr, sizeof(SharedRecords), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                 -1, 0);
  if (p == MAP_FAILED) {
    std::perror("bench_fanout: mmap");
    std::exit(1);
  }
  return new (p) SharedRecords();
}

[[noreturn]] void ChildFail(SharedRecords* r, const std::string& what) {
  std::snprintf(r->error, sizeof(r->error), "%s", what.c_str());
  std::fprintf(stderr, "bench_fanout: %s\n", what.c_str());
  _exit(1);
}

Options BaseOptions(const Args& a, const std::string& dataset) {
  return PhotoChainOptions(dataset, a.image_size, a.epochs, a.batch, a.threads);
}

// With telemetry on, every process records into its own collector, as in a real run
// (no files: the cost measured is the recording and the sampler thread).
std::unique_ptr<telemetry::Collector> MaybeCollector(bool on, int rank, telemetry::Role role,
                                                     SharedRecords* r) {
  if (!on) return nullptr;
  Options o;
  o.telemetry = "telemetry(interval=1s,summary=off)";
  telemetry::Sinks sinks;
  const telemetry::OutputIdentity who{role == telemetry::Role::kLeader
                                           ? telemetry::ProcessKind::kLeader
                                           : telemetry::ProcessKind::kConsumer,
                                       rank, false, ""};
  auto c = telemetry::CreateCollector(o, who, rank, role, &sinks);
  if (!c.ok() || !*c) ChildFail(r, "telemetry: " + c.status().ToString());
  return std::move(c).value();
}

// The trivial training step: one byte of every page of the images, and the labels.
int64_t Touch(const void* images, size_t bytes, const int64_t* labels, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(images);
  int64_t sum = 0;
  for (size_t i = 0; i < bytes; i += 4096) sum += p[i];
  for (int64_t i = 0; i < n; ++i) sum += labels[i];
  return sum;
}

// The pipeline source with the time each producer batch was complete (just before publish).
class TimedSource : public producer::BatchSource {
 public:
  TimedSource(std::unique_ptr<producer::BatchSource> inner, Span* span)
      : inner_(std::move(inner)), span_(span) {}
  int64_t num_samples() const override { return inner_->num_samples(); }
  pipeline::SampleLayout MaxLayout() const override { return inner_->MaxLayout(); }
  pipeline::SampleLayout Layout(int s) const override { return inner_->Layout(s); }
  Status Fill(const pipeline::BatchRequest& req, pipeline::BatchResult* result) override {
    Status st = inner_->Fill(req, result);
    if (st.ok()) span_->Add(NowSeconds(), seq_++, result->written);
    return st;
  }
  void Start(const pipeline::BatchRequest& req) override { inner_->Start(req); }
  Status Finish(pipeline::BatchResult* result) override {
    Status st = inner_->Finish(result);
    if (st.ok()) span_->Add(NowSeconds(), seq_++, result->written);
    return st;
  }
  bool overlaps() const override { return inner_->overlaps(); }
  bool WaitOldest(int64_t timeout_ms) override { return inner_->WaitOldest(timeout_ms); }
  int64_t idle_ns() const override { return inner_->idle_ns(); }
  int threads() const override { return inner_->threads(); }

 private:
  std::unique_ptr<producer::BatchSource> inner_;
  Span* span_;
  uint64_t seq_ = 0;
};

void LeaderChild(const Options& o, int k, const std::string& socket, int ready_fd,
                 SharedRecords* r, bool telem) {
  auto collector = MaybeCollector(telem, 0, telemetry::Role::kLeader, r);
  auto source = producer::MakePipelineSource(o);
  if (!source.ok()) ChildFail(r, source.status().ToString());
  producer::ProducerConfig cfg;
  cfg.options = o;
  cfg.expected_consumers = k;
  cfg.max_consumer_batch = static_cast<uint32_t>(o.batch_size);
  cfg.socket_name = socket;
  cfg.job = "bench";
  cfg.collector = collector.get();
  auto leader = producer::Producer::Create(
      cfg, std::make_unique<TimedSource>(std::move(source).value(), &r->leader));
  if (!leader.ok()) ChildFail(r, leader.status().ToString());
  char byte = 1;
  if (write(ready_fd, &byte, 1) != 1) ChildFail(r, "leader: cannot signal readiness");
  close(ready_fd);
  Status st = (*leader)->Run();
  if (st.ok()) st = (*leader)->WaitUntilEmpty(600000);
  if (!st.ok()) ChildFail(r, "leader: " + st.ToString());
  const producer::ProducerStats ls = (*leader)->stats();
  r->stream_ns = ls.stream_ns;
  r->source_idle_ns = ls.source_idle_ns;
  r->starved_wait_ns = ls.starved_wait_ns;
  _exit(0);
}

void ConsumerChild(const Options& o, int i, const std::string& socket, SharedRecords* r,
                   bool telem) {
  auto collector = MaybeCollector(telem, i + 1, telemetry::Role::kConsumer, r);
  auto c = Consumer::Attach(socket, o, i, "bench");
  if (!c.ok()) ChildFail(r, c.status().ToString());
  internal::ConsumerAccess::SetCollector(**c, collector.get());
  ConsumerRecord& rec = r->consumers[i];
  volatile int64_t sink = 0;
  Batch batch;
  for (;;) {
    Status st = (*c)->Next(&batch);
    if (st.code() == StatusCode::kEndOfStream) break;
    if (!st.ok()) ChildFail(r, fmt::format("consumer {}: {}", i, st.ToString()));
    sink = sink + Touch(batch.images().data, batch.images().nbytes,
                        static_cast<const int64_t*>(batch.labels().data), batch.size());
    rec.span.Add(NowSeconds(), batch.info().producer_seq, batch.size() - batch.info().repeats);
    if (batch.info().handoff_ns > 0) rec.AddHandoff(batch.info().producer_seq, batch.info().handoff_ns);
  }
  (void)sink;
  _exit(0);
}

// One of K independent loaders: its own pipeline over the same stream, in consumer batches.
void IndependentChild(const Options& o, int k, SharedRecords* r, int i) {
  auto reader = data::DatasetReader::Open(o.dataset);
  if (!reader.ok()) ChildFail(r, reader.status().ToString());
  Options po = o;
  po.threads = std::max(1, o.threads / k);
  auto p = pipeline::Pipeline::Create(po, *reader);
  if (!p.ok()) ChildFail(r, p.status().ToString());
  producer::StreamPlan plan((*reader)->info().num_samples, o.batch_size, o.seed, o.shuffle);
  const size_t sample_bytes = (*p)->OutputLayout().bytes();
  std::vector<uint8_t> images(sample_bytes * size_t(o.batch_size));
  std::vector<int64_t> labels(size_t(o.batch_size));
  volatile int64_t sink = 0;
  for (uint64_t e = 0; e < uint64_t(o.epochs); ++e) {
    for (int64_t b = 0; b < plan.BatchesPerEpoch(); ++b) {
      pipeline::BatchRequest req{e, plan.Batch(e, b), 0, images.data(), labels.data()};
      pipeline::BatchResult res;
      Status st = (*p)->RunBatch(req, &res);
      if (!st.ok()) ChildFail(r, st.ToString());
      sink = sink + Touch(images.data(), sample_bytes * size_t(res.written), labels.data(), res.written);
      r->consumers[i].span.Add(NowSeconds(), e * 1000000 + uint64_t(b), res.written);
    }
  }
  (void)sink;
  _exit(0);
}

struct RunResult {
  double wall_s = 0, cpu_s = 0, leader_cpu_s = 0;
  int64_t delivered = 0;
  double leader_rate = 0, min_rate_ratio = 0, handoff_p50_us = 0;
  double consumer_rate = 0;         // mean per-consumer samples/s
  double leader_idle_fraction = 0;
  double publish_interval_s = 0;    // the leader's mean time between producer batches
  int64_t producer_batches = 0;
  WakeOrder wake_order;             // first and last consumer of each publish
  double cycle_cpu_us = 0;          // a consumer's CPU per publish, warm (CycleCpuUs)
  double faults_per_handoff = 0;    // a consumer's minor faults per hand-off (FaultsPerHandoff)
  double leader_switches = 0;       // the leader's voluntary context switches per publish
  double CpuPerSample() const { return cpu_s / std::max<int64_t>(1, delivered); }
  double Throughput() const { return delivered / wall_s; }
};

double CpuOf(const rusage& ru) {
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// Reaps every child; returns their total CPU seconds (the first child's in *first_cpu, its
// voluntary context switches in *first_switches). Any failure ends the benchmark.
double ReapAll(const std::vector<pid_t>& pids, SharedRecords* r, double* first_cpu = nullptr,
               long* first_switches = nullptr) {
  double cpu = 0;
  for (pid_t pid : pids) {
    int status = 0;
    rusage ru{};
    if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "bench_fanout: child %d failed: %s\n", pid,
                   r->error[0] ? r->error : "(no message; killed?)");
      std::exit(1);
    }
    if (first_cpu != nullptr && pid == pids.front()) *first_cpu = CpuOf(ru);
    if (first_switches != nullptr && pid == pids.front()) *first_switches = ru.ru_nvcsw;
    cpu += CpuOf(ru);
  }
  return cpu;
}

RunResult RunShared(const Args& a, const std::string& dataset, int k, int threads,
                    bool telem = false) {
  static int run = 0;
  SharedRecords* r = MapRecords();
  Options o = BaseOptions(a, dataset);
  o.threads = threads;
  std::string socket = fmt::format("batchcast-bench-fanout-{}-{}", getpid(), run++);
  int fds[2];
  if (pipe(fds) != 0) std::exit(1);
  double t0 = NowSeconds();
  std::vector<pid_t> pids;
  pid_t leader = fork();
  if (leader == 0) {
    close(fds[0]);
    LeaderChild(o, k, socket, fds[1], r, telem);
  }
  pids.push_back(leader);
  close(fds[1]);
  char byte = 0;
  if (read(fds[0], &byte, 1) != 1) {  // the leader died before listening
    ReapAll(pids, r);
    std::exit(1);
  }
  close(fds[0]);
  for (int i = 0; i < k; ++i) {
    pid_t pid = fork();
    if (pid == 0) ConsumerChild(o, i, socket, r, telem);
    pids.push_back(pid);
  }
  RunResult res;
  long leader_switches = 0;
  res.cpu_s = ReapAll(pids, r, &res.leader_cpu_s, &leader_switches);
  res.wall_s = NowSeconds() - t0;
  res.leader_rate = r->leader.Rate();
  res.publish_interval_s = r->leader.Interval();
  res.producer_batches = r->leader.batches;
  res.wake_order = WakeOrderOf(r->consumers, k);
  res.cycle_cpu_us = CycleCpuUs(r->consumers, k);
  res.faults_per_handoff = FaultsPerHandoff(r->consumers, k);
  res.leader_switches = double(leader_switches) / double(std::max<int64_t>(1, res.producer_batches));
  res.min_rate_ratio = 1e9;
  std::vector<int64_t> handoffs;
  for (int i = 0; i < k; ++i) {
    const ConsumerRecord& c = r->consumers[i];
    res.delivered += c.span.samples;
    res.min_rate_ratio = std::min(res.min_rate_ratio, c.span.Rate() / res.leader_rate);
    res.consumer_rate += c.span.Rate() / k;
    handoffs.insert(handoffs.end(), c.handoff_ns, c.handoff_ns + c.handoffs);
  }
  res.handoff_p50_us = Summarize(std::vector<double>(handoffs.begin(), handoffs.end())).median / 1e3;
  res.leader_idle_fraction =
      double(std::max<int64_t>(0, r->source_idle_ns - r->starved_wait_ns)) /
      double(std::max<int64_t>(1, r->stream_ns));
  munmap(r, sizeof(SharedRecords));
  return res;
}

// The scheduler's floor under the hand-off (handoff_floor_p50_us): K waiting processes woken
// by one FUTEX_WAKE(all) on a shared word, with no data plane in between. Each waiter records
// wake - ping for the pings that found it asleep (as BatchInfo.handoff_ns counts only batches
// that found the consumer waiting), touches a producer batch's bytes (the same trivial step) and
// waits again. The pinging process decodes meanwhile with the leader's pipeline on `threads`
// threads (the same CPU and memory load), writes one byte per page of the batch before each
// ping (as a fill writes the slot) and pings `pings` times at `interval_s`: the leader's
// measured publish interval and count of the shared run it stands beside.
struct PingRecords {
  alignas(64) std::atomic<uint32_t> word{0};
  std::atomic<int64_t> ping_ns{0};
  std::atomic<uint32_t> stop{0};
  std::atomic<int32_t> waiting{0};
  ConsumerRecord waiters[kMaxConsumers];
};

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, int64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000), static_cast<long>(timeout_ns % 1000000000)};
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value,
                 op == FUTEX_WAIT ? &ts : nullptr, nullptr, 0);
}

void PingWaiter(PingRecords* r, const uint8_t* batch, size_t bytes, const int64_t* labels,
                int64_t n, int i) {
  ConsumerRecord& rec = r->waiters[i];
  volatile int64_t sink = 0;
  r->waiting.fetch_add(1);
  while (r->stop.load() == 0) {
    const uint32_t v = r->word.load();
    if (r->stop.load() != 0) break;
    const long rc = Futex(&r->word, FUTEX_WAIT, v, 200 * 1000000LL);
    const int64_t now = shm::MonotonicNs();
    if (rc != 0 || r->word.load() == v || r->stop.load() != 0) continue;  // no ping, or no sleep
    rec.AddHandoff(r->word.load(), now - r->ping_ns.load());
    sink = sink + Touch(batch, bytes, labels, n);
  }
  (void)sink;
  _exit(0);
}

struct FloorResult {
  double p50_us = 0;             // median wake latency over all waiters
  WakeOrder wake_order;          // first and last waiter of each ping
  double waiter_cpu_us = 0;      // CPU of one waiter per ping
  double cycle_cpu_us = 0;       // a waiter's CPU per ping, warm (CycleCpuUs)
  double load_cpu_ms = 0;        // the pinging process's CPU (its decode load) per ping
  double faults_per_handoff = 0; // a waiter's minor faults per ping (FaultsPerHandoff)
};

FloorResult RunPingFloor(const Args& a, const std::string& dataset, int k, int threads,
                         double interval_s, int64_t pings) {
  auto* r = static_cast<PingRecords*>(mmap(nullptr, sizeof(PingRecords), PROT_READ | PROT_WRITE,
                                           MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  // The default producer batch, 2 x the consumer batch: a consumer takes two per publish.
  const int64_t n = 2 * int64_t(a.batch);
  const size_t bytes = size_t(n) * size_t(a.image_size) * size_t(a.image_size) * 3;
  auto* batch = static_cast<uint8_t*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                                           MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (r == MAP_FAILED || batch == MAP_FAILED) {
    std::perror("bench_fanout: mmap");
    std::exit(1);
  }
  new (r) PingRecords();
  std::memset(batch, 1, bytes);
  std::vector<int64_t> labels(size_t(n), 1);
  std::vector<pid_t> pids;
  for (int i = 0; i < k; ++i) {
    pid_t pid = fork();
    if (pid == 0) PingWaiter(r, batch, bytes, labels.data(), n, i);
    pids.push_back(pid);
  }
  // The leader's decode load, for real (after the forks): the same pipeline on `threads`
  // threads decoding the same set over and over into a private buffer.
  std::atomic<bool> busy_stop{false};
  std::thread busy([&] {
    auto reader = data::DatasetReader::Open(dataset);
    Options o = BaseOptions(a, dataset);
    o.threads = threads;
    auto p = reader.ok() ? pipeline::Pipeline::Create(o, *reader)
                         : Result<std::unique_ptr<pipeline::Pipeline>>(reader.status());
    if (!p.ok()) {
      std::fprintf(stderr, "bench_fanout: %s\n", p.status().ToString().c_str());
      std::exit(1);
    }
    std::vector<int64_t> samples(static_cast<size_t>(n));
    std::vector<uint8_t> images((*p)->OutputLayout().bytes() * samples.size());
    std::vector<int64_t> out_labels(samples.size());
    const int64_t total = (*reader)->info().num_samples;
    for (uint64_t round = 0; !busy_stop.load(); ++round) {
      for (int64_t i = 0; i < n; ++i) samples[size_t(i)] = (int64_t(round) * n + i) % total;
      pipeline::BatchResult res;
      (void)(*p)->RunBatch({round, samples, 0, images.data(), out_labels.data()}, &res);
    }
  });
  while (r->waiting.load() < k) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto interval = std::chrono::nanoseconds(static_cast<int64_t>(interval_s * 1e9));
  const double load_cpu0 = ProcessCpuSeconds();
  for (int64_t p = 0; p < pings; ++p) {
    std::this_thread::sleep_for(interval);  // a benchmark's pacing, not synchronisation
    for (size_t i = 0; i < bytes; i += 4096) batch[i] = static_cast<uint8_t>(p);
    r->ping_ns.store(shm::MonotonicNs());
    r->word.fetch_add(1);
    Futex(&r->word, FUTEX_WAKE, INT32_MAX, 0);
  }
  const double load_cpu = ProcessCpuSeconds() - load_cpu0;
  r->stop.store(1);
  r->word.fetch_add(1);
  Futex(&r->word, FUTEX_WAKE, INT32_MAX, 0);
  busy_stop.store(true);
  busy.join();
  double waiter_cpu = 0;
  for (pid_t pid : pids) {
    int status = 0;
    rusage ru{};
    if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "bench_fanout: ping waiter %d failed\n", pid);
      std::exit(1);
    }
    waiter_cpu += CpuOf(ru);
  }
  std::vector<double> lat;
  for (int i = 0; i < k; ++i)
    lat.insert(lat.end(), r->waiters[i].handoff_ns, r->waiters[i].handoff_ns + r->waiters[i].handoffs);
  FloorResult res;
  res.p50_us = Summarize(lat).median / 1e3;
  res.wake_order = WakeOrderOf(r->waiters, k);
  res.waiter_cpu_us = 1e6 * waiter_cpu / double(std::max<int64_t>(1, pings)) / k;
  res.cycle_cpu_us = CycleCpuUs(r->waiters, k);
  res.load_cpu_ms = 1e3 * load_cpu / double(std::max<int64_t>(1, pings));
  res.faults_per_handoff = FaultsPerHandoff(r->waiters, k);
  munmap(batch, bytes);
  munmap(r, sizeof(PingRecords));
  return res;
}

// The leader's chain on 1 thread with crop decoding on and off (roi_decode_ratio), in CPU
// time: both pipelines are made once and warmed by one pass (allocations, page faults, the
// page cache), then each repetition runs both over the same samples in turns of 8 samples
// (which goes first alternates), so that a change in the machine's speed hits both alike
// within milliseconds (one whole pass after the other spread a quiet VM's ratios over
// 0.74-1.04; bench_decode's PairedCpu does the same).
class ChainCost {
 public:
  ChainCost(const Args& a, const std::string& dataset) {
    auto reader = data::DatasetReader::Open(dataset);
    if (!reader.ok()) Fail(reader.status());
    for (bool crop_decode : {false, true}) {
      Options o = BaseOptions(a, dataset);
      o.threads = 1;
      o.crop_decode = crop_decode;
      auto p = pipeline::Pipeline::Create(o, *reader);
      if (!p.ok()) Fail(p.status());
      pipelines_.push_back(std::move(p).value());
    }
    const int64_t n = std::min<int64_t>((*reader)->info().num_samples, 256);
    for (int64_t i = 0; i < n; ++i) samples_.push_back(i);
    images_.resize(pipelines_[0]->OutputLayout().bytes() * samples_.size());
    labels_.resize(samples_.size());
    for (auto& p : pipelines_) Pass(*p, 1000, 0, samples_.size());  // warm-up
  }
  // CPU-seconds per sample, crop decoding off and on, for one repetition.
  std::pair<double, double> Measure(uint64_t epoch) {
    constexpr size_t kTurn = 8;
    double cpu[2] = {0, 0};
    for (size_t first = 0, turn = 0; first < samples_.size(); first += kTurn, ++turn) {
      const size_t n = std::min(kTurn, samples_.size() - first);
      for (size_t j = 0; j < 2; ++j) {
        const size_t which = (turn + j) % 2;
        cpu[which] += Pass(*pipelines_[which], epoch, first, n);
      }
    }
    const double per = 1.0 / double(samples_.size());
    return {cpu[0] * per, cpu[1] * per};
  }

 private:
  [[noreturn]] static void Fail(const Status& st) {
    std::fprintf(stderr, "bench_fanout: %s\n", st.ToString().c_str());
    std::exit(1);
  }
  // CPU seconds of samples_[first, first + n) through p (CPU, not wall: robust to the
  // machine's other load).
  double Pass(pipeline::Pipeline& p, uint64_t epoch, size_t first, size_t n) {
    pipeline::BatchResult res;
    const std::vector<int64_t> idx(samples_.begin() + first, samples_.begin() + first + n);
    const double t0 = ProcessCpuSeconds();
    Status st = p.RunBatch({epoch, idx, 0, images_.data(), labels_.data()}, &res);
    const double t = ProcessCpuSeconds() - t0;
    if (!st.ok()) Fail(st);
    return t;
  }
  std::vector<std::unique_ptr<pipeline::Pipeline>> pipelines_;
  std::vector<int64_t> samples_;
  std::vector<uint8_t> images_;
  std::vector<int64_t> labels_;
};

RunResult RunIndependent(const Args& a, const std::string& dataset, int k) {
  SharedRecords* r = MapRecords();
  Options o = BaseOptions(a, dataset);
  double t0 = NowSeconds();
  std::vector<pid_t> pids;
  for (int i = 0; i < k; ++i) {
    pid_t pid = fork();
    if (pid == 0) IndependentChild(o, k, r, i);
    pids.push_back(pid);
  }
  RunResult res;
  res.cpu_s = ReapAll(pids, r);
  res.wall_s = NowSeconds() - t0;
  for (int i = 0; i < k; ++i) res.delivered += r->consumers[i].span.samples;
  munmap(r, sizeof(SharedRecords));
  return res;
}

// "1,2,4,8": ascending consumer counts, each 1..kMaxConsumers; the last is the K of the
// JSON keys.
std::vector<int> ParseKs(const std::string& v) {
  std::vector<int> ks;
  size_t pos = 0;
  while (pos <= v.size()) {
    const size_t end = std::min(v.find(',', pos), v.size());
    const int k = std::atoi(v.substr(pos, end - pos).c_str());
    if (k < 1 || k > kMaxConsumers || (!ks.empty() && k <= ks.back())) {
      std::fprintf(stderr, "bench_fanout: --ks '%s': expected ascending consumer counts from 1 "
                           "to %d, e.g. 1,2,4,8\n", v.c_str(), kMaxConsumers);
      std::exit(2);
    }
    ks.push_back(k);
    pos = end + 1;
  }
  return ks;
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--images") a.images = std::stoi(v);
    else if (k == "--epochs") a.epochs = std::stoi(v);
    else if (k == "--reps") a.reps = std::stoi(v);
    else if (k == "--batch") a.batch = std::stoi(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--image-size") a.image_size = std::stoi(v);
    else if (k == "--idle-threads") a.idle_threads = std::stoi(v);
    else if (k == "--cache") a.cache = v;
    else if (k == "--ks") a.ks = ParseKs(v);
    else if (k == "--compare-telemetry") a.compare_telemetry = v == "1" || v == "on";
    else {
      std::fprintf(stderr, "bench_fanout: unknown argument '%s' (--images --epochs --reps --batch "
                           "--threads --idle-threads --image-size --cache --ks)\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

std::string Dataset(const Args& a) { return CachedPhotoSet(a.cache, a.images, "bench_fanout"); }

// `make bench B=telemetry`: the fan-out run at K = compare_k with telemetry off and on,
// alternating within each repetition; overhead = 1 - (throughput on / throughput off).
int CompareTelemetry(const Args& a, const std::string& dataset) {
  std::vector<double> off, on, ratio;
  for (int rep = 0; rep < a.reps; ++rep) {
    RunResult r0 = RunShared(a, dataset, a.compare_k, a.threads, false);
    RunResult r1 = RunShared(a, dataset, a.compare_k, a.threads, true);
    off.push_back(r0.Throughput());
    on.push_back(r1.Throughput());
    ratio.push_back(r1.Throughput() / r0.Throughput());
  }
  Table t(fmt::format("telemetry overhead: fan-out K={}, telemetry off vs on", a.compare_k));
  t.Add("delivered samples/s, telemetry off", Summarize(off), "samples/s");
  t.Add("delivered samples/s, telemetry on", Summarize(on), "samples/s");
  t.Add("throughput on / off", Summarize(ratio), "ratio");
  t.Print();
  JsonLine j;
  j.Add("consumers", a.compare_k);
  j.Add("overhead", 1.0 - Summarize(ratio).median);
  j.Print();
  return 0;
}

int Main(int argc, char** argv) {
  Args a = ParseArgs(argc, argv);
  std::string dataset = Dataset(a);
  if (a.compare_telemetry) return CompareTelemetry(a, dataset);
  std::printf("bench_fanout: %d images x %d epochs, consumer batch %d, leader threads %d, "
              "independent threads %d each, RandomResizedCrop(%d)+flip, uint8; %d repetitions\n",
              a.images, a.epochs, a.batch, a.threads, std::max(1, a.threads / a.compare_k),
              a.image_size, a.reps);
  std::fflush(stdout);
  std::map<int, std::vector<RunResult>> shared, idle;
  std::vector<RunResult> independent;
  std::vector<double> roi_ratio, chain_ms;
  std::map<int, std::vector<double>> floor_us, vs_floor;  // the scheduler's floor, per K
  // Per K, repetition by repetition, real over floor: the first and the last consumer woken by
  // a publish, and one consumer's CPU per publish (what it does between two waits).
  std::map<int, std::vector<double>> first_vs_floor, last_vs_floor, cpu_vs_floor, leader_switches;
  std::map<int, std::vector<double>> cycle_cpu_us, floor_cycle_cpu_us;
  // The decoding side's CPU per hand-off: the leader process's per publish, the floor's
  // pinging process's per ping (the floor stands for the same decode load).
  std::map<int, std::vector<double>> leader_cpu_ms, floor_load_cpu_ms;
  std::map<int, std::vector<double>> faults, floor_faults;  // minor faults per hand-off
  for (int rep = 0; rep < a.reps; ++rep) {
    for (int k : a.ks) {
      shared[k].push_back(RunShared(a, dataset, k, a.threads));
      const RunResult& beside = shared[k].back();
      const FloorResult floor = RunPingFloor(a, dataset, k, a.threads, beside.publish_interval_s,
                                             beside.producer_batches);
      floor_us[k].push_back(floor.p50_us);
      vs_floor[k].push_back(beside.handoff_p50_us / floor.p50_us);
      first_vs_floor[k].push_back(beside.wake_order.first_p50_us / floor.wake_order.first_p50_us);
      last_vs_floor[k].push_back(beside.wake_order.last_p50_us / floor.wake_order.last_p50_us);
      const double consumer_cpu_us = 1e6 * (beside.cpu_s - beside.leader_cpu_s) /
                                     double(std::max<int64_t>(1, beside.producer_batches)) / k;
      cpu_vs_floor[k].push_back(consumer_cpu_us / floor.waiter_cpu_us);
      leader_switches[k].push_back(beside.leader_switches);
      cycle_cpu_us[k].push_back(beside.cycle_cpu_us);
      floor_cycle_cpu_us[k].push_back(floor.cycle_cpu_us);
      leader_cpu_ms[k].push_back(1e3 * beside.leader_cpu_s /
                                 double(std::max<int64_t>(1, beside.producer_batches)));
      floor_load_cpu_ms[k].push_back(floor.load_cpu_ms);
      faults[k].push_back(beside.faults_per_handoff);
      floor_faults[k].push_back(floor.faults_per_handoff);
    }
    for (int k : a.ks) idle[k].push_back(RunShared(a, dataset, k, a.idle_threads));
    if (shared.count(a.compare_k)) independent.push_back(RunIndependent(a, dataset, a.compare_k));
    // Made and dropped within the repetition: no pipeline threads exist when the next forks.
    const auto [full, crop] = ChainCost(a, dataset).Measure(uint64_t(rep));
    roi_ratio.push_back(crop / full);
    chain_ms.push_back(1e3 * crop);
  }
  auto stat = [](const std::vector<RunResult>& v, auto f) {
    std::vector<double> x;
    for (const auto& r : v) x.push_back(f(r));
    return Summarize(x);
  };
  Table t("fan-out: one leader, K consumer processes (trivial step), real JPEG data");
  for (int k : a.ks) {
    const auto& v = shared[k];
    t.Add(fmt::format("K={} leader production rate", k), stat(v, [](auto& r) { return r.leader_rate; }), "samples/s");
    t.Add(fmt::format("K={} slowest consumer / leader rate", k), stat(v, [](auto& r) { return r.min_rate_ratio; }), "ratio");
    t.Add(fmt::format("K={} hand-off p50", k), stat(v, [](auto& r) { return r.handoff_p50_us; }), "us");
    t.Add(fmt::format("K={} hand-off floor p50 (futex ping)", k), Summarize(floor_us[k]), "us");
    t.Add(fmt::format("K={} hand-off p50 / floor p50", k), Summarize(vs_floor[k]), "ratio");
    if (k > 1) {
      t.Add(fmt::format("K={} first woken: hand-off / floor", k), Summarize(first_vs_floor[k]), "ratio (p50s)");
      t.Add(fmt::format("K={} last woken: hand-off / floor", k), Summarize(last_vs_floor[k]), "ratio (p50s)");
    }
    t.Add(fmt::format("K={} consumer CPU per publish / floor waiter's", k), Summarize(cpu_vs_floor[k]), "ratio (run)");
    t.Add(fmt::format("K={} consumer CPU per publish, warm", k), Summarize(cycle_cpu_us[k]), "us");
    t.Add(fmt::format("K={} floor waiter CPU per ping, warm", k), Summarize(floor_cycle_cpu_us[k]), "us");
    t.Add(fmt::format("K={} leader voluntary switches per publish", k), Summarize(leader_switches[k]), "");
    t.Add(fmt::format("K={} leader CPU per publish", k), Summarize(leader_cpu_ms[k]), "ms");
    t.Add(fmt::format("K={} floor's decode load CPU per ping", k), Summarize(floor_load_cpu_ms[k]), "ms");
    t.Add(fmt::format("K={} consumer minor faults per hand-off", k), Summarize(faults[k]), "faults");
    t.Add(fmt::format("K={} floor waiter minor faults per ping", k), Summarize(floor_faults[k]), "faults");
    t.Add(fmt::format("K={} delivered samples/s (all consumers)", k), stat(v, [](auto& r) { return r.Throughput(); }), "samples/s");
    t.Add(fmt::format("K={} CPU per delivered sample", k), stat(v, [](auto& r) { return 1e3 * r.CpuPerSample(); }), "ms");
    t.Add(fmt::format("K={} consumers' share of the CPU", k), stat(v, [](auto& r) { return 1 - r.leader_cpu_s / r.cpu_s; }), "fraction");
    t.Add(fmt::format("K={} per-consumer samples/s", k), stat(v, [](auto& r) { return r.consumer_rate; }), "samples/s");
    t.Add(fmt::format("K={} leader idle fraction", k), stat(v, [](auto& r) { return r.leader_idle_fraction; }), "target <= 0.02");
  }
  // Per-consumer rate at K over the same at K = 1, repetition by repetition.
  auto scaling = [&](int k) {
    std::vector<double> x;
    if (!shared.count(k) || !shared.count(1)) return Summarize(x);
    for (int rep = 0; rep < a.reps; ++rep)
      x.push_back(shared[k][rep].consumer_rate / shared[1][rep].consumer_rate);
    return Summarize(x);
  };
  for (int k : a.ks)
    if (k > 1) t.Add(fmt::format("scaling_vs_k K={} / K=1 per consumer", k), scaling(k), k == 8 ? "target >= 0.90" : (k == 4 ? "target >= 0.95" : ""));
  t.Add("roi_decode_ratio crop decode / full decode (1 thr)", Summarize(roi_ratio), "target <= 0.80");
  t.Add("decode_ms_per_sample rrc224 chain (1 thr)", Summarize(chain_ms), "ms");
  for (int k : a.ks) {
    const auto& v = idle[k];
    t.Add(fmt::format("K={} slowest/leader, leader {} thr", k, a.idle_threads), stat(v, [](auto& r) { return r.min_rate_ratio; }), "ratio");
    t.Add(fmt::format("K={} hand-off p50, leader {} thr", k, a.idle_threads), stat(v, [](auto& r) { return r.handoff_p50_us; }), "us");
  }
  const int ck = a.compare_k;
  t.Add(fmt::format("independent K={} delivered samples/s", ck), stat(independent, [](auto& r) { return r.Throughput(); }), "samples/s");
  t.Add(fmt::format("independent K={} CPU per delivered sample", ck), stat(independent, [](auto& r) { return 1e3 * r.CpuPerSample(); }), "ms");
  std::vector<double> cpu_ratio, tput_ratio;
  for (int rep = 0; rep < a.reps && shared.count(ck); ++rep) {
    cpu_ratio.push_back(shared[ck][rep].CpuPerSample() / independent[rep].CpuPerSample());
    tput_ratio.push_back(shared[ck][rep].Throughput() / independent[rep].Throughput());
  }
  t.Add(fmt::format("cpu_ratio shared/independent (K={})", ck), Summarize(cpu_ratio), "ratio");
  t.Add(fmt::format("throughput_ratio shared/independent (K={})", ck), Summarize(tput_ratio), "ratio");
  t.Print();
  const int kmax = a.ks.back();
  JsonLine j;
  j.Add("consumers", kmax);
  j.Add("min_consumer_rate_ratio", stat(shared[kmax], [](auto& r) { return r.min_rate_ratio; }).median);
  j.Add("handoff_p50_us", stat(shared[kmax], [](auto& r) { return r.handoff_p50_us; }).median);
  j.Add("cpu_ratio", Summarize(cpu_ratio).median);
  j.Add("throughput_ratio", Summarize(tput_ratio).median);
  j.Add("scaling_vs_k", scaling(kmax).median);
  j.Add("scaling_vs_k4", scaling(4).median);
  j.Add("leader_idle_fraction", stat(shared[kmax], [](auto& r) { return r.leader_idle_fraction; }).median);
  j.Add("cpu_s_per_sample", stat(shared[kmax], [](auto& r) { return r.CpuPerSample(); }).median);
  j.Add("handoff_floor_p50_us", Summarize(floor_us[kmax]).median);
  j.Add("handoff_vs_floor", Summarize(vs_floor[kmax]).median);
  j.Add("handoff_first_vs_floor", Summarize(first_vs_floor[kmax]).median);
  j.Add("handoff_last_vs_floor", Summarize(last_vs_floor[kmax]).median);
  j.Add("consumer_cpu_per_publish_vs_floor", Summarize(cpu_vs_floor[kmax]).median);
  j.Add("leader_switches_per_publish", Summarize(leader_switches[kmax]).median);
  j.Add("consumer_cpu_per_publish_us", Summarize(cycle_cpu_us[kmax]).median);
  j.Add("floor_waiter_cpu_per_ping_us", Summarize(floor_cycle_cpu_us[kmax]).median);
  j.Add("handoff_vs_floor_min", Summarize(vs_floor[kmax]).min);
  j.Add("handoff_vs_floor_max", Summarize(vs_floor[kmax]).max);
  j.Add("consumer_faults_per_handoff", Summarize(faults[kmax]).median);
  j.Add("floor_waiter_faults_per_ping", Summarize(floor_faults[kmax]).median);
  j.Add("roi_decode_ratio", Summarize(roi_ratio).median);
  j.Add("decode_ms_per_sample", Summarize(chain_ms).median);
  j.Print();
  return 0;
}

}  // namespace
}  // namespace batchcast::bench

int main(int argc, char** argv) { return batchcast::bench::Main(argc, argv); }
