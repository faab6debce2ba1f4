// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// make bench B=stage: the leader's model stage (docs/model-stage.md) against every consumer
// running the same encoder itself, side by side in one run, for K = 1, 2, 4 consumers that
// need the embedding. One process: the leader and K consumer threads; LibTorch pinned to one
// intra-op thread in both modes, so CPU-seconds compare like for like.
//   cpu_ms_per_sample   process CPU time / samples delivered (K x samples x epochs)
//   cost_ratio          leader-stage / per-consumer CPU per delivered sample (target at K=4:
//                       <= 1/K + 0.10)
//   samples_per_s       per consumer, wall clock
// and, at K = 1, where the stage's output goes: encoder.pt ends in a linear layer, whose out=
// variant writes into the slot (nothing copied after forward); encoder_copy.pt is the same
// module ending in .contiguous() (no out= variant: the output is copied into the slot):
//   copied_bytes_per_sample   the leader's stage_copied_bytes / samples (0 in place)
//   inplace_vs_copy_stage     stage time per sample, in place / copied
#include <ATen/Parallel.h>
#include <torch/script.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "batchcast/consumer.h"
#include "batchcast/torch.h"
#include "harness.h"
#include "producer/producer.h"
#include "tests/unit/node/synthetic_source.h"

namespace batchcast::bench {
namespace {

constexpr int64_t kSamples = 384;
constexpr int kEpochs = 1;
constexpr int kSide = 64;

std::string MakeEncoder(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/encoder.pt";
  if (std::filesystem::exists(path) && std::filesystem::exists(dir + "/encoder_copy.pt"))
    return path;
  std::ofstream(dir + "/make.py") << R"(import sys, torch
torch.manual_seed(0)
class Enc(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.pool = torch.nn.AdaptiveAvgPool2d(4)
        self.fc = torch.nn.Linear(512, 128)
    def forward(self, x):
        x = torch.relu(self.c1(x / 255.0))
        x = torch.relu(self.c2(x))
        return self.fc(torch.flatten(self.pool(x), 1))
class Copy(torch.nn.Module):
    def __init__(self, enc):
        super().__init__()
        self.enc = enc
    def forward(self, x):
        return self.enc(x).contiguous()
enc = Enc()
torch.jit.script(enc).save(sys.argv[1])
torch.jit.script(Copy(enc)).save(sys.argv[1].replace(".pt", "_copy.pt"))
)";
  const std::string cmd = "/usr/bin/python3 " + dir + "/make.py " + path;
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "bench_stage: %s failed\n", cmd.c_str());
    std::exit(1);
  }
  return path;
}

struct Run {
  double cpu_per_sample = 0, samples_per_s = 0;
  double stage_ms_per_sample = 0, copied_bytes_per_sample = 0;  // the leader's stage
};

// One stream to K consumers; `in_leader`: the leader runs the encoder, else every consumer.
Run RunOnce(const std::string& encoder, int k, bool in_leader, int rep) {
  producer::ProducerConfig cfg;
  cfg.options.epochs = kEpochs;
  cfg.options.batch_size = 32;
  cfg.options.producer_batch = 64;
  cfg.options.threads = 1;
  cfg.options.heartbeat_ms = 10000;
  if (in_leader) cfg.options.stage = "model(path=" + encoder + ",output=embedding,threads=1)";
  cfg.expected_consumers = k;
  cfg.max_consumer_batch = 32;
  cfg.socket_name = fmt::format("batchcast-bench-stage-{}-{}-{}-{}", getpid(), k, in_leader, rep);
  auto l = producer::Producer::Create(cfg, std::make_unique<node::SyntheticSource>(kSamples, kSide, 3));
  if (!l.ok()) {
    std::fprintf(stderr, "bench_stage: %s\n", l.status().ToString().c_str());
    std::exit(1);
  }
  const double cpu0 = ProcessCpuSeconds(), t0 = NowSeconds();
  Status run;
  std::thread leader([&] { run = (*l)->Run(); });
  std::vector<std::thread> consumers;
  std::vector<double> checksum(static_cast<size_t>(k), 0.0);
  for (int i = 0; i < k; ++i) {
    consumers.emplace_back([&, i] {
      Options o;
      o.batch_size = 32;
      o.epochs = kEpochs;
      auto c = Consumer::Attach((*l)->address(), o, i);
      if (!c.ok()) std::exit(1);
      torch::jit::Module module;
      if (!in_leader) {
        module = torch::jit::load(encoder);
        module.eval();  // as the leader's stage: eval, then freeze
        module = torch::jit::freeze(module);
      }
      c10::InferenceMode guard;
      Batch b;
      while ((*c)->Next(&b).ok()) {
        torch::Tensor e = in_leader ? ToTensor(b, "embedding").value()
                                    : module.forward({ToTorch(b).value().images.to(torch::kFloat32)})
                                          .toTensor();
        checksum[i] += e.sum().item<double>();
      }
    });
  }
  for (auto& t : consumers) t.join();
  leader.join();
  const double cpu = ProcessCpuSeconds() - cpu0, wall = NowSeconds() - t0;
  if (!run.ok()) {
    std::fprintf(stderr, "bench_stage: %s\n", run.ToString().c_str());
    std::exit(1);
  }
  const producer::ProducerStats s = (*l)->stats();
  return {cpu / double(k * kSamples * kEpochs), double(kSamples * kEpochs) / wall,
          double(s.stage_ns) * 1e-6 / double(kSamples * kEpochs),
          double(s.stage_copied_bytes) / double(kSamples * kEpochs)};
}

}  // namespace
}  // namespace batchcast::bench

int main(int argc, char** argv) {
  using namespace batchcast::bench;
  std::string cache = "stage_set";
  int reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--cache") cache = argv[i + 1];
    if (std::string(argv[i]) == "--reps") reps = std::atoi(argv[i + 1]);
  }
  at::set_num_threads(1);
  const std::string encoder = MakeEncoder(cache);
  Table table("model stage: encoder in the leader vs in every consumer (3x64x64, 384 samples)");
  JsonLine json;
  for (int k : {1, 2, 4}) {
    std::vector<double> leader_cpu, consumer_cpu, ratio, leader_rate, consumer_rate;
    for (int r = 0; r < reps; ++r) {
      const Run a = RunOnce(encoder, k, true, r), b = RunOnce(encoder, k, false, r);
      leader_cpu.push_back(a.cpu_per_sample * 1e3);
      consumer_cpu.push_back(b.cpu_per_sample * 1e3);
      ratio.push_back(a.cpu_per_sample / b.cpu_per_sample);
      leader_rate.push_back(a.samples_per_s);
      consumer_rate.push_back(b.samples_per_s);
    }
    table.Add(fmt::format("K={} leader stage: CPU per delivered sample", k), Summarize(leader_cpu), "ms");
    table.Add(fmt::format("K={} each consumer: CPU per delivered sample", k), Summarize(consumer_cpu), "ms");
    table.Add(fmt::format("K={} cost ratio (target <= 1/K + 0.10 = {:.2f})", k, 1.0 / k + 0.1),
              Summarize(ratio), "x");
    table.Add(fmt::format("K={} leader stage: samples/s per consumer", k), Summarize(leader_rate), "1/s");
    table.Add(fmt::format("K={} each consumer: samples/s per consumer", k), Summarize(consumer_rate), "1/s");
    json.Add(fmt::format("cost_ratio_k{}", k), Summarize(ratio).median);
    json.Add(fmt::format("leader_cpu_ms_per_sample_k{}", k), Summarize(leader_cpu).median);
    json.Add(fmt::format("consumer_cpu_ms_per_sample_k{}", k), Summarize(consumer_cpu).median);
    json.Add(fmt::format("leader_samples_per_s_k{}", k), Summarize(leader_rate).median);
    json.Add(fmt::format("consumer_samples_per_s_k{}", k), Summarize(consumer_rate).median);
  }
  // Where the output goes: written in place by the last operation vs copied after forward.
  std::vector<double> in_place_ms, copy_ms, ratio;
  double in_place_bytes = 0, copy_bytes = 0;
  const std::string copying = encoder.substr(0, encoder.size() - 3) + "_copy.pt";
  for (int r = 0; r < reps; ++r) {
    const Run a = RunOnce(encoder, 1, true, 100 + r), b = RunOnce(copying, 1, true, 200 + r);
    in_place_ms.push_back(a.stage_ms_per_sample);
    copy_ms.push_back(b.stage_ms_per_sample);
    ratio.push_back(a.stage_ms_per_sample / b.stage_ms_per_sample);
    in_place_bytes = a.copied_bytes_per_sample;
    copy_bytes = b.copied_bytes_per_sample;
  }
  table.Add("K=1 stage written in place: stage time per sample", Summarize(in_place_ms), "ms");
  table.Add("K=1 stage copied after forward: stage time per sample", Summarize(copy_ms), "ms");
  table.Add("K=1 stage time, in place / copied", Summarize(ratio), "x");
  json.Add("copied_bytes_per_sample_in_place", in_place_bytes);
  json.Add("copied_bytes_per_sample_copy", copy_bytes);
  json.Add("inplace_vs_copy_stage", Summarize(ratio).median);
  table.Print();
  json.Print();
  return 0;
}
