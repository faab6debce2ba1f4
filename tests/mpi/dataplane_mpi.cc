// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// mpi_dataplane: the node data plane through the MPI front door (batchcast::Runtime), run
// by tests/mpi/run_dataplane.sh as real `mpirun --oversubscribe -n K` jobs on a real
// HDF5 file of real JPEGs. Rank 0 leads; every other rank is a consumer that checks what
// it receives:
//   - every sample index exactly once per epoch, plus exactly the fill repeats it was told
//     about (per batch, per producer batch <= b-1, per epoch in stats());
//   - a checksum of each sample's pixels equal to a reference decode of that sample done
//     here with its own Pipeline on the same options (per-sample randomness is a pure
//     function of (seed, epoch, sample), so it must match byte for byte), and its label;
//   - optionally: the leader never runs more than ring_slots producer batches ahead of the
//     slowest consumer (each consumer publishes its position in an MPI shared window), and
//     the leader's RSS does not grow over the run;
//   - optionally: the CPU this process used while blocked in Next() (getrusage).
// Verdicts are gathered over trainer_comm(); trainer rank 0 prints one PASS/FAIL line and
// every rank exits nonzero on failure. Options come from --key=value flags (ResolveOptions);
// the test's own flags are listed in ParseArgs.
#include <fmt/format.h>
#include <mpi.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "batchcast/runtime.h"
#include "data/dataset_reader.h"
#include "pipeline/pipeline.h"
#include "tests/mpi/stage_mean.h"

namespace {

constexpr int kHoldTag = 7301;  // the probe rank tells the hold rank it holds the batch too

using batchcast::Batch;
using batchcast::Options;
using batchcast::Status;
using batchcast::StatusCode;

struct Args {
  std::string name = "dataplane";
  std::vector<int> batch_sizes = {8};      // consumer i (world rank i+1) takes [i % size]
  std::map<int, int> epochs_of;            // world rank -> epochs (early detach)
  int jitter_us = 0;                       // random per-batch delay in [0, jitter_us)
  int step_us = 0;                         // fixed per-batch step of every consumer
  int slow_rank = -1;                      // this rank's step is slow_factor x step_us
  int slow_factor = 10;
  bool verify = true;                      // reference decode + checksum of every sample
  bool backpressure = false;               // shared-window lead check + leader RSS
  int kill_rank = -1, kill_after = 0;      // raise(SIGKILL) after this many batches
  int hold_rank = -1, hold_at = 2, hold_ms = 1000;  // hold a batch (stalls the stream)
  int probe_rank = -1;                     // report + check idle CPU of this rank's waits
                                           // (with hold_rank: the hold starts when it has the batch)
  std::string stage_mean;                  // a model stage's output: each image's channel means
};

std::vector<int> ParseInts(const std::string& s) {
  std::vector<int> v;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    if (comma > pos) v.push_back(std::stoi(s.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return v;
}

bool ParseArgs(const std::vector<std::string>& rest, Args* a, std::string* error) {
  for (const std::string& w : rest) {
    size_t eq = w.find('=');
    std::string key = w.substr(0, eq), value = eq == std::string::npos ? "" : w.substr(eq + 1);
    try {
      if (key == "--name") a->name = value;
      else if (key == "--bs") a->batch_sizes = ParseInts(value);
      else if (key == "--epochs-of") {
        std::vector<int> re = ParseInts(value.substr(0, value.find(':')));
        a->epochs_of[re.at(0)] = std::stoi(value.substr(value.find(':') + 1));
      }
      else if (key == "--jitter-us") a->jitter_us = std::stoi(value);
      else if (key == "--step-us") a->step_us = std::stoi(value);
      else if (key == "--slow-rank") a->slow_rank = std::stoi(value);
      else if (key == "--slow-factor") a->slow_factor = std::stoi(value);
      else if (key == "--no-verify") a->verify = false;
      else if (key == "--backpressure") a->backpressure = true;
      else if (key == "--kill-rank") a->kill_rank = std::stoi(value);
      else if (key == "--kill-after") a->kill_after = std::stoi(value);
      else if (key == "--hold-rank") a->hold_rank = std::stoi(value);
      else if (key == "--hold-at") a->hold_at = std::stoi(value);
      else if (key == "--hold-ms") a->hold_ms = std::stoi(value);
      else if (key == "--probe-rank") a->probe_rank = std::stoi(value);
      else if (key == "--stage-mean") a->stage_mean = value;
      else {
        *error = fmt::format("unknown argument '{}'", w);
        return false;
      }
    } catch (const std::exception&) {
      *error = fmt::format("bad value in '{}'", w);
      return false;
    }
  }
  if (a->batch_sizes.empty()) {
    *error = "--bs needs at least one batch size";
    return false;
  }
  return true;
}

uint64_t Fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t RssKiB(int pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

// The producer-batch position each consumer has reached, in an MPI shared window.
class Positions {
 public:
  Status Create(MPI_Comm trainers) {
    int rank = 0, size = 0;
    MPI_Comm_rank(trainers, &rank);
    MPI_Comm_size(trainers, &size);
    size_ = size;
    int64_t* mine = nullptr;
    if (MPI_Win_allocate_shared(sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, trainers, &mine,
                                &win_) != MPI_SUCCESS)
      return Status(StatusCode::kInternal, "positions: MPI_Win_allocate_shared failed");
    MPI_Aint bytes = 0;
    int unit = 0;
    if (MPI_Win_shared_query(win_, 0, &bytes, &unit, &base_) != MPI_SUCCESS)
      return Status(StatusCode::kInternal, "positions: MPI_Win_shared_query failed");
    mine_ = mine;
    __atomic_store_n(mine_, -1, __ATOMIC_SEQ_CST);
    if (MPI_Barrier(trainers) != MPI_SUCCESS)
      return Status(StatusCode::kInternal, "positions: MPI_Barrier failed");
    return Status::Ok();
  }
  void Publish(int64_t seq) {
    if (seq > __atomic_load_n(mine_, __ATOMIC_SEQ_CST)) __atomic_store_n(mine_, seq, __ATOMIC_SEQ_CST);
  }
  int64_t Slowest() const {
    int64_t lo = INT64_MAX;
    for (int i = 0; i < size_; ++i) lo = std::min(lo, __atomic_load_n(base_ + i, __ATOMIC_SEQ_CST));
    return lo;
  }
  void Free() {
    if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
  }

 private:
  MPI_Win win_ = MPI_WIN_NULL;
  int64_t* base_ = nullptr;
  int64_t* mine_ = nullptr;
  int size_ = 0;
};

// What one consumer saw, and the first thing that was wrong.
struct Verdict {
  std::string error;
  int64_t batches = 0, samples = 0, repeats = 0, checksummed = 0;
  int64_t max_lead = 0;                    // producer batches ahead of the slowest consumer
  int64_t rss_warm_kib = 0, rss_max_kib = 0;
  double longest_wait_s = 0, longest_wait_cpu_s = 0;
  template <typename... A>
  void Fail(fmt::format_string<A...> f, A&&... a) {
    if (error.empty()) error = fmt::format(f, std::forward<A>(a)...);
  }
};

class Checker {
 public:
  Checker(const Options& o, const Args& a, int rank, int leader_pid)
      : options_(o), args_(a), rank_(rank), leader_pid_(leader_pid), rng_(1000u + rank) {}

  Status Init() {
    auto reader = batchcast::data::DatasetReader::Open(options_.dataset);
    if (!reader.ok()) return reader.status();
    n_ = reader.value()->info().num_samples;
    if (options_.limit_samples > 0) n_ = std::min(n_, options_.limit_samples);
    Options ref = options_;
    ref.threads = 1;
    auto p = batchcast::pipeline::Pipeline::Create(ref, std::move(reader).value());
    if (!p.ok()) return p.status();
    reference_ = std::move(p).value();
    counts_.assign(static_cast<size_t>(options_.epochs), std::vector<int>(size_t(n_), 0));
    epoch_repeats_.assign(static_cast<size_t>(options_.epochs), 0);
    epoch_batches_.assign(static_cast<size_t>(options_.epochs), 0);
    return Status::Ok();
  }

  void Run(batchcast::Consumer& consumer, Positions* positions) {
    Batch batch;
    for (;;) {
      double w0 = WallSeconds(), c0 = CpuSeconds();
      Status st = consumer.Next(&batch);
      double wall = WallSeconds() - w0, cpu = CpuSeconds() - c0;
      if (wall > v_.longest_wait_s) {
        v_.longest_wait_s = wall;
        v_.longest_wait_cpu_s = cpu;
      }
      if (st.code() == StatusCode::kEndOfStream) break;
      if (!st.ok()) {  // the job is failing: say so on this rank and leave
        std::fprintf(stderr, "mpi_dataplane: rank %d: next batch failed: %s\n", rank_,
                     st.message().c_str());
        std::fflush(stderr);
        std::_Exit(3);
      }
      if (positions != nullptr) Track(batch, positions);
      Check(batch);
      Step(batch);
    }
    Finish(consumer);
  }

  const Verdict& verdict() const { return v_; }

 private:
  void Track(const Batch& batch, Positions* positions) {
    auto seq = static_cast<int64_t>(batch.info().producer_seq);
    positions->Publish(seq);  // before this consumer can release anything of seq
    v_.max_lead = std::max(v_.max_lead, seq - positions->Slowest());
    if (v_.max_lead > options_.ring_slots)
      v_.Fail("leader ran {} producer batches ahead of the slowest consumer, ring_slots={}",
              v_.max_lead, options_.ring_slots);
    int64_t rss = RssKiB(leader_pid_);
    if (v_.batches == 8) v_.rss_warm_kib = rss;
    if (v_.batches > 8) v_.rss_max_kib = std::max(v_.rss_max_kib, rss);
  }

  void Check(const Batch& batch) {
    const batchcast::BatchInfo& info = batch.info();
    const int64_t size = batch.size();
    if (info.epoch >= counts_.size()) {
      v_.Fail("batch of epoch {} but this consumer asked for {} epochs", info.epoch, counts_.size());
      return;
    }
    if (size <= 0 || size > options_.batch_size)
      v_.Fail("batch {} of epoch {} has {} samples, batch_size={}", info.index, info.epoch, size,
              options_.batch_size);
    const int64_t* ids = batch.sample_ids();
    for (int64_t i = 0; i < size; ++i) {
      if (ids[i] < 0 || ids[i] >= n_) {
        v_.Fail("sample id {} out of range [0, {})", ids[i], n_);
        return;
      }
      counts_[info.epoch][size_t(ids[i])] += 1;
    }
    epoch_repeats_[info.epoch] += info.repeats;
    epoch_batches_[info.epoch] += 1;
    int32_t& pb = producer_repeats_[{info.epoch, info.producer_batch}];
    pb += info.repeats;
    if (pb > options_.batch_size - 1)
      v_.Fail("producer batch {} of epoch {} gave {} fill repeats, more than b-1 = {}",
              info.producer_batch, info.epoch, pb, options_.batch_size - 1);
    v_.batches += 1;
    v_.samples += size;
    if (args_.verify) Verify(batch);
    if (!args_.stage_mean.empty()) VerifyStageMean(batch);
  }

  // A model stage whose module returns each image's per-channel mean (tests/python/
  // test_model_stage.py): tensor args_.stage_mean against the batch's own uint8 CHW images.
  void VerifyStageMean(const Batch& batch) {
    const std::string wrong = batchcast::testing::CheckChannelMeans(batch, args_.stage_mean);
    if (!wrong.empty()) v_.Fail("{}", wrong);
  }

  // Every sample's pixels and label against this process's own decode of that sample.
  void Verify(const Batch& batch) {
    const auto& img = batch.images();
    const int64_t size = batch.size();
    const size_t sb = img.nbytes / size_t(size);
    if (sb != reference_->OutputLayout().bytes()) {
      v_.Fail("batch images have {} bytes per sample, the reference layout {}", sb,
              reference_->OutputLayout().bytes());
      return;
    }
    ref_images_.resize(sb * size_t(size));
    ref_labels_.resize(size_t(size));
    batchcast::pipeline::BatchRequest req;
    req.epoch = batch.info().epoch;
    req.samples = std::span<const int64_t>(batch.sample_ids(), size_t(size));
    req.images = ref_images_.data();
    req.labels = ref_labels_.data();
    batchcast::pipeline::BatchResult res;
    Status st = reference_->RunBatch(req, &res);
    if (!st.ok()) {
      v_.Fail("reference decode failed: {}", st.message());
      return;
    }
    const auto* px = static_cast<const uint8_t*>(img.data);
    const auto* labels = static_cast<const int64_t*>(batch.labels().data);
    for (int64_t i = 0; i < size; ++i) {
      uint64_t got = Fnv1a(px + size_t(i) * sb, sb);
      uint64_t want = Fnv1a(ref_images_.data() + size_t(i) * sb, sb);
      if (got != want)
        v_.Fail("sample {} (epoch {}): pixel checksum {:016x}, reference decode {:016x}",
                batch.sample_ids()[i], batch.info().epoch, got, want);
      if (labels[i] != ref_labels_[size_t(i)])
        v_.Fail("sample {}: label {}, dataset says {}", batch.sample_ids()[i], labels[i],
                ref_labels_[size_t(i)]);
      v_.checksummed += 1;
    }
  }

  void Step(const Batch& batch) {
    if (rank_ == args_.kill_rank && v_.batches >= args_.kill_after) {
      std::fprintf(stderr, "mpi_dataplane: rank %d raises SIGKILL on itself after %lld batches\n",
                   rank_, static_cast<long long>(v_.batches));
      std::fflush(stderr);
      raise(SIGKILL);
    }
    int64_t us = args_.step_us * (rank_ == args_.slow_rank ? args_.slow_factor : 1);
    if (args_.jitter_us > 0) us += int64_t(rng_() % unsigned(args_.jitter_us));
    // The stall starts only once the probe rank has consumed the held batch too (an MPI message
    // from it), so the probe's wait covers the hold whatever the two ranks' start times were
    // (on a loaded machine the probe started late and waited less than half of it).
    if (args_.probe_rank >= 0 && args_.hold_rank >= 0 && v_.batches == args_.hold_at) {
      int word = 0;
      if (rank_ == args_.probe_rank)
        MPI_Send(&word, 1, MPI_INT, args_.hold_rank, kHoldTag, MPI_COMM_WORLD);
      if (rank_ == args_.hold_rank)
        MPI_Recv(&word, 1, MPI_INT, args_.probe_rank, kHoldTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    if (rank_ == args_.hold_rank && v_.batches == args_.hold_at) us += args_.hold_ms * 1000LL;
    if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
    (void)batch;
  }

  void Finish(batchcast::Consumer& consumer) {
    if (!consumer.status().ok()) v_.Fail("consumer ended with: {}", consumer.status().message());
    batchcast::ConsumerStats stats = consumer.stats();
    v_.repeats = stats.repeats;
    if (stats.epochs_completed != options_.epochs)
      v_.Fail("completed {} epochs, asked for {}", stats.epochs_completed, options_.epochs);
    for (size_t e = 0; e < counts_.size(); ++e) {
      int64_t extra = 0;
      for (int64_t id = 0; id < n_; ++id) {
        int k = counts_[e][size_t(id)];
        if (k == 0) v_.Fail("epoch {}: sample {} never arrived", e, id);
        extra += std::max(0, k - 1);
      }
      if (extra != epoch_repeats_[e])
        v_.Fail("epoch {}: {} samples arrived more than once, but batches reported {} repeats", e,
                extra, epoch_repeats_[e]);
      if (e < stats.repeats_per_epoch.size() && stats.repeats_per_epoch[e] != extra)
        v_.Fail("epoch {}: stats() reports {} repeats, counted {}", e, stats.repeats_per_epoch[e],
                extra);
      if (epoch_batches_[e] != consumer.BatchesPerEpoch())
        v_.Fail("epoch {}: {} batches, BatchesPerEpoch() = {}", e, epoch_batches_[e],
                consumer.BatchesPerEpoch());
    }
    if (args_.backpressure && v_.rss_max_kib > v_.rss_warm_kib + 16 * 1024)
      v_.Fail("leader RSS grew from {} KiB (batch 8) to {} KiB", v_.rss_warm_kib, v_.rss_max_kib);
    if (rank_ == args_.probe_rank) {
      if (v_.longest_wait_s < 0.5 * args_.hold_ms / 1000.0)
        v_.Fail("idle probe: the longest wait was {:.3f} s, the stall was {} ms; nothing measured",
                v_.longest_wait_s, args_.hold_ms);
      else if (v_.longest_wait_cpu_s > 0.10 * v_.longest_wait_s)
        v_.Fail("idle probe: {:.4f} CPU-s while blocked {:.3f} s ({:.1f}% of a core, bound 10%)",
                v_.longest_wait_cpu_s, v_.longest_wait_s,
                100 * v_.longest_wait_cpu_s / v_.longest_wait_s);
    }
  }

  Options options_;
  Args args_;
  int rank_, leader_pid_;
  std::mt19937 rng_;
  int64_t n_ = 0;
  std::unique_ptr<batchcast::pipeline::Pipeline> reference_;
  std::vector<std::vector<int>> counts_;
  std::vector<int64_t> epoch_repeats_, epoch_batches_;
  std::map<std::pair<uint64_t, uint64_t>, int32_t> producer_repeats_;
  std::vector<uint8_t> ref_images_;
  std::vector<int64_t> ref_labels_;
  Verdict v_;
};

// Trainer rank 0 prints every consumer's line and the PASS/FAIL line; returns the job verdict.
bool Report(MPI_Comm trainers, const Args& a, const Options& o, int world_rank,
            const Verdict& v) {
  int rank = 0, size = 0;
  MPI_Comm_rank(trainers, &rank);
  MPI_Comm_size(trainers, &size);
  char line[512];
  std::snprintf(line, sizeof(line),
                "  rank %d: b=%d epochs=%d batches=%lld samples=%lld repeats=%lld checksummed=%lld "
                "max_lead=%lld leader_rss_kib=%lld..%lld longest_wait=%.3fs cpu=%.4fs %s%s",
                world_rank, o.batch_size, o.epochs, (long long)v.batches, (long long)v.samples,
                (long long)v.repeats, (long long)v.checksummed, (long long)v.max_lead,
                (long long)v.rss_warm_kib, (long long)v.rss_max_kib, v.longest_wait_s,
                v.longest_wait_cpu_s, v.error.empty() ? "ok" : "FAIL: ", v.error.c_str());
  std::vector<char> all(rank == 0 ? sizeof(line) * size_t(size) : 0);
  MPI_Gather(line, sizeof(line), MPI_CHAR, all.data(), sizeof(line), MPI_CHAR, 0, trainers);
  int bad = v.error.empty() ? 0 : 1, bad_total = 0;
  MPI_Allreduce(&bad, &bad_total, 1, MPI_INT, MPI_SUM, trainers);
  if (rank == 0) {
    for (int r = 0; r < size; ++r) std::printf("%s\n", &all[size_t(r) * sizeof(line)]);
    std::printf("%s mpi_dataplane %s: %d consumers, %d failed\n", bad_total ? "FAIL" : "PASS",
                a.name.c_str(), size, bad_total);
    std::fflush(stdout);
  }
  return bad_total == 0;
}

int RunJob(int argc, char** argv) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::vector<std::string> words(argv + 1, argv + argc), rest;
  auto resolved = batchcast::ResolveOptions(words, &rest);
  Args args;
  std::string arg_error;
  if (!resolved.ok() || !ParseArgs(rest, &args, &arg_error)) {
    std::fprintf(stderr, "mpi_dataplane: rank %d: %s\n", world_rank,
                 resolved.ok() ? arg_error.c_str() : resolved.status().message().c_str());
    return 2;
  }
  Options o = resolved.value();
  if (world_rank > 0) {
    o.batch_size = args.batch_sizes[size_t(world_rank - 1) % args.batch_sizes.size()];
    if (args.epochs_of.count(world_rank)) o.epochs = args.epochs_of[world_rank];
  }
  int leader_pid = getpid();
  MPI_Bcast(&leader_pid, 1, MPI_INT, 0, MPI_COMM_WORLD);

  auto rt = batchcast::Runtime::Create(o);
  if (!rt.ok()) {
    std::fprintf(stderr, "mpi_dataplane: rank %d: runtime create failed: %s\n", world_rank,
                 rt.status().message().c_str());
    return 1;
  }
  batchcast::Runtime& runtime = *rt.value();
  if (!runtime.is_trainer()) {
    Status st = runtime.Serve();  // fails the job itself (MPI_Abort) on error
    Status fin = runtime.Finalize();
    return st.ok() && fin.ok() ? 0 : 1;
  }
  Positions positions;
  if (args.backpressure) {
    Status st = positions.Create(runtime.trainer_comm());
    if (!st.ok()) std::fprintf(stderr, "mpi_dataplane: rank %d: %s\n", world_rank, st.message().c_str());
  }
  Checker checker(o, args, world_rank, leader_pid);
  Status init = checker.Init();
  if (!init.ok()) {
    std::fprintf(stderr, "mpi_dataplane: rank %d: reference pipeline: %s\n", world_rank,
                 init.message().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  checker.Run(runtime.consumer(), args.backpressure ? &positions : nullptr);
  runtime.consumer().Detach().IgnoreError();  // the others go on without us
  bool ok = Report(runtime.trainer_comm(), args, o, world_rank, checker.verdict());
  positions.Free();
  Status fin = runtime.Finalize();
  if (!fin.ok()) {
    std::fprintf(stderr, "mpi_dataplane: rank %d: finalize: %s\n", world_rank, fin.message().c_str());
    ok = false;
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
    std::fprintf(stderr, "mpi_dataplane: MPI_Init failed\n");
    return 1;
  }
  int rc = RunJob(argc, argv);
  MPI_Finalize();
  return rc;
}
