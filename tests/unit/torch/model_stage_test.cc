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
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "batchcast/consumer.h"
#include "batchcast/torch.h"
#include "producer/producer.h"
#include "tests/unit/node/synthetic_source.h"

namespace batchcast::node {
namespace {

std::string Socket() {
  static std::atomic<int> n{0};
  return "batchcast-test-" + std::to_string(getpid()) + "-stage-" + std::to_string(n++);
}

// The test modules: enc.pt (conv -> pool -> linear, 5 outputs, any image size), flat.pt (an
// output whose per-sample shape depends on the batch), spatial.pt (one that depends on the
// image size), boom.pt (raises for batches > 2).
constexpr const char* kMakeModules = R"(import sys, torch
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
class Spatial(torch.nn.Module):
    def forward(self, x):
        return x.mean(1).flatten(1)
class Boom(torch.nn.Module):
    def forward(self, x):
        if x.size(0) > 2:
            raise RuntimeError("boom in forward")
        return x.flatten(1)[:, :3]
for name, m in (("enc", Enc()), ("flat", Flat()), ("spatial", Spatial()), ("boom", Boom())):
    torch.jit.script(m).save(sys.argv[1] + "/" + name + ".pt")
)";

// Scripts the modules once per build tree and script: ctest runs each test of the suite as a
// process of its own, and importing torch costs seconds, so the first process writes them
// beside the test binary (into its own directory, then renamed: a concurrent process keeps
// the first complete copy) and the others reuse them.
class ModelStageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::filesystem::path bin = std::filesystem::read_symlink("/proc/self/exe").parent_path();
    dir_ = bin / ("model_stage_modules-" +
                  std::to_string(std::hash<std::string>{}(std::string(kMakeModules))));
    if (std::filesystem::exists(dir_ / "boom.pt")) return;
    const std::filesystem::path mine = dir_.string() + "." + std::to_string(getpid());
    std::filesystem::create_directories(mine);
    const std::string script = (mine / "make.py").string();
    std::ofstream(script) << kMakeModules;
    const std::string cmd = "/usr/bin/python3 " + script + " " + mine.string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::error_code ec;
    std::filesystem::rename(mine, dir_, ec);
    if (ec) std::filesystem::remove_all(mine);  // another process was first
  }

  static producer::ProducerConfig Config(const std::string& stage, int consumers) {
    producer::ProducerConfig cfg;
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
  // A consumer (batch size b, `epochs`) of `address` that calls on_batch(enc.pt, batch) for
  // every batch, with enc.pt loaded in eval mode and under InferenceMode.
  using OnBatch = std::function<void(torch::jit::Module&, const Batch&)>;
  static void ConsumeWithEncoder(const std::string& address, int b, int rank, int epochs,
                                 const OnBatch& on_batch) {
    Options o;
    o.batch_size = b;
    o.epochs = epochs;
    auto c = Consumer::Attach(address, o, rank);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    torch::jit::Module module = torch::jit::load(Module("enc.pt"));
    module.eval();
    c10::InferenceMode guard;
    Batch batch;
    while ((*c)->Next(&batch).ok()) on_batch(module, batch);
  }
  static std::string Refusal(const std::string& stage) {
    auto l = producer::Producer::Create(Config(stage, 1), std::make_unique<SyntheticSource>(40, 8, 1));
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
  auto l = producer::Producer::Create(
      Config("model(path=" + Module("enc.pt") + ",input=images,output=embedding)", consumers),
      std::make_unique<SyntheticSource>(n, 8, 1));
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  producer::Producer& leader = **l;
  Status run;
  std::thread t([&] { run = leader.Run(); });
  std::vector<int64_t> seen(consumers, 0), bad(consumers, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < consumers; ++i) {
    const int batch_size = i == 0 ? 8 : i == 1 ? 5 : 16;
    threads.emplace_back([&, i, batch_size] {
      ConsumeWithEncoder(leader.address(), batch_size, i, 1, [&](auto& module, const Batch& b) {
        TorchBatch tb = ToTorch(b).value();
        ASSERT_EQ(tb.tensors.count("embedding"), 1u);
        const torch::Tensor mine = module.forward({tb.images.to(torch::kFloat32)}).toTensor();
        const torch::Tensor slot = ToTensor(b, "embedding").value();
        EXPECT_EQ(slot.sizes(), mine.sizes());
        bad[i] += !torch::allclose(slot, mine, 1e-4, 1e-5);
        seen[i] += b.size() - b.info().repeats;
      });
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
  // The module's last operation (linear) wrote straight into the slot: nothing was copied
  // after forward (docs/model-stage.md "Where the output is written").
  EXPECT_EQ(leader.stats().stage_copied_bytes, 0);
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
  EXPECT_NE(Refusal("model(path=" + enc + ",keep_input=no)").find(
                "unknown key or value 'keep_input=no'"), std::string::npos);
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
  auto l = producer::Producer::Create(Config("model(path=" + Module("boom.pt") + ",output=x)", 1),
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


// The module run on the 1-channel images a consumer's batch had, as SyntheticSource (or, with
// `sized`, SizedSource) wrote them for its sample ids.
torch::Tensor Expected(torch::jit::Module& module, const Batch& b, int size, bool sized = false) {
  torch::Tensor images = torch::empty({b.size(), 1, size, size}, torch::kUInt8);
  uint8_t* p = images.data_ptr<uint8_t>();
  const size_t per = size_t(size) * size_t(size);
  for (int64_t i = 0; i < b.size(); ++i) {
    const int64_t id = b.sample_ids()[i];
    for (size_t k = 0; k < per; ++k)
      p[size_t(i) * per + k] = sized ? SizedPixel(id, size, k) : SyntheticPixel(id, k);
  }
  return module.forward({images.to(torch::kFloat32)}).toTensor();
}

// keep_input=false: consumers (batch sizes 8 and 5: in-place and joined batches) get the
// embedding without images, a clear error when they ask for them, and the slot keeps no room
// for the images' fill-repeat tail.
TEST_F(ModelStageTest, KeepInputFalsePublishesTheOutputOnlyInASmallerSlot) {
  const int64_t n = 40;
  // float16: converted from forward's float32 output, so copied once into the slot.
  const std::string stage = "model(path=" + Module("enc.pt") + ",keep_input=false,dtype=float16)";
  auto kept = producer::Producer::Create(Config("model(path=" + Module("enc.pt") + ")", 1),
                             std::make_unique<SyntheticSource>(n, 8, 1));
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  auto l = producer::Producer::Create(Config(stage, 2), std::make_unique<SyntheticSource>(n, 8, 1));
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  producer::Producer& leader = **l;
  // P 16, b 16: 47 positions; images 64 bytes each: 16 x 64 instead of 47 x 64.
  EXPECT_EQ((*kept)->ring().config().slot_bytes, 8192u);
  EXPECT_EQ(leader.ring().config().slot_bytes, 4096u);
  Status run;
  std::thread t([&] { run = leader.Run(); });
  std::vector<int64_t> seen(2, 0), bad(2, 0);
  std::vector<std::string> missing(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      ConsumeWithEncoder(leader.address(), i == 0 ? 8 : 5, i, 1, [&](auto& module, const Batch& b) {
        bad[i] += b.images().nbytes != 0 || b.tensor("images").data != nullptr ||
                  b.num_tensors() != 1 || ToTorch(b).value().images.defined();
        auto images = ToTensor(b, "images");
        if (!images.ok()) missing[i] = images.status().message();
        const torch::Tensor slot = ToTensor(b, "embedding").value();
        bad[i] += slot.scalar_type() != torch::kFloat16 ||
                  !torch::allclose(slot.to(torch::kFloat32), Expected(module, b, 8), 1e-2, 1e-3);
        seen[i] += b.size() - b.info().repeats;
      });
    });
  }
  for (auto& th : threads) th.join();
  t.join();
  ASSERT_TRUE(run.ok()) << run.ToString();
  EXPECT_EQ(leader.stats().stage_copied_bytes, n * 5 * 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(seen[i], n) << "consumer " << i;
    EXPECT_EQ(bad[i], 0) << "consumer " << i;
    EXPECT_NE(missing[i].find("the batch has no images"), std::string::npos) << missing[i];
    EXPECT_NE(missing[i].find("keep_input=false in option 'stage'"), std::string::npos);
    EXPECT_NE(missing[i].find("it has labels, sample_ids, embedding"), std::string::npos);
  }
}

// Progressive resizing at sizes 4 and 8 with a module that pools globally before its linear
// layer: each batch's embedding is the module run on that batch's images at its size; a
// module whose output depends on the image size is refused at start naming both sizes.
TEST_F(ModelStageTest, WithProgressiveResizingEverySizeIsProbedAndRun) {
  producer::ProducerConfig cfg = Config("model(path=" + Module("enc.pt") + ",keep_input=false)", 1);
  cfg.options.epochs = 2;
  cfg.options.producer_batch = 8;
  cfg.options.resize = "resize(sizes=4:8,upgrade=1,final_epochs=1)";
  cfg.max_consumer_batch = 4;
  cfg.print_plan = false;
  producer::ProducerConfig spatial = cfg;
  spatial.options.stage = "model(path=" + Module("spatial.pt") + ")";
  spatial.socket_name = Socket();
  auto refused = producer::Producer::Create(spatial, std::make_unique<SizedSource>(30, 8, 1));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(
                "the output shape depends on the image size: 16 per sample for input 1x4x4, 64 "
                "for input 1x8x8; with progressive resizing"), std::string::npos)
      << refused.status().message();
  const int64_t n = 30;
  auto l = producer::Producer::Create(cfg, std::make_unique<SizedSource>(n, 8, 1));
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  Status run;
  std::thread t([&] { run = (*l)->Run(); });
  std::map<int, int64_t> samples_at;  // image size -> samples seen
  int64_t bad = 0;
  ConsumeWithEncoder((*l)->address(), 4, 0, 2, [&](auto& module, const Batch& b) {
    const int size = b.info().image_size;
    const torch::Tensor slot = ToTensor(b, "embedding").value();
    bad += !torch::allclose(slot, Expected(module, b, size, true), 1e-4, 1e-5);
    samples_at[size] += b.size() - b.info().repeats;
  });
  t.join();
  ASSERT_TRUE(run.ok()) << run.ToString();
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(samples_at[4], n);  // epoch 0 at size 4, epoch 1 at size 8
  EXPECT_EQ(samples_at[8], n);
}

}  // namespace
}  // namespace batchcast::node
