// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// bench_scaling: where the leader's time per sample goes, stage by stage, which part of it
// is serial (cannot run on more than one thread at a time), and the rate that implies on a
// node with many more cores than this one (docs/benchmarks.md, "Serial fractions").
//
// One process: a producer::Producer (the real producer core: pipeline, slot writer, ring) with T
// decode threads and its telemetry collector, and one Consumer on another thread taking
// every batch with the trivial step (one byte per page). Per sample, from the leader's
// telemetry timers: read, lock_wait, decode, transform (decode workers, in parallel) and
// collate, publish (the leader thread, once per producer batch; wall time, so publish also
// holds the CPU the leader gives up after waking consumers). The serial resources: the
// leader thread (its whole CPU time per sample: collate, publish, slot acquisition, batch
// hand-out), the HDF5 lock held (Hdf5Guard, every thread) and the worker pool's hand-out
// (a pool running empty items: two mutex sections per sample). T = 1 and 2, repetitions
// interleaved.
//
// Implied rate at N threads, two bounds: pipelined (the leader thread, the HDF5 lock and the
// pool each a serial resource working beside the decode threads) min(N / p, 1 / max(s_i)),
// and Amdahl's (nothing overlaps) 1 / (sum(s_i) + p / N), with p the parallel CPU per sample
// of the 1-thread run.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "batchcast/consumer.h"
#include "core/hdf5_lock.h"
#include "harness.h"
#include "photo_chain.h"
#include "producer/producer.h"
#include "pipeline/worker_pool.h"
#include "producer/batch_source.h"
#include "telemetry/collector.h"
#include "telemetry/spec.h"

namespace batchcast::bench {
namespace {

using telemetry::Timer;

struct Args {
  std::string cache = "scaling_set";
  std::string dataset;  // --dataset FILE instead of the photo set (e.g. a layout version 1 copy)
  int images = 300, epochs = 4, reps = 3, batch = 32, image_size = 224;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_scaling: %s\n", what.c_str());
  std::exit(1);
}

// Per-sample microseconds of one run.
struct Stages {
  double read = 0, read_lock = 0, decode = 0, transform = 0, collate = 0, publish = 0;
  double lock_held = 0;   // the HDF5 lock, every thread
  double leader_cpu = 0;  // the leader thread's CPU: all it does per sample
  double rate = 0;        // samples/s produced
  double parallel() const { return read + decode + transform; }
};

double ThreadCpuUs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return 1e6 * double(ts.tv_sec) + 1e-3 * double(ts.tv_nsec);
}

Stages RunLeader(const Args& a, const std::string& dataset, int threads, int run) {
  Options o = PhotoChainOptions(dataset, a.image_size, a.epochs, a.batch, threads);
  o.telemetry = "telemetry(interval=1s,summary=off)";
  telemetry::Sinks sinks;
  const telemetry::OutputIdentity who{telemetry::ProcessKind::kLeader, 0, false, ""};
  auto collector = telemetry::CreateCollector(o, who, 0, telemetry::Role::kLeader, &sinks);
  if (!collector.ok() || !*collector) Die("telemetry: " + collector.status().ToString());
  auto source = producer::MakePipelineSource(o);
  if (!source.ok()) Die(source.status().ToString());
  producer::ProducerConfig cfg;
  cfg.options = o;
  cfg.expected_consumers = 1;
  cfg.max_consumer_batch = static_cast<uint32_t>(o.batch_size);
  cfg.socket_name = fmt::format("batchcast-bench-scaling-{}-{}", getpid(), run);
  cfg.job = fmt::format("scaling{}", run);
  cfg.collector = collector->get();
  auto leader = producer::Producer::Create(cfg, std::move(source).value());
  if (!leader.ok()) Die(leader.status().ToString());
  const Hdf5LockTimes lock0 = ProcessHdf5LockTimes();
  const double t0 = NowSeconds();
  Status leader_status;
  double leader_cpu_us = 0;
  std::thread run_leader([&] {
    const double c0 = ThreadCpuUs();
    leader_status = (*leader)->Run();
    if (leader_status.ok()) leader_status = (*leader)->WaitUntilEmpty(600000);
    leader_cpu_us = ThreadCpuUs() - c0;
  });
  auto consumer = Consumer::Attach(cfg.socket_name, o, 0, "bench");
  if (!consumer.ok()) Die(consumer.status().ToString());
  int64_t sink = 0;
  Batch batch;
  for (;;) {
    Status st = (*consumer)->Next(&batch);
    if (st.code() == StatusCode::kEndOfStream) break;
    if (!st.ok()) Die(st.ToString());
    const auto* p = static_cast<const uint8_t*>(batch.images().data);
    for (size_t i = 0; i < batch.images().nbytes; i += 4096) sink += p[i];
  }
  consumer->reset();
  run_leader.join();
  const double wall = NowSeconds() - t0;
  if (!leader_status.ok()) Die(leader_status.ToString());
  const Hdf5LockTimes lock1 = ProcessHdf5LockTimes();
  const telemetry::RankData d = (*collector)->Snapshot();
  const double samples =
      double(std::max<int64_t>(1, (*leader)->stats().samples_produced));
  auto us = [&](Timer t) {
    return 1e-3 * d.Total(telemetry::col::kTimerNs + static_cast<int>(t)) / samples;
  };
  Stages s{us(Timer::kRead), us(Timer::kLockWait), us(Timer::kDecode), us(Timer::kTransform),
           us(Timer::kCollate), us(Timer::kPublish),
           1e-3 * double(lock1.hold_ns - lock0.hold_ns) / samples, leader_cpu_us / samples,
           samples / wall};
  (void)sink;
  return s;
}

// Items per second a worker pool hands out when the items do nothing: its own serial section.
double PoolRate(int threads) {
  pipeline::WorkerPool pool(threads);
  constexpr int64_t kItems = 400000;
  std::atomic<int64_t> sink{0};
  const double t0 = NowSeconds();
  pool.Run(kItems, [&](int, int64_t i) { sink.fetch_add(i & 1, std::memory_order_relaxed); });
  return double(kItems) / (NowSeconds() - t0);
}

std::string Dataset(const Args& a) {
  return a.dataset.empty() ? CachedPhotoSet(a.cache, a.images, "bench_scaling") : a.dataset;
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) Die("missing value after " + k);
    const std::string v = argv[++i];
    if (k == "--cache") a.cache = v;
    else if (k == "--dataset") a.dataset = v;
    else if (k == "--images") a.images = std::stoi(v);
    else if (k == "--epochs") a.epochs = std::stoi(v);
    else if (k == "--reps") a.reps = std::stoi(v);
    else
      Die("unknown argument '" + k + "' (--cache DIR --dataset FILE --images N --epochs E --reps R)");
  }
  if (a.images < 64 || a.epochs < 1 || a.reps < 1)
    Die("--images must be >= 64, --epochs and --reps >= 1");
  return a;
}

int Main(int argc, char** argv) {
  const Args a = ParseArgs(argc, argv);
  const std::string dataset = Dataset(a);
  std::vector<Stages> one, two;
  std::vector<double> pool1, pool2, scaling;
  for (int rep = 0; rep < a.reps; ++rep) {
    if (rep % 2 == 0) {
      one.push_back(RunLeader(a, dataset, 1, 2 * rep));
      two.push_back(RunLeader(a, dataset, 2, 2 * rep + 1));
    } else {
      two.push_back(RunLeader(a, dataset, 2, 2 * rep + 1));
      one.push_back(RunLeader(a, dataset, 1, 2 * rep));
    }
    scaling.push_back(two.back().rate / (2 * one.back().rate));
    pool1.push_back(PoolRate(1));
    pool2.push_back(PoolRate(2));
  }
  auto med = [](const std::vector<Stages>& v, auto f) {
    std::vector<double> x;
    for (const Stages& s : v) x.push_back(f(s));
    return Summarize(x);
  };
  Table t(fmt::format("leader stages per sample: {} -> RandomResizedCrop({}) + flip, uint8; {} "
                      "epochs, 1 consumer", dataset, a.image_size, a.epochs));
  const std::pair<const char*, double Stages::*> rows[] = {
      {"read", &Stages::read},       {"lock_wait", &Stages::read_lock},
      {"decode", &Stages::decode},   {"transform", &Stages::transform},
      {"collate (leader thread, wall)", &Stages::collate},
      {"publish (leader thread, wall)", &Stages::publish},
      {"leader thread CPU, all of it", &Stages::leader_cpu}, {"HDF5 lock held", &Stages::lock_held}};
  for (const auto& [name, field] : rows)
    t.Add(fmt::format("T=1 {}", name), med(one, [f = field](const Stages& s) { return s.*f; }), "us/sample");
  t.Add("T=1 rate", med(one, [](const Stages& s) { return s.rate; }), "samples/s");
  t.Add("T=2 rate", med(two, [](const Stages& s) { return s.rate; }), "samples/s");
  t.Add("T=2 scaling (rate_2 / 2 rate_1)", Summarize(scaling), "ratio");
  t.Add("worker pool, empty items, 1 thread", Summarize(pool1), "items/s");
  t.Add("worker pool, empty items, 2 threads", Summarize(pool2), "items/s");

  // Serial and parallel time per sample (medians of the 1-thread runs).
  const double p = med(one, [](const Stages& s) { return s.parallel(); }).median;
  const double s_read = med(one, [](const Stages& s) { return s.lock_held; }).median;
  const double s_leader = med(one, [](const Stages& s) { return s.leader_cpu; }).median;
  const double s_pool = 1e6 / Summarize(pool1).median;
  const double s_sum = s_read + s_leader + s_pool;
  const double s_max = std::max({s_read, s_leader, s_pool});
  const double total = p + s_sum;
  auto pipelined = [&](int n) { return std::min(1e6 * n / p, 1e6 / s_max); };
  auto amdahl = [&](int n) { return 1e6 / (s_sum + p / n); };
  t.Add("parallel CPU per sample (read+decode+transform)", Stats{p, p, p}, "us");
  t.Add("serial: HDF5 lock held", Stats{s_read, s_read, s_read}, "us/sample");
  t.Add("serial: leader thread CPU", Stats{s_leader, s_leader, s_leader}, "us/sample");
  t.Add("serial: worker pool hand-out", Stats{s_pool, s_pool, s_pool}, "us/sample");
  for (int n : {16, 64}) {
    t.Add(fmt::format("implied rate, {} threads, pipelined", n),
          Stats{pipelined(n), pipelined(n), pipelined(n)}, "samples/s");
    t.Add(fmt::format("implied rate, {} threads, Amdahl", n), Stats{amdahl(n), amdahl(n), amdahl(n)},
          "samples/s");
  }
  t.Print();
  JsonLine j;
  j.Add("benchmark", std::string("scaling"));
  j.Add("images", a.images);
  j.Add("reps", a.reps);
  for (const auto& [key, field] :
       {std::pair{"read", &Stages::read}, std::pair{"lock_wait", &Stages::read_lock},
        std::pair{"decode", &Stages::decode}, std::pair{"transform", &Stages::transform},
        std::pair{"collate", &Stages::collate}, std::pair{"publish", &Stages::publish}})
    j.Add(fmt::format("{}_us_per_sample", key),
          med(one, [f = field](const Stages& s) { return s.*f; }).median);
  j.Add("serial_read_us_per_sample", s_read);
  j.Add("serial_leader_us_per_sample", s_leader);
  j.Add("serial_pool_us_per_sample", s_pool);
  j.Add("serial_fraction", s_sum / total);
  j.Add("serial_fraction_read", s_read / total);
  j.Add("serial_fraction_leader", s_leader / total);
  j.Add("serial_fraction_pool", s_pool / total);
  j.Add("parallel_us_per_sample", p);
  j.Add("rate_1", med(one, [](const Stages& s) { return s.rate; }).median);
  j.Add("rate_2", med(two, [](const Stages& s) { return s.rate; }).median);
  j.Add("scaling_2", Summarize(scaling).median);
  for (int n : {16, 64}) {
    j.Add(fmt::format("implied_rate_{}_pipelined", n), pipelined(n));
    j.Add(fmt::format("implied_rate_{}_amdahl", n), amdahl(n));
  }
  j.Print();
  return 0;
}

}  // namespace
}  // namespace batchcast::bench

int main(int argc, char** argv) { return batchcast::bench::Main(argc, argv); }
