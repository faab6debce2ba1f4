// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The LibTorch checks of the device proof (device/items.sh), compiled on the GPU machine
// against its own torch (2.11 + CUDA) with the bundle's module archives:
//   TorchDevice.ToTorchAliasesTheSlot: a leader in this process stages on GPU 0; a consumer
//     process (this binary re-executed; CUDA state does not survive fork) maps the slots by
//     IPC and turns each DeviceBatch into CUDA tensors with batchcast::ToTorch: the tensor's
//     data_ptr is the device view's pointer, and its bytes (summed on the GPU and compared
//     byte by byte) are the host batch's.
//   TorchDevice.ModelStageOnCudaOncePerProducerBatch: stage=model(...,device=cuda) (the
//     module BATCHCAST_STAGE_MODULE, the encoder BC_STAGE_ENCODER): two consumers find in
//     every batch what the encoder gives on the CPU for its images, and the leader ran the
//     stage once per producer batch.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "batchcast/consumer.h"
#include "batchcast/gpu.h"
#include "batchcast/torch.h"
#include "gpu/gpu_stager.h"
#include "producer/producer.h"
#include "tests/unit/node/synthetic_source.h"

extern char** environ;

namespace batchcast {
namespace {

std::string Socket(const char* tag) {
  return std::string("bc-torch-device-") + std::to_string(getpid()) + "-" + tag;
}

// The consumer process: every batch through ToTorch(DeviceBatch); one result line.
std::string RunChild(const std::string& address, int epochs) {
  Options o;
  o.batch_size = 8;
  o.epochs = epochs;
  auto c = Consumer::Attach(address, o, 0);
  if (!c.ok()) return "error=attach:" + c.status().message();
  auto gpu = GpuConsumer::Attach(**c, address, 0);
  if (!gpu.ok()) return "error=gpu:" + gpu.status().message();
  // torch's current stream is the legacy default stream unless a trainer sets another: the
  // batch's ready wait goes there (nullptr), so torch's kernels are ordered after the copy.
  void* stream = nullptr;
  int64_t batches = 0, not_aliased = 0, bad_bytes = 0, bad_sums = 0, wrong_device = 0;
  std::map<uint64_t, std::multiset<int64_t>> seen;
  DeviceBatch b;
  for (;;) {
    Status st = (*gpu)->Next(stream, &b);
    if (st.code() == StatusCode::kEndOfStream) break;
    if (!st.ok()) return "error=next:" + st.message();
    {  // the tensors (and their KeepAlive handles) go before the release
    auto t = ToTorch(b);
    if (!t.ok()) return "error=totorch:" + t.status().message();
    not_aliased += t->images.data_ptr() != b.images().data;
    wrong_device += !t->images.is_cuda() || t->images.device().index() != 0;
    const auto* host = static_cast<const uint8_t*>(b.host().images().data);
    const size_t n = b.images().nbytes;
    torch::Tensor bytes = t->images.view(torch::kUInt8).reshape({-1});
    const int64_t device_sum = bytes.to(torch::kInt64).sum().item<int64_t>();  // on the GPU
    int64_t host_sum = 0;
    for (size_t i = 0; i < n; ++i) host_sum += host[i];
    bad_sums += device_sum != host_sum;
    torch::Tensor back = bytes.cpu();
    const auto* d = back.data_ptr<uint8_t>();
    for (size_t i = 0; i < n; ++i) bad_bytes += d[i] != host[i];
    for (int64_t i = 0; i < b.size(); ++i) seen[b.info().epoch].insert(b.host().sample_ids()[i]);
    ++batches;
    }
    b.Release();
  }
  int64_t distinct = 0;
  for (auto& [e, ids] : seen) distinct += int64_t(std::set<int64_t>(ids.begin(), ids.end()).size());
  return "batches=" + std::to_string(batches) + " epochs=" + std::to_string(seen.size()) +
         " distinct=" + std::to_string(distinct) + " not_aliased=" + std::to_string(not_aliased) +
         " wrong_device=" + std::to_string(wrong_device) + " bad_sums=" + std::to_string(bad_sums) +
         " bad_bytes=" + std::to_string(bad_bytes);
}

std::map<std::string, std::string> ReadResult(const std::string& path) {
  std::map<std::string, std::string> kv;
  std::ifstream in(path);
  std::string tok;
  while (in >> tok) {
    auto eq = tok.find('=');
    if (eq != std::string::npos) kv[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return kv;
}

TEST(TorchDevice, ToTorchAliasesTheSlot) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: torch sees none";
  Options o;
  o.batch_size = 8;
  o.producer_batch = 16;
  o.epochs = 2;
  producer::ProducerConfig cfg;
  cfg.options = o;
  cfg.expected_consumers = 1;
  cfg.max_consumer_batch = 8;
  cfg.socket_name = Socket("view");
  cfg.job = "torchdevice";
  cfg.join_timeout_ms = 60000;
  auto leader = producer::Producer::Create(cfg, std::make_unique<node::SyntheticSource>(96, 16));
  ASSERT_TRUE(leader.ok()) << leader.status().ToString();
  auto stager = gpu::GpuStager::Create((*leader)->staging_target(), {});
  ASSERT_TRUE(stager.ok()) << stager.status().ToString();
  const std::string out = ::testing::TempDir() + cfg.socket_name + ".txt";
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  env.push_back("BC_TORCH_CHILD_ADDRESS=" + (*leader)->address());
  env.push_back("BC_TORCH_CHILD_OUT=" + out);
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", filter = "--gtest_filter=TorchDevice.DISABLED_Child",
              disabled = "--gtest_also_run_disabled_tests";
  char* argv[] = {self.data(), filter.data(), disabled.data(), nullptr};
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()), 0);
  Status run = (*leader)->Run();
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(run.ok()) << run.ToString();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "consumer process status " << status;
  auto kv = ReadResult(out);
  std::remove(out.c_str());
  ASSERT_EQ(kv.count("error"), 0u) << kv["error"];
  EXPECT_EQ(kv["batches"], "24");      // 2 epochs x 96 / 8
  EXPECT_EQ(kv["distinct"], "192");    // every sample once per epoch
  EXPECT_EQ(kv["not_aliased"], "0");   // the tensor is the slot, no copy
  EXPECT_EQ(kv["wrong_device"], "0");
  EXPECT_EQ(kv["bad_sums"], "0");
  EXPECT_EQ(kv["bad_bytes"], "0");
}

TEST(TorchDevice, DISABLED_Child) {
  const char* address = std::getenv("BC_TORCH_CHILD_ADDRESS");
  const char* out = std::getenv("BC_TORCH_CHILD_OUT");
  if (address == nullptr || out == nullptr) GTEST_SKIP() << "runs only as the consumer process";
  std::ofstream(out) << RunChild(address, 2) << "\n";
}

TEST(TorchDevice, ModelStageOnCudaOncePerProducerBatch) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: torch sees none";
  const char* enc = std::getenv("BC_STAGE_ENCODER");
  ASSERT_NE(enc, nullptr) << "set BC_STAGE_ENCODER (device/python/make_models.py's enc.pt)";
  producer::ProducerConfig cfg;
  cfg.options.epochs = 1;
  cfg.options.batch_size = 8;
  cfg.options.producer_batch = 16;
  cfg.options.stage = std::string("model(path=") + enc + ",output=embedding,device=cuda)";
  cfg.expected_consumers = 2;
  cfg.max_consumer_batch = 8;
  cfg.socket_name = Socket("stage");
  cfg.job = "torchdevice";
  cfg.join_timeout_ms = 60000;
  const int64_t n = 48;  // 3 producer batches
  auto l = producer::Producer::Create(cfg, std::make_unique<node::SyntheticSource>(n, 8, 3));
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  producer::Producer& leader = **l;
  Status run;
  std::thread t([&] { run = leader.Run(); });
  std::vector<int64_t> seen(2, 0), bad(2, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      Options o;
      o.batch_size = i == 0 ? 8 : 4;
      o.epochs = 1;
      auto c = Consumer::Attach(leader.address(), o, i);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      torch::jit::Module module = torch::jit::load(enc);  // on the CPU: the reference
      module.eval();
      c10::InferenceMode guard;
      Batch batch;
      while ((*c)->Next(&batch).ok()) {
        TorchBatch tb = ToTorch(batch).value();
        const torch::Tensor mine = module.forward({tb.images.to(torch::kFloat32)}).toTensor();
        const torch::Tensor slot = ToTensor(batch, "embedding").value();
        bad[i] += !torch::allclose(slot, mine, 1e-3, 1e-3);  // GPU vs CPU arithmetic
        seen[i] += batch.size() - batch.info().repeats;
      }
    });
  }
  for (auto& th : threads) th.join();
  t.join();
  ASSERT_TRUE(run.ok()) << run.ToString();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(seen[i], n) << "consumer " << i;
    EXPECT_EQ(bad[i], 0) << "consumer " << i;
  }
  EXPECT_EQ(leader.stats().stage_runs, 3);  // once per producer batch, not per consumer
}

}  // namespace
}  // namespace batchcast

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
