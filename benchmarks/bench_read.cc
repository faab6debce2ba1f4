// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// bench_read: the leader's read path alone (DatasetReader::ReadSample + VerifySample, as a
// decode worker runs them with verify=sample), nothing decoded. For one dataset file, side by
// side in one run, repetitions interleaved, 1 and 2 threads (each measurement a fresh
// reader, so compressed chunks are loaded again; `--epochs` shuffled epochs per measurement,
// more when needed to read `--min-samples`):
//   read_rate_1 / read_rate_2     samples/s, wall time
//   read_scaling_2                read_rate_2 / (2 * read_rate_1)
//   read_cpu_scaling_2            the same in samples per CPU-second (what a loaded machine's
//                                 other processes disturb least; lock waits sleep, so this
//                                 one does not see a serial section: read_serial does)
//   read_serial_us_per_sample     time spent holding the process-wide HDF5 lock per sample
//                                 (Hdf5Guard's accounting, every thread), 1-thread runs: the
//                                 serial section left on the read path
//   read_ceiling_samples_per_s    1 / read_serial: the rate no number of threads can pass
//                                 (1e9 when no lock was taken: 1 ns resolution)
//   read_lock_acquisitions_per_sample
// With --compare-v1 (encoded files) a layout version 1 copy of the same samples is made in
// --cache and measured in the same repetitions (keys prefixed v1_): the path before issue 33.
// --photo-set DIR makes the real-photo set (photo_chain.h: 500x375 JPEG q90 crops of the
// photos python3-skimage ships) in DIR first, once, and measures it.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/hdf5_lock.h"
#include "data/dataset_reader.h"
#include "data/dataset_writer.h"
#include "data/image_probe.h"
#include "harness.h"
#include "photo_chain.h"

namespace batchcast::bench {
namespace {

namespace fs = std::filesystem;

struct Args {
  std::string dataset, name, cache = "read_set", photo_set;
  int reps = 5, epochs = 2, photos = 300;
  int64_t min_samples = 60000;  // each measurement reads at least this many (more epochs)
  bool compare_v1 = false;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_read: %s\n", what.c_str());
  std::exit(1);
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct Run {
  double rate = 0, cpu_rate = 0, serial_us = 0, acquisitions = 0;
};

// `threads` threads read `epochs` shuffled epochs of a fresh reader of `path` between them.
Run Measure(const std::string& path, int threads, int epochs, uint64_t seed) {
  auto reader = data::DatasetReader::Open(path);
  if (!reader.ok()) Die(reader.status().ToString());
  const data::DatasetReader& r = **reader;
  const int64_t n = r.info().num_samples;
  std::vector<int64_t> order;
  for (int e = 0; e < epochs; ++e) {
    std::vector<int64_t> perm(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) perm[size_t(i)] = i;
    std::mt19937_64 rng(seed + uint64_t(e));
    std::shuffle(perm.begin(), perm.end(), rng);
    order.insert(order.end(), perm.begin(), perm.end());
  }
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> hold_ns{0}, acquisitions{0}, bad{0};
  std::atomic<double> cpu{0};
  const double t0 = NowSeconds();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      const Hdf5LockTimes before = ThisThreadHdf5LockTimes();
      const double c0 = ThreadCpuSeconds();
      std::vector<uint8_t> bytes;
      for (int64_t k; (k = next.fetch_add(64)) < int64_t(order.size());)
        for (int64_t j = k; j < std::min<int64_t>(k + 64, int64_t(order.size())); ++j) {
          const int64_t i = order[size_t(j)];
          if (!r.ReadSample(i, &bytes).ok() || !r.VerifySample(i, bytes).ok()) ++bad;
        }
      const Hdf5LockTimes after = ThisThreadHdf5LockTimes();
      hold_ns += after.hold_ns - before.hold_ns;
      acquisitions += after.acquisitions - before.acquisitions;
      double c = cpu.load();
      while (!cpu.compare_exchange_weak(c, c + ThreadCpuSeconds() - c0)) {
      }
    });
  for (auto& th : pool) th.join();
  const double wall = NowSeconds() - t0;
  if (bad.load() > 0) Die(fmt::format("{} reads of {} failed", bad.load(), path));
  const double samples = double(order.size());
  return Run{samples / wall, samples / std::max(cpu.load(), 1e-9),
             1e-3 * double(hold_ns.load()) / samples, double(acquisitions.load()) / samples};
}

// A layout version 1 copy of an encoded file (the same samples, labels and sizes).
std::string MakeV1Copy(const std::string& path, const std::string& cache) {
  fs::create_directories(cache);
  const std::string out = (fs::path(cache) / (fs::path(path).stem().string() + "-v1.h5")).string();
  if (fs::exists(out)) return out;
  auto reader = data::DatasetReader::Open(path);
  if (!reader.ok()) Die(reader.status().ToString());
  const data::DatasetInfo& info = (*reader)->info();
  if (info.kind != data::SampleKind::kEncoded)
    Die(fmt::format("--compare-v1: {} holds {} samples, not encoded ones", path, info.encoding));
  data::DatasetSpec spec;
  spec.class_names = info.class_names;
  spec.layout_version = 1;
  spec.created_by = "benchmarks/bench_read.cc --compare-v1";
  auto w = data::DatasetWriter::Create(out, spec);
  if (!w.ok()) Die(w.status().ToString());
  std::vector<uint8_t> bytes;
  for (int64_t i = 0; i < info.num_samples; ++i) {
    Status st = (*reader)->ReadSample(i, &bytes);
    if (st.ok())
      st = (*w)->Append(bytes, (*reader)->Label(i), (*reader)->OriginalWidth(i),
                        (*reader)->OriginalHeight(i), data::SniffEncoding(bytes));
    if (!st.ok()) Die(st.ToString());
  }
  if (Status st = (*w)->Finish(); !st.ok()) Die(st.ToString());
  return out;
}


Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die("missing value after " + k);
      return argv[++i];
    };
    if (k == "--dataset") a.dataset = next();
    else if (k == "--name") a.name = next();
    else if (k == "--cache") a.cache = next();
    else if (k == "--photo-set") a.photo_set = next();
    else if (k == "--photos") a.photos = std::stoi(next());
    else if (k == "--reps") a.reps = std::stoi(next());
    else if (k == "--epochs") a.epochs = std::stoi(next());
    else if (k == "--min-samples") a.min_samples = std::stoll(next());
    else if (k == "--compare-v1") a.compare_v1 = true;
    else
      Die("unknown argument '" + k + "'; usage: bench_read (--dataset FILE | --photo-set DIR "
          "[--photos N]) [--name NAME] [--reps R] [--epochs E] [--min-samples S] [--compare-v1] [--cache DIR]");
  }
  if (a.dataset.empty() == a.photo_set.empty()) Die("give one of --dataset FILE or --photo-set DIR");
  if (a.reps < 1 || a.epochs < 1 || a.photos < 1) Die("--reps, --epochs and --photos must be >= 1");
  return a;
}

struct Series {
  std::vector<double> rate1, rate2, cpu_us1, scaling, cpu_scaling, serial, acq;
  void Add(const Run& one, const Run& two) {
    rate1.push_back(one.rate);
    cpu_us1.push_back(1e6 / one.cpu_rate);
    rate2.push_back(two.rate);
    scaling.push_back(two.rate / (2 * one.rate));
    cpu_scaling.push_back(two.cpu_rate / one.cpu_rate);
    serial.push_back(one.serial_us);
    acq.push_back(one.acquisitions);
  }
  void Rows(Table* t, const std::string& p) const {
    t->Add(p + "1 thread", Summarize(rate1), "samples/s");
    t->Add(p + "2 threads", Summarize(rate2), "samples/s");
    t->Add(p + "1 thread, CPU per sample", Summarize(cpu_us1), "us");
    t->Add(p + "2-thread scaling (wall)", Summarize(scaling), "ratio");
    t->Add(p + "2-thread scaling (per CPU-s)", Summarize(cpu_scaling), "ratio");
    t->Add(p + "serial time (HDF5 lock held)", Summarize(serial), "us/sample");
    t->Add(p + "lock acquisitions", Summarize(acq), "per sample");
  }
  void Json(JsonLine* j, const std::string& p) const {
    const double serial_us = Summarize(serial).median;
    j->Add(p + "read_rate_1", Summarize(rate1).median);
    j->Add(p + "read_rate_2", Summarize(rate2).median);
    j->Add(p + "read_cpu_us_per_sample_1", Summarize(cpu_us1).median);
    j->Add(p + "read_scaling_2", Summarize(scaling).median);
    j->Add(p + "read_cpu_scaling_2", Summarize(cpu_scaling).median);
    j->Add(p + "read_serial_us_per_sample", serial_us);
    j->Add(p + "read_ceiling_samples_per_s", 1e6 / std::max(serial_us, 1e-3));
    j->Add(p + "read_lock_acquisitions_per_sample", Summarize(acq).median);
  }
};

int Main(int argc, char** argv) {
  const Args a = ParseArgs(argc, argv);
  const std::string path =
      a.photo_set.empty() ? a.dataset : CachedPhotoSet(a.photo_set, a.photos, "bench_read");
  const std::string name =
      !a.name.empty() ? a.name : a.photo_set.empty() ? fs::path(path).stem().string() : "photos";
  data::DatasetInfo info;
  int64_t bytes = 0;
  {
    auto probe = data::DatasetReader::Open(path);
    if (!probe.ok()) Die(probe.status().ToString());
    info = (*probe)->info();
    std::vector<uint8_t> sample;
    for (int64_t i = 0; i < info.num_samples; ++i)
      if ((*probe)->ReadSample(i, &sample).ok()) bytes += int64_t(sample.size());
  }
  const std::string v1 = a.compare_v1 ? MakeV1Copy(path, a.cache) : "";
  const int64_t n = std::max<int64_t>(info.num_samples, 1);
  const int epochs = int(std::max<int64_t>(a.epochs, (a.min_samples + n - 1) / n));

  Series now, old;
  for (int rep = 0; rep < a.reps; ++rep) {
    const uint64_t seed = 1000 + uint64_t(rep);
    // Which thread count runs first alternates, so a change of the machine's load hits both.
    Run one, two, one_v1, two_v1;
    if (rep % 2 == 0) {
      one = Measure(path, 1, epochs, seed);
      two = Measure(path, 2, epochs, seed);
    } else {
      two = Measure(path, 2, epochs, seed);
      one = Measure(path, 1, epochs, seed);
    }
    now.Add(one, two);
    if (!v1.empty()) {
      one_v1 = Measure(v1, 1, epochs, seed);
      two_v1 = Measure(v1, 2, epochs, seed);
      old.Add(one_v1, two_v1);
    }
  }
  Table t(fmt::format("read path alone: {} ({}, {} samples, {:.1f} KiB mean, layout version {}, "
                      "read path {}, compression {}), {} epochs per measurement",
                      name, info.encoding, info.num_samples,
                      double(bytes) / 1024.0 / double(std::max<int64_t>(info.num_samples, 1)),
                      info.schema_version, data::ReadPathName(info.read_path), info.compression,
                      epochs));
  now.Rows(&t, "");
  if (!v1.empty()) old.Rows(&t, "layout version 1 copy: ");
  t.Print();
  JsonLine j;
  j.Add("benchmark", std::string("read"));
  j.Add("dataset", name);
  j.Add("samples", info.num_samples);
  j.Add("mean_sample_bytes", double(bytes) / double(std::max<int64_t>(info.num_samples, 1)));
  j.Add("layout_version", info.schema_version);
  j.Add("read_path", std::string(data::ReadPathName(info.read_path)));
  j.Add("reps", a.reps);
  j.Add("epochs", epochs);
  now.Json(&j, "");
  if (!v1.empty()) old.Json(&j, "v1_");
  j.Print();
  return 0;
}

}  // namespace
}  // namespace batchcast::bench

int main(int argc, char** argv) { return batchcast::bench::Main(argc, argv); }
