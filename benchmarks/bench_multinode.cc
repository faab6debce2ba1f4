// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// bench_multinode: replicate mode across N virtual nodes on real JPEGs (500x375, q90).
// Run without MPI it is the driver: it builds the photo set once, then for N = 2 and 3 runs
// `mpirun -n 2N` of itself (--worker): N virtual nodes, each one leader rank + one consumer
// rank. Each worker job measures, side by side:
//   1. replicate: the multi-node leader (each node decodes ~1/N; the shares travel between the
//      slots, several producer batches in flight); decode_share = samples decoded per node
//      leader / samples published per node;
//   2. full: every node's own Producer decodes every sample (no exchange);
//      replicate_speedup = consumer samples/s in 1 over 2 (3 alternating rounds of 1 and 2,
//      median round per consumer, mean over consumers);
//   3. exchange: the multi-node leader with a source that only writes labels (decode excluded),
//      so the run is exchange + ring + publish + consumers. Its steady bandwidth (bytes
//      received per node over epochs 1-2; epoch 0 is the warm-up that first touches the
//      slots) over a plain in-place MPI_Allgatherv loop of the same counts on the same
//      communicator, cycling through as many buffers as the ring has slots =
//      exchange_bw_ratio. Rounds alternate plain / exchange / plain / ...; each round's
//      exchange is compared with the mean of the plain loops around it (cancels load
//      drift from other work on the machine), and the median round is reported.
// The virtual nodes share this machine's cores, so the speedup measures the decode work
// saved, not per-node parallelism (docs/scaling.md). Table, then one JSON line last.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "batchcast/consumer.h"
#include "harness.h"
#include "producer/producer.h"
#include "node/multinode.h"
#include "producer/exchange_feed.h"
#include "tests/mpi/photo_set.h"

namespace {

using batchcast::Options;
using batchcast::Status;
namespace node = batchcast::node;
namespace producer = batchcast::producer;
namespace bench = batchcast::bench;

// Writes only labels: the exchange phase measures MPI + ring, not decoding.
class LabelsOnlySource : public producer::BatchSource {
 public:
  LabelsOnlySource(int64_t n, int side) : n_(n) {
    layout_.channels = 3;
    layout_.height = layout_.width = side;
  }
  int64_t num_samples() const override { return n_; }
  batchcast::pipeline::SampleLayout MaxLayout() const override { return layout_; }
  batchcast::pipeline::SampleLayout Layout(int) const override { return layout_; }
  Status Fill(const batchcast::pipeline::BatchRequest& req,
              batchcast::pipeline::BatchResult* result) override {
    for (size_t i = 0; i < req.samples.size(); ++i) req.labels[i] = req.samples[i] % 10;
    result->written = static_cast<int64_t>(req.samples.size());
    return Status::Ok();
  }

 private:
  int64_t n_;
  batchcast::pipeline::SampleLayout layout_;
};

// A barrier that sleeps instead of polling: consumer ranks wait in it while the leaders
// time their plain MPI loops, so that they do not steal the cores (a blocking MPI wait
// spins, with or without yield) — during the exchange phase they sleep on the ring's futex.
void SleepyBarrier(MPI_Comm comm) {
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Ibarrier(comm, &r);
  for (int done = 0;;) {
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (done) return;
    usleep(500);
  }
}

struct Phase {
  double consumer_rate = 0;   // samples/s seen by this node's consumer
  double seconds = 0;         // leader Run() wall time
  producer::ProducerStats stats;
};

// One phase: leaders build their leader, share the address, run; the consumer drains.
Phase RunPhase(const std::string& kind, const Options& o, MPI_Comm node_comm, MPI_Comm leaders,
               int node, int nodes, int world_rank) {
  int local = 0;
  MPI_Comm_rank(node_comm, &local);
  Phase ph;
  char address[108] = {0};
  std::unique_ptr<producer::Producer> multi;
  std::unique_ptr<producer::Producer> single;
  if (local == 0) {
    producer::ProducerConfig cfg;
    cfg.options = o;
    cfg.expected_consumers = 1;
    cfg.job = "benchmn";
    cfg.rank = world_rank;
    cfg.socket_name = fmt::format("batchcast-bench-mn-{}-{}-{}", getpid(), kind, node);
    std::unique_ptr<producer::BatchSource> src;
    if (kind == "exchange") {
      src = std::make_unique<LabelsOnlySource>(o.limit_samples, o.image_size);
    } else {
      auto s = producer::MakePipelineSource(o);
      if (!s.ok()) { std::fprintf(stderr, "bench: %s\n", s.status().message().c_str()); MPI_Abort(MPI_COMM_WORLD, 1); }
      src = std::move(s).value();
    }
    if (kind == "full") {
      auto l = producer::Producer::Create(cfg, std::move(src));
      if (!l.ok()) { std::fprintf(stderr, "bench: %s\n", l.status().message().c_str()); MPI_Abort(MPI_COMM_WORLD, 1); }
      single = std::move(l).value();
    } else {
      node::MultinodeConfig m;
      m.mode = node::MultinodeMode::kReplicate;
      m.leaders = leaders;
      m.node_index = node;
      m.num_nodes = nodes;
      if (const char* d = std::getenv("BENCH_MULTINODE_DEPTH")) m.exchange_depth = std::atoi(d);
      if (const char* c = std::getenv("BENCH_MULTINODE_SLICES")) m.decode_slices = std::atoi(c);
      auto l = node::CreateMultinodeProducer(cfg, std::move(src), m);
      if (!l.ok()) { std::fprintf(stderr, "bench: %s\n", l.status().message().c_str()); MPI_Abort(MPI_COMM_WORLD, 1); }
      multi = std::move(l).value();
    }
    std::snprintf(address, sizeof(address), "%s", cfg.socket_name.c_str());
  }
  MPI_Bcast(address, sizeof(address), MPI_CHAR, 0, node_comm);
  if (local == 0) {
    if (kind == "full") MPI_Barrier(leaders);  // start together, as the others do
    double t0 = bench::NowSeconds();
    Status st = multi ? multi->Run() : single->Run();
    ph.seconds = bench::NowSeconds() - t0;
    if (!st.ok()) { std::fprintf(stderr, "bench: leader: %s\n", st.message().c_str()); MPI_Abort(MPI_COMM_WORLD, 1); }
    if (multi) {
      multi->WaitUntilEmpty(60000).IgnoreError();
      ph.stats = multi->stats();
    } else {
      single->WaitUntilEmpty(60000).IgnoreError();
      ph.stats.samples_produced = single->stats().samples_produced;
      ph.stats.samples_decoded = single->stats().samples_produced;
    }
  } else {
    auto c = batchcast::Consumer::Attach(address, o, world_rank);
    if (!c.ok()) { std::fprintf(stderr, "bench: attach: %s\n", c.status().message().c_str()); MPI_Abort(MPI_COMM_WORLD, 1); }
    batchcast::Batch batch;
    int64_t samples = 0;
    double t0 = 0;
    while ((*c)->Next(&batch).ok()) {
      if (samples == 0) t0 = bench::NowSeconds();  // from the first batch: start-up excluded
      samples += batch.size();
    }
    batch.Release();
    ph.consumer_rate = double(samples - o.batch_size) / (bench::NowSeconds() - t0);
    (*c)->Detach().IgnoreError();
  }
  SleepyBarrier(MPI_COMM_WORLD);
  return ph;
}

// Plain MPI_Allgatherv of the same per-batch counts as the exchange phase, in place, cycling
// through `buffers` buffers of a slot's size (as the ring cycles through its slots), all
// touched by one untimed pass first (the exchange is timed after its warm-up epoch too).
double PlainAllgathervSeconds(const Options& o, MPI_Comm leaders, int nodes, int batches,
                              int buffers) {
  const uint64_t sb = uint64_t(o.image_size) * o.image_size * 3;
  const int64_t p = o.producer_batch;
  std::vector<std::vector<uint8_t>> bufs(size_t(buffers), std::vector<uint8_t>(size_t(p) * sb, 1));
  const auto n_nodes = static_cast<size_t>(nodes);
  std::vector<int> counts(n_nodes), displs(n_nodes);
  for (int j = 0; j < nodes; ++j) {
    auto r = producer::ReplicateShare(p, nodes, j);
    counts[size_t(j)] = static_cast<int>(uint64_t(r.count) * sb);
    displs[size_t(j)] = static_cast<int>(uint64_t(r.begin) * sb);
  }
  auto one = [&](int b) {
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, bufs[size_t(b % buffers)].data(),
                   counts.data(), displs.data(), MPI_BYTE, leaders);
  };
  for (int b = 0; b < buffers; ++b) one(b);
  MPI_Barrier(leaders);
  double t0 = bench::NowSeconds();
  for (int b = 0; b < batches; ++b) one(b);
  return bench::NowSeconds() - t0;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Worker(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string dataset = argv[2];
  const int nodes = size / 2, node = rank / 2;
  MPI_Comm node_comm, leaders;
  MPI_Comm_split(MPI_COMM_WORLD, node, rank, &node_comm);
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2 == 0 ? 0 : MPI_UNDEFINED, rank, &leaders);
  Options o;
  o.dataset = dataset;
  o.image_size = 224;
  o.crop = "center";
  o.threads = 1;
  o.batch_size = 16;
  o.producer_batch = 48;
  o.epochs = 3;
  o.shuffle = true;
  o.seed = 3;
  // End to end: rounds alternate replicate / every node decodes all, so that the load of
  // other work on the machine hits both alike; each consumer reports its median round.
  constexpr int kE2eRounds = 3;
  std::vector<double> rep_rates, full_rates, speedups;
  Phase rep;
  for (int r = 0; r < kE2eRounds; ++r) {
    rep = RunPhase("replicate", o, node_comm, leaders, node, nodes, rank);
    Phase full = RunPhase("full", o, node_comm, leaders, node, nodes, rank);
    rep_rates.push_back(rep.consumer_rate);
    full_rates.push_back(full.consumer_rate);
    if (full.consumer_rate > 0) speedups.push_back(rep.consumer_rate / full.consumer_rate);
  }
  Options x = o;
  // Exchange: 3 epochs of kExBatches producer batches with a source that decodes nothing;
  // epoch 0 is the warm-up (first touch of the slots' pages), epochs 1-2 are timed and
  // compared with the same number of plain MPI_Allgatherv calls of the same counts, with
  // as many buffers as the ring has slots (the same memory footprint: 4 x 7 MiB per node
  // does not stay in a 32 MiB L3 across 2-3 nodes); a run on one cache-hot buffer is shown
  // for reference.
  constexpr int kExBatches = 100, kRounds = 3;
  x.limit_samples = 48 * kExBatches;
  x.producer_batch = 48;
  x.epochs = 3;
  const int ring_slots = x.buffer_depth + 2;
  const bool leader = rank % 2 == 0;
  std::vector<double> plain_s(kRounds + 1, 0), ratios, xbws, pbws, runbws;
  if (leader) plain_s[0] = PlainAllgathervSeconds(x, leaders, nodes, 2 * kExBatches, ring_slots);
  SleepyBarrier(MPI_COMM_WORLD);
  double steady_bytes = 0;
  for (int r = 0; r < kRounds; ++r) {
    Phase ex = RunPhase("exchange", x, node_comm, leaders, node, nodes, rank);
    if (leader)
      plain_s[size_t(r) + 1] = PlainAllgathervSeconds(x, leaders, nodes, 2 * kExBatches,
                                                      ring_slots);
    SleepyBarrier(MPI_COMM_WORLD);
    if (!leader) continue;
    const auto& ends = ex.stats.epoch_end_ns;
    if (ends.size() != 3) {
      std::fprintf(stderr, "bench: exchange phase ended after %zu epochs\n", ends.size());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    steady_bytes = double(ex.stats.exchange_bytes) * 2.0 / 3.0;
    const double xbw = steady_bytes / (double(ends[2] - ends[0]) * 1e-9);
    const double pbw = steady_bytes / (0.5 * (plain_s[size_t(r)] + plain_s[size_t(r) + 1]));
    xbws.push_back(xbw);
    pbws.push_back(pbw);
    ratios.push_back(xbw / pbw);
    runbws.push_back(double(ex.stats.exchange_bytes) / ex.seconds / pbw);
  }
  double hot_bw = 0;
  if (leader)
    hot_bw = steady_bytes / PlainAllgathervSeconds(x, leaders, nodes, 2 * kExBatches, 1);
  SleepyBarrier(MPI_COMM_WORLD);
  // Gather: leaders' share and exchange numbers, consumers' rates.
  constexpr int kVals = 10;
  double mine[kVals] = {Median(rep_rates), Median(full_rates),
                        rep.stats.samples_produced ? double(rep.stats.samples_decoded) /
                                                          double(rep.stats.samples_produced) : 0,
                        Median(ratios), Median(xbws), Median(pbws), Median(runbws), hot_bw,
                        rep.seconds > 0 ? double(rep.stats.exchange_wait_ns) * 1e-9 / rep.seconds
                                        : 0,
                        Median(speedups)};
  std::vector<double> all(size_t(size) * kVals);
  MPI_Gather(mine, kVals, MPI_DOUBLE, all.data(), kVals, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("RESULT nodes=%d", nodes);
    for (int r = 0; r < size; ++r) {
      const double* v = &all[size_t(r) * kVals];
      if (r % 2 == 1)
        std::printf(" rate_rep=%g rate_full=%g speedup=%g", v[0], v[1], v[9]);
      else
        std::printf(" share=%g ratio=%g xbw=%g pbw=%g runratio=%g hotbw=%g xwait=%g", v[2], v[3],
                    v[4], v[5], v[6], v[7], v[8]);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  if (leaders != MPI_COMM_NULL) MPI_Comm_free(&leaders);
  MPI_Comm_free(&node_comm);
  MPI_Finalize();
  return 0;
}

std::map<std::string, std::vector<double>> ParseResult(const std::string& line) {
  std::map<std::string, std::vector<double>> kv;
  std::istringstream in(line);
  std::string w;
  while (in >> w) {
    size_t eq = w.find('=');
    if (eq != std::string::npos) kv[w.substr(0, eq)].push_back(std::atof(w.c_str() + eq + 1));
  }
  return kv;
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

int Driver(int argc, char** argv) {
  std::string cache = "multinode_set", mpirun = "mpirun";
  int reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--cache") cache = argv[i + 1];
    else if (k == "--mpirun") mpirun = argv[i + 1];
    else if (k == "--reps") reps = std::atoi(argv[i + 1]);
  }
  std::filesystem::create_directories(cache);
  const std::string set = cache + "/photos-500x375-q90-192.h5";
  if (!std::filesystem::exists(set)) {
    batchcast::mpitest::PhotoSetSpec spec;
    spec.out = set;
    spec.images = 192;
    spec.width = 500;
    spec.height = 375;
    Status st = batchcast::mpitest::MakePhotoDataset(spec);
    if (!st.ok()) {
      std::fprintf(stderr, "bench_multinode: %s\n", st.message().c_str());
      return 1;
    }
  }
  char self[4096] = {0};
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return 1;
  std::vector<int> ns = {2, 3};
  std::string nodes_list;
  bench::Table table("bench_multinode: replicate mode over N virtual nodes (1 leader + 1 consumer "
                     "each), real JPEGs 500x375 q90 -> 224, producer batch 48, all on this machine");
  std::vector<double> shares_all, ratio_all, speed_all, hot_all;
  for (int n : ns) {
    std::vector<double> share, ratio, run_ratio, speedup, rate_rep, rate_full, bw_bc, bw_plain,
        bw_hot, hot_ratio, xwait;
    for (int r = 0; r < reps; ++r) {
      std::string cmd = fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                                    "timeout 300 {} --oversubscribe --bind-to none -n {} {} "
                                    "--worker {} 2>&1", mpirun, 2 * n, self, set);
      FILE* p = popen(cmd.c_str(), "r");
      std::string out, line, result;
      char buf[4096];
      while (p && fgets(buf, sizeof(buf), p)) {
        out += buf;
        if (std::string(buf).rfind("RESULT", 0) == 0) result = buf;
      }
      int rc = p ? pclose(p) : -1;
      if (rc != 0 || result.empty()) {
        std::fprintf(stderr, "bench_multinode: worker job failed (rc %d):\n%s", rc, out.c_str());
        return 1;
      }
      auto kv = ParseResult(result);
      double smax = 0;
      for (double s : kv["share"]) smax = std::max(smax, s);
      share.push_back(smax);
      const double xbw = Mean(kv["xbw"]), pbw = Mean(kv["pbw"]), hbw = Mean(kv["hotbw"]);
      ratio.push_back(Mean(kv["ratio"]));
      bw_bc.push_back(xbw / 1e9);
      bw_plain.push_back(pbw / 1e9);
      run_ratio.push_back(Mean(kv["runratio"]));
      bw_hot.push_back(hbw / 1e9);
      hot_ratio.push_back(xbw / hbw);
      xwait.push_back(Mean(kv["xwait"]));
      rate_rep.push_back(Mean(kv["rate_rep"]));
      rate_full.push_back(Mean(kv["rate_full"]));
      speedup.push_back(Mean(kv["speedup"]));
    }
    table.Add(fmt::format("N={} decode_share (target <= {:.3f})", n, 1.1 / n),
              bench::Summarize(share), "decoded/published");
    table.Add(fmt::format("N={} exchange_bw_ratio (target >= 0.8)", n), bench::Summarize(ratio),
              "x plain Allgatherv");
    table.Add(fmt::format("N={} exchange, received per node", n), bench::Summarize(bw_bc),
              "GB/s");
    table.Add(fmt::format("N={} plain MPI_Allgatherv, received per node", n),
              bench::Summarize(bw_plain), "GB/s");
    table.Add(fmt::format("N={} exchange, whole run incl. warm-up epoch", n),
              bench::Summarize(run_ratio), "x plain Allgatherv");
    table.Add(fmt::format("N={} plain, one cache-hot buffer (reference)", n),
              bench::Summarize(bw_hot), "GB/s");
    table.Add(fmt::format("N={} exchange over the cache-hot plain loop", n),
              bench::Summarize(hot_ratio), "x");
    table.Add(fmt::format("N={} consumer rate, replicate", n), bench::Summarize(rate_rep),
              "samples/s");
    table.Add(fmt::format("N={} consumer rate, every node decodes all", n),
              bench::Summarize(rate_full), "samples/s");
    table.Add(fmt::format("N={} replicate_speedup", n), bench::Summarize(speedup), "x");
    table.Add(fmt::format("N={} replicate: leader blocked on the exchange", n),
              bench::Summarize(xwait), "of its run time");
    shares_all.push_back(bench::Summarize(share).median);
    ratio_all.push_back(bench::Summarize(ratio).median);
    speed_all.push_back(bench::Summarize(speedup).median);
    hot_all.push_back(bench::Summarize(hot_ratio).median);
    nodes_list += (nodes_list.empty() ? "" : ",") + std::to_string(n);
  }
  table.Print();
  // One JSON line last; per-N values are arrays in the order of "nodes" (medians).
  auto arr = [](const std::vector<double>& v) {
    std::string s;
    for (double x : v) s += (s.empty() ? "" : ", ") + fmt::format("{:.4g}", x);
    return "[" + s + "]";
  };
  std::printf("{\"bench\": \"multinode\", \"nodes\": [%s], \"decode_share\": %s, "
              "\"exchange_bw_ratio\": %s, \"replicate_speedup\": %s, "
              "\"exchange_bw_ratio_cache_hot\": %s, \"reps\": %d}\n",
              nodes_list.c_str(), arr(shares_all).c_str(), arr(ratio_all).c_str(),
              arr(speed_all).c_str(), arr(hot_all).c_str(), reps);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--worker") return Worker(argc, argv);
  return Driver(argc, argv);
}
