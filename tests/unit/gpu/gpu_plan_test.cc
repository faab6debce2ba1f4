// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// When the MPI Runtime takes the GPU path and how a node's GPUs are wired (node/gpu_plan.h),
// and the NCCL fan-out header check: pure functions, so they run on any machine.
#include <gtest/gtest.h>

#include "batchcast/options.h"
#include "gpu/gpu_plan.h"
#include "gpu/gpu_runtime.h"
#include "gpu/gpu_stager.h"
#include "transport/cuda/device_probe.h"
#include "transport/cuda/nccl_broadcast.h"
#include "transport/cuda/nccl_fanout.h"

namespace batchcast::gpu {
namespace {

GpuProbe Built(int devices, std::string cause = "") {
  GpuProbe p;
  p.built_with_cuda = true;
  p.visible_devices = devices;
  p.cause = std::move(cause);
  return p;
}

TEST(GpuDecisionTest, ModesAgainstProbes) {
  struct Case {
    GpuMode mode;
    GpuProbe probe;
    bool ok, use_gpu;
    const char* text;  // in the reason (ok) or the error message
  };
  GpuProbe cpu_build;  // built without CUDA
  const Case cases[] = {
      {GpuMode::kOff, Built(4), true, false, "gpu=off"},
      {GpuMode::kOff, cpu_build, true, false, "gpu=off"},
      {GpuMode::kAuto, Built(1), true, true, "device path"},
      {GpuMode::kAuto, Built(8), true, true, "device path"},
      {GpuMode::kAuto, Built(0, "no CUDA device visible: no CUDA-capable device is detected"),
       true, false, "no CUDA-capable device is detected"},
      {GpuMode::kAuto, cpu_build, true, false, "built without CUDA"},
      {GpuMode::kOn, Built(2), true, true, "device path"},
      {GpuMode::kOn, Built(0, "no CUDA device visible: cudaGetDeviceCount returned 0"), false,
       false, "cudaGetDeviceCount returned 0"},
      {GpuMode::kOn, cpu_build, false, false, "built without CUDA"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(GpuModeName(c.mode)) + " / devices " +
                 std::to_string(c.probe.visible_devices));
    auto d = DecideGpuPath(c.mode, c.probe);
    ASSERT_EQ(d.ok(), c.ok) << (d.ok() ? d.value().reason : d.status().message());
    const std::string text = d.ok() ? d.value().reason : d.status().message();
    EXPECT_NE(text.find(c.text), std::string::npos) << text;
    if (d.ok()) {
      EXPECT_EQ(d.value().use_gpu, c.use_gpu);
    } else {
      EXPECT_EQ(d.status().code(), StatusCode::kFailedPrecondition);
      EXPECT_NE(text.find("gpu=on"), std::string::npos) << text;  // names the option
    }
  }
}

TEST(GpuDecisionTest, ThisMachineTakesTheHostPathUnderAuto) {
  GpuProbe p;
  p.built_with_cuda = cuda::BuiltWithCuda();
  auto n = cuda::VisibleDeviceCount();
  if (n.ok()) GTEST_SKIP() << "a CUDA device is visible here";
  p.cause = n.status().message();
  auto d = DecideGpuPath(GpuMode::kAuto, p);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d.value().use_gpu);
  EXPECT_FALSE(DecideGpuPath(GpuMode::kOn, p).ok());
}

TEST(GpuDecisionTest, OptionParsesAndDefaultsToAuto) {
  Options o;
  EXPECT_EQ(o.gpu, "auto");
  EXPECT_EQ(ParseGpuMode(o.gpu).value(), GpuMode::kAuto);
  ASSERT_TRUE(SetOption(&o, "gpu", "ON").ok());
  EXPECT_EQ(ParseGpuMode(o.gpu).value(), GpuMode::kOn);
  Status bad = SetOption(&o, "gpu", "maybe");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("auto|off|on"), std::string::npos) << bad.message();
  EXPECT_FALSE(ParseGpuMode("yes").ok());
  ASSERT_TRUE(SetOption(&o, "trainers_per_gpu", "2").ok());
  EXPECT_TRUE(ValidateOptions(o).ok());
  o.trainers_per_gpu = -1;
  EXPECT_FALSE(ValidateOptions(o).ok());
}

TEST(GpuForTrainerTest, SpreadAndKPerGpu) {
  // k = 0 spreads: 8 trainers over 4 GPUs -> 2 each; 5 over 4 -> ceil = 2 each.
  EXPECT_EQ(GpuForTrainer(0, 8, 0, 4).value(), 0);
  EXPECT_EQ(GpuForTrainer(3, 8, 0, 4).value(), 1);
  EXPECT_EQ(GpuForTrainer(7, 8, 0, 4).value(), 3);
  EXPECT_EQ(GpuForTrainer(4, 5, 0, 4).value(), 2);
  EXPECT_EQ(GpuForTrainer(2, 4, 0, 8).value(), 2);  // fewer trainers than GPUs: one each
  EXPECT_EQ(GpuForTrainer(3, 4, 4, 2).value(), 0);  // k = 4: all on GPU 0
  EXPECT_EQ(GpuForTrainer(5, 6, 1, 1).value(), 0);  // one visible GPU is always this rank's
  auto r = GpuForTrainer(4, 5, 1, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("needs GPU 4"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("trainers_per_gpu=1"), std::string::npos);
  EXPECT_EQ(GpuForTrainer(0, 1, 0, 0).status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(GpuForTrainer(3, 3, 0, 2).ok());  // index outside the node's trainers
}

TEST(NodeGpuPlanTest, AllHostMeansNoDevicePath) {
  NodeGpuPlan p = PlanNodeGpus({"", "", ""});
  EXPECT_FALSE(p.any());
  EXPECT_EQ(p.nccl_ranks(), 0);
  EXPECT_EQ(p.source, (std::vector<int>{-1, -1, -1}));
  EXPECT_EQ(p.NcclRank(0), -1);
}

TEST(NodeGpuPlanTest, OneGpuIsIpcOnly) {
  // leader only leads; 3 trainers share GPU A
  NodeGpuPlan p = PlanNodeGpus({"", "A", "A", "A"});
  EXPECT_EQ(p.stager_bus, "A");
  EXPECT_TRUE(p.relay_bus.empty());
  EXPECT_EQ(p.nccl_ranks(), 0);
  EXPECT_EQ(p.source, (std::vector<int>{-1, 0, 0, 0}));
}

TEST(NodeGpuPlanTest, OtherGpusGetOneRelayEach) {
  // 2 trainers per GPU over A, B, C; one host-only trainer in between
  NodeGpuPlan p = PlanNodeGpus({"", "A", "A", "B", "", "B", "C", "C"});
  EXPECT_EQ(p.stager_bus, "A");
  EXPECT_EQ(p.relay_bus, (std::vector<std::string>{"B", "C"}));
  EXPECT_EQ(p.relay_rank, (std::vector<int>{3, 6}));  // the lowest local rank on each
  EXPECT_EQ(p.source, (std::vector<int>{-1, 0, 0, 1, -1, 1, 2, 2}));
  EXPECT_EQ(p.nccl_ranks(), 3);
  EXPECT_EQ(p.NcclRank(0), 0);  // the leader is the root
  EXPECT_EQ(p.NcclRank(3), 1);
  EXPECT_EQ(p.NcclRank(6), 2);
  EXPECT_EQ(p.NcclRank(5), -1);  // maps relay 0's slots by IPC, not in the communicator
}

TEST(NodeGpuPlanTest, LeaderThatTrainsHoldsTheStagerGpu) {
  NodeGpuPlan p = PlanNodeGpus({"B", "A", "B"});
  EXPECT_EQ(p.stager_bus, "B");
  EXPECT_EQ(p.relay_bus, (std::vector<std::string>{"A"}));
  EXPECT_EQ(p.source, (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(p.NcclRank(1), 1);
}

TEST(GpuStagerOptionsTest, FinishingTakesMeanAndStdFromTheOptions) {
  Options o;
  GpuStagerConfig c;
  ASSERT_TRUE(StagerConfigFromOptions(o, &c).ok());
  EXPECT_FALSE(c.finish);
  EXPECT_FLOAT_EQ(c.mean[1], 0.456f);
  EXPECT_FLOAT_EQ(c.stddev[2], 0.225f);
  o.gpu_finish = true;
  o.mean = "0.5";  // one value for every channel
  o.std = "0.25,0.5,1";
  ASSERT_TRUE(StagerConfigFromOptions(o, &c).ok());
  EXPECT_TRUE(c.finish);
  EXPECT_FLOAT_EQ(c.mean[0], 0.5f);
  EXPECT_FLOAT_EQ(c.mean[2], 0.5f);
  EXPECT_FLOAT_EQ(c.stddev[1], 0.5f);
  o.std = "0.2,0,0.2";
  Status zero = StagerConfigFromOptions(o, &c);
  EXPECT_NE(zero.message().find("must be positive"), std::string::npos) << zero.message();
  o.std = "0.2,x,0.2";
  Status bad = StagerConfigFromOptions(o, &c);
  EXPECT_NE(bad.message().find("option 'std'"), std::string::npos) << bad.message();
}

TEST(NcclFanoutHeaderTest, RejectsWhatWouldCorruptARelay) {
  cuda::FanoutHeader h;
  h.slot = 2;
  h.num_ranges = 3;
  h.ranges[0] = {0, 4096};
  h.ranges[1] = {4096, 512};
  h.ranges[2] = {8192, 512};
  EXPECT_TRUE(cuda::ValidateFanoutHeader(h, 4, 16384).ok());
  cuda::FanoutHeader bad = h;
  bad.magic = 0;
  EXPECT_NE(cuda::ValidateFanoutHeader(bad, 4, 16384).message().find("out of step"),
            std::string::npos);
  bad = h;
  bad.slot = 4;
  EXPECT_FALSE(cuda::ValidateFanoutHeader(bad, 4, 16384).ok());
  bad = h;
  bad.ranges[2] = {16000, 512};
  EXPECT_NE(cuda::ValidateFanoutHeader(bad, 4, 16384).message().find("leaves"),
            std::string::npos);
  bad = h;
  bad.ranges[1] = {~0ULL - 10, 100};  // offset + bytes would wrap
  EXPECT_FALSE(cuda::ValidateFanoutHeader(bad, 4, 16384).ok());
  bad = h;
  bad.num_ranges = 4;
  EXPECT_FALSE(cuda::ValidateFanoutHeader(bad, 4, 16384).ok());
  cuda::FanoutHeader end;
  end.kind = cuda::kFanoutEnd;
  EXPECT_TRUE(cuda::ValidateFanoutHeader(end, 4, 16384).ok());
}

TEST(NcclStubTest, CpuOnlyBuildRefusesWithTheDocumentedMessage) {
  if (cuda::BuiltWithCuda()) GTEST_SKIP() << "built with CUDA: the stub is not linked";
  auto id = cuda::NcclBroadcast::NewUniqueId();
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(id.status().message(),
            "no CUDA device visible: batchcast was built without CUDA (BATCHCAST_CUDA=OFF or no "
            "nvcc)");
  auto comm = cuda::NcclBroadcast::Create(std::string(cuda::kNcclIdBytes, '\0'), 1, 0, 0);
  EXPECT_EQ(comm.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(cuda::NcclFanout::CreateRoot(nullptr, 0).status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace batchcast::gpu
