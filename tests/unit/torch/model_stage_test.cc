// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The leader's model stage (docs/model-stage.md): a small encoder (conv -> pool -> linear)
// scripted at test time with python3-torch runs once per producer batch in the leader, and
// every consumer finds in the slot exactly what running the same module itself gives. Bad
// stages are refused at start naming the stage and the cause; an exception in forward fails
// the stream naming it.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "batchcast/consumer.h"
#include "batchcast/torch.h"
#include "node/leader.h"
#include "tests/unit/node/synthetic_source.h"

namespace batchcast::node {
namespace {

std::string Socket() {
  static std::atomic<int> n{0};
  return "batchcast-test-" + std::to_string(getpid()) + "-stage-" + std::to_string(n++);
}

// Scripts the test modules once: enc.pt (conv -> pool -> linear, 5 outputs), flat.pt (an
// output whose per-sample shape depends on the batch), boom.pt (raises for batches > 2).
class ModelStageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("bc-stage-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    const std::string script = (dir_ / "make.py").string();
    std::ofstream(script) << R"(import sys, torch
torch.manual_seed(0)
class Enc(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.pool = torch.nn.AdaptiveAvgPool2d(2)
        self.fc = torch.nn.Linear(16, 5)
    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x / 255.0))), 1))
class Flat(torch.nn.Module):
    def forward(self, x):
        return x.flatten(1).repeat(1, x.size(0))
class Boom(torch.nn.Module):
    def forward(self, x):
        if x.size(0) > 2:
            raise RuntimeError("boom in forward")
        return x.flatten(1)[:, :3]
for name, m in (("enc", Enc()), ("flat", Flat()), ("boom", Boom())):
    torch.jit.script(m).save(sys.argv[1] + "/" + name + ".pt")
)";
    const std::string cmd = "/usr/bin/python3 " + script + " " + dir_.string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  static LeaderConfig Config(const std::string& stage, int consumers) {
    LeaderConfig cfg;
    cfg.options.epochs = 1;
    cfg.options.batch_size = 8;
    cfg.options.producer_batch = 16;
    cfg.options.stage = stage;
    cfg.options.heartbeat_ms = 5000;
    cfg.expected_consumers = consumers;
    cfg.max_consumer_batch = 16;
    cfg.socket_name = Socket();
    cfg.join_timeout_ms = 60000;
    return cfg;
  }
  static std::string Module(const char* name) { return (dir_ / name).string(); }
  static std::string Refusal(const std::string& stage) {
    auto l = Leader::Create(Config(stage, 1), std::make_unique<SyntheticSource>(40, 8, 1));
    return l.ok() ? "(accepted)" : l.status().message();
  }

  static std::filesystem::path dir_;
};
std::filesystem::path ModelStageTest::dir_;

// K = 3 consumers of different batch sizes (joined batches included): every embedding in
// every batch equals the module run by the consumer on that batch's images; the leader ran
// the stage once per producer batch.
TEST_F(ModelStageTest, TheSlotHoldsWhatTheConsumerComputesOncePerProducerBatch) {
  const int consumers = 3;
  const int64_t n = 40;  // producer batches of 16, 16, 8
  auto l = Leader::Create(
      Config("model(path=" + Module("enc.pt") + ",input=images,output=embedding)", consumers),
      std::make_unique<SyntheticSource>(n, 8, 1));
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  Leader& leader = **l;
  Status run;
  std::thread t([&] { run = leader.Run(); });
  std::vector<int64_t> seen(consumers, 0), bad(consumers, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < consumers; ++i) {
    threads.emplace_back([&, i] {
      Options o;
      o.batch_size = i == 0 ? 8 : i == 1 ? 5 : 16;
      auto c = Consumer::Attach(leader.address(), o, i);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      torch::jit::Module module = torch::jit::load(Module("enc.pt"));
      module.eval();
      c10::InferenceMode guard;
      Batch b;
      while ((*c)->Next(&b).ok()) {
        TorchBatch tb = ToTorch(b).value();
        ASSERT_EQ(tb.tensors.count("embedding"), 1u);
        const torch::Tensor mine = module.forward({tb.images.to(torch::kFloat32)}).toTensor();
        const torch::Tensor slot = ToTensor(b, "embedding").value();
        EXPECT_EQ(slot.sizes(), mine.sizes());
        bad[i] += !torch::allclose(slot, mine, 1e-4, 1e-5);
        seen[i] += b.size() - b.info().repeats;
      }
    });
  }
  for (auto& th : threads) th.join();
  t.join();
  ASSERT_TRUE(run.ok()) << run.ToString();
  for (int i = 0; i < consumers; ++i) {
    EXPECT_EQ(seen[i], n) << "consumer " << i;
    EXPECT_EQ(bad[i], 0) << "consumer " << i;
  }
  EXPECT_EQ(leader.stats().stage_runs, 3);  // once per producer batch, not per consumer
  EXPECT_GT(leader.stats().stage_ns, 0);
}

TEST_F(ModelStageTest, BadStagesAreRefusedAtStartNamingTheStageAndTheCause) {
  const std::string enc = Module("enc.pt");
  EXPECT_NE(Refusal("model(path=/nonexistent/enc.pt)").find(
                "leader: stage 1 model(path=/nonexistent/enc.pt): no TorchScript file "
                "'/nonexistent/enc.pt'"), std::string::npos) << Refusal("model(path=/nonexistent/enc.pt)");
  EXPECT_NE(Refusal("model(path=" + Module("flat.pt") + ")").find(
                "the output shape is not fixed: 64 per sample for a batch of 1, 128 for a batch "
                "of 2"), std::string::npos) << Refusal("model(path=" + Module("flat.pt") + ")");
  EXPECT_NE(Refusal("model(path=" + enc + ",dtype=float64)").find("dtype=float64; use float32 or "
                                                                 "float16"), std::string::npos);
  EXPECT_NE(Refusal("model(path=" + enc + ",outptu=x)").find("unknown key or value 'outptu=x'"),
            std::string::npos);
  EXPECT_NE(Refusal("model(path=" + enc + ",input=tokens)").find(
                "input=tokens is neither images nor the output of an earlier stage"),
            std::string::npos);
  EXPECT_NE(Refusal("model(path=" + enc + ",output=labels)").find(
                "tensor name 'labels' is reserved"), std::string::npos);
  EXPECT_NE(Refusal("model(path=" + enc + ",keep_input=false)").find(
                "keep_input=false is not supported yet"), std::string::npos);
  if (!torch::cuda::is_available()) {
    EXPECT_NE(Refusal("model(path=" + enc + ",device=cuda)").find(
                  "device=cuda, but this LibTorch sees no CUDA device"), std::string::npos);
  }
  // Chained: the second stage reads the first one's output.
  EXPECT_EQ(Refusal("model(path=" + enc + ",output=e1); model(path=" + Module("boom.pt") +
                    ",input=e1,output=e2)"), "(accepted)");
}

TEST_F(ModelStageTest, AnExceptionInForwardFailsTheStreamNamingTheStage) {
  // boom.pt passes the start probe (batches of 1 and 2) and raises on a producer batch of 16.
  auto l = Leader::Create(Config("model(path=" + Module("boom.pt") + ",output=x)", 1),
                          std::make_unique<SyntheticSource>(40, 8, 1));
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  Status run;
  std::thread t([&] { run = (*l)->Run(); });
  Options o;
  o.batch_size = 8;
  auto c = Consumer::Attach((*l)->address(), o, 0);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Batch b;
  Status st;
  while ((st = (*c)->Next(&b)).ok()) {
  }
  t.join();
  EXPECT_FALSE(run.ok());
  EXPECT_NE(run.message().find("stage 1 model(" + Module("boom.pt") + "): images -> x: forward "
                               "failed on a batch of 16"), std::string::npos) << run.message();
  EXPECT_NE(run.message().find("boom in forward"), std::string::npos) << run.message();
  EXPECT_NE(st.message().find("boom in forward"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace batchcast::node
