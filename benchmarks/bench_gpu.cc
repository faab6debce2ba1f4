// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// bench_gpu: the GPU data plane with 1 leader and K = 1, 2, 4 consumer processes on one GPU.
// Reports H2D copies and bytes per delivered batch (target: one copy per producer batch,
// independent of K), the H2D bandwidth achieved from the ring's pinned memfd slots over
// cudaMallocHost bandwidth measured in the same run (target >= 0.8), and the consumers'
// data-wait fraction. Without a device: "no CUDA device: skipped", {"skipped": true}, exit 0.
// Consumers are this binary re-executed with --child (CUDA state does not survive fork).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "batchcast/consumer.h"
#include "batchcast/gpu.h"
#include "harness.h"
#include "gpu/gpu_stager.h"
#include "producer/producer.h"
#include "transport/cuda/device_probe.h"

#if BATCHCAST_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

extern char** environ;

namespace batchcast::bench {
namespace {

// Cheap source: each image is one memset, so the leader is bound by the copy, not by a decoder.
class FlatSource : public producer::BatchSource {
 public:
  FlatSource(int64_t n, int size) : n_(n) {
    layout_.channels = 3;
    layout_.height = layout_.width = size;
  }
  int64_t num_samples() const override { return n_; }
  pipeline::SampleLayout MaxLayout() const override { return layout_; }
  pipeline::SampleLayout Layout(int) const override { return layout_; }
  Status Fill(const pipeline::BatchRequest& req, pipeline::BatchResult* result) override {
    auto* out = static_cast<uint8_t*>(req.images);
    for (size_t i = 0; i < req.samples.size(); ++i) {
      std::memset(out + i * layout_.bytes(), int(req.samples[i] & 0xff), layout_.bytes());
      req.labels[i] = req.samples[i] % 1000;
    }
    result->written = int64_t(req.samples.size());
    return Status::Ok();
  }

 private:
  int64_t n_;
  pipeline::SampleLayout layout_;
};

constexpr int kBatch = 64, kImage = 224, kEpochs = 3;
constexpr int64_t kSamples = 64 * 24;

#if BATCHCAST_HAVE_CUDA
int RunChild(const std::string& address, int rank, const std::string& out) {
  Options o;
  o.batch_size = kBatch;
  o.epochs = kEpochs;
  auto c = Consumer::Attach(address, o, rank);
  if (!c.ok()) return std::fprintf(stderr, "%s\n", c.status().message().c_str()), 1;
  auto g = GpuConsumer::Attach(**c, address, 0);
  if (!g.ok()) return std::fprintf(stderr, "%s\n", g.status().message().c_str()), 1;
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  void* sink = nullptr;
  cudaMalloc(&sink, size_t(kBatch) * 3 * kImage * kImage);
  double t0 = NowSeconds();
  int64_t wait_ns = 0, batches = 0;
  DeviceBatch b;
  while ((*g)->Next(s, &b).ok()) {  // a "step": read the batch once on the device
    cudaMemcpyAsync(sink, b.images().data, b.images().nbytes, cudaMemcpyDeviceToDevice, s);
    wait_ns += b.info().wait_ns;
    ++batches;
    b.Release();
    cudaStreamSynchronize(s);
  }
  double wall = NowSeconds() - t0;
  std::ofstream(out) << batches << " " << wait_ns << " " << int64_t(wall * 1e9) << "\n";
  return 0;
}

// cudaMemcpy bandwidth host -> device from `host` (GB/s), median of 5.
double CopyBandwidth(const void* host, void* dev, size_t bytes) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> bw;
  for (int r = 0; r < 6; ++r) {
    cudaEventRecord(a);
    cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (r > 0) bw.push_back(double(bytes) / (ms * 1e6));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return Summarize(bw).median;
}

struct KResult {
  int consumers = 0;
  double copies_per_batch = 0, h2d_mb_per_delivered = 0, bw_ratio = 0, wait_frac = 0;
};

KResult RunK(int k, const char* self, double pinned_bw) {
  Options o;
  o.batch_size = kBatch;
  o.producer_batch = 2 * kBatch;
  o.epochs = kEpochs;
  producer::ProducerConfig cfg;
  cfg.options = o;
  cfg.expected_consumers = k;
  cfg.socket_name = "batchcast-bench-gpu-" + std::to_string(getpid()) + "-" + std::to_string(k);
  cfg.job = "bench_gpu";
  auto leader = producer::Producer::Create(cfg, std::make_unique<FlatSource>(kSamples, kImage)).value();
  auto stager = gpu::GpuStager::Create(leader->staging_target(), {}).value();
  std::vector<pid_t> pids;
  std::vector<std::string> outs;
  for (int i = 0; i < k; ++i) {
    outs.push_back("/tmp/" + cfg.socket_name + "-" + std::to_string(i));
    std::string rank = std::to_string(i);
    std::string child = "--child";
    char* argv[] = {const_cast<char*>(self), child.data(), cfg.socket_name.data(), rank.data(),
                    outs.back().data(), nullptr};
    pid_t pid;
    if (posix_spawn(&pid, self, nullptr, nullptr, argv, environ) == 0) pids.push_back(pid);
  }
  Status st = leader->Run();
  for (pid_t p : pids) waitpid(p, nullptr, 0);
  (void)stager->ring().Synchronize();
  KResult r;
  r.consumers = k;
  cuda::DeviceRingStats rs = stager->ring().stats();
  int64_t delivered = 0, wait = 0, wall = 0;
  for (auto& f : outs) {
    int64_t b = 0, w = 0, t = 0;
    std::ifstream(f) >> b >> w >> t;
    delivered += b, wait += w, wall += t;
    std::remove(f.c_str());
  }
  if (!st.ok()) std::fprintf(stderr, "bench_gpu: leader: %s\n", st.message().c_str());
  r.copies_per_batch = double(rs.h2d_copies) / double(leader->stats().producer_batches);
  r.h2d_mb_per_delivered = delivered ? double(rs.h2d_bytes) / delivered / 1e6 : 0;
  r.wait_frac = wall ? double(wait) / double(wall) : 0;
  // The ring's own pinned memory (the registered memfd mapping) into its device slot.
  r.bw_ratio = CopyBandwidth(leader->ring().data_base(), stager->ring().device_slot(0),
                             leader->ring().config().slot_bytes) / pinned_bw;
  return r;
}
#endif

int Main(int argc, char** argv) {
#if BATCHCAST_HAVE_CUDA
  if (argc == 5 && std::string(argv[1]) == "--child") return RunChild(argv[2], std::atoi(argv[3]), argv[4]);
#endif
  auto n = cuda::VisibleDeviceCount();
  if (!n.ok()) {
    std::printf("no CUDA device: skipped (%s)\n", n.status().message().c_str());
    std::printf("{\"bench\": \"gpu\", \"skipped\": true, \"reason\": \"%s\"}\n",
                n.status().message().c_str());
    return 0;
  }
#if BATCHCAST_HAVE_CUDA
  const size_t bytes = size_t(64) << 20;
  void *host = nullptr, *dev = nullptr;
  cudaMallocHost(&host, bytes);
  cudaMalloc(&dev, bytes);
  std::memset(host, 1, bytes);
  const double pinned_bw = CopyBandwidth(host, dev, bytes);
  cudaFreeHost(host);
  cudaFree(dev);
  std::vector<KResult> rs;
  for (int k : {1, 2, 4}) rs.push_back(RunK(k, "/proc/self/exe", pinned_bw));
  Table t(fmt::format("bench_gpu: 1 leader, K consumers on GPU 0; batch {} x 3x{}x{} uint8; "
                      "cudaMallocHost H2D {:.1f} GB/s", kBatch, kImage, kImage, pinned_bw));
  std::string ks, copies, mb, ratio, wait;
  for (const KResult& r : rs) {
    std::string k = std::to_string(r.consumers);
    t.Add("K=" + k + " h2d copies per producer batch", {r.copies_per_batch, r.copies_per_batch, r.copies_per_batch}, "copies");
    t.Add("K=" + k + " h2d MB per delivered batch", {r.h2d_mb_per_delivered, r.h2d_mb_per_delivered, r.h2d_mb_per_delivered}, "MB");
    t.Add("K=" + k + " ring h2d bw / pinned bw", {r.bw_ratio, r.bw_ratio, r.bw_ratio}, "ratio");
    t.Add("K=" + k + " consumer data-wait fraction", {r.wait_frac, r.wait_frac, r.wait_frac}, "frac");
    const char* sep = ks.empty() ? "" : ", ";
    ks += sep + k;
    copies += sep + fmt::format("{:.4g}", r.copies_per_batch);
    mb += sep + fmt::format("{:.4g}", r.h2d_mb_per_delivered);
    ratio += sep + fmt::format("{:.4g}", r.bw_ratio);
    wait += sep + fmt::format("{:.4g}", r.wait_frac);
  }
  t.Print();
  std::printf("{\"bench\": \"gpu\", \"skipped\": false, \"consumers\": [%s], "
              "\"h2d_copies_per_batch\": [%s], \"h2d_mb_per_delivered_batch\": [%s], "
              "\"h2d_bw_ratio\": [%s], \"consumer_wait_frac\": [%s], \"pinned_gbps\": %.4g}\n",
              ks.c_str(), copies.c_str(), mb.c_str(), ratio.c_str(), wait.c_str(), pinned_bw);
#endif
  return 0;
}

}  // namespace
}  // namespace batchcast::bench

int main(int argc, char** argv) { return batchcast::bench::Main(argc, argv); }
