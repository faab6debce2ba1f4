// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// batchcast-run's launch-environment detection and placement, on environment maps (no
// processes): Slurm / Open MPI / torchrun-style variables, host lists, rank renumbering
// without the leaders, GPU pinning, and every impossible layout.
#include <gtest/gtest.h>

#include "run/gpu.h"
#include "run/launch_env.h"
#include "run/placement.h"

namespace batchcast::run {
namespace {

EnvMap SlurmTask(int procid, int nodeid, int localid, const std::string& tpn,
                 const std::string& nodes, int ntasks) {
  return {{"SLURM_PROCID", std::to_string(procid)},
          {"SLURM_NODEID", std::to_string(nodeid)},
          {"SLURM_LOCALID", std::to_string(localid)},
          {"SLURM_STEP_TASKS_PER_NODE", tpn},
          {"SLURM_STEP_NODELIST", nodes},
          {"SLURM_STEP_NUM_TASKS", std::to_string(ntasks)},
          {"SLURM_JOB_ID", "4242"},
          {"SLURM_STEP_ID", "3"}};
}

TaskPlan MustPlan(const EnvMap& e, const RunConfig& c = {}, const std::vector<GpuDevice>& g = {}) {
  auto env = DetectLaunchEnv(e);
  EXPECT_TRUE(env.ok()) << env.status().ToString();
  auto p = PlanTask(env.value(), c, g, 1000);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? p.value() : TaskPlan{};
}

Status PlanError(const EnvMap& e, const RunConfig& c = {}, const std::vector<GpuDevice>& g = {}) {
  auto env = DetectLaunchEnv(e);
  if (!env.ok()) return env.status();
  auto p = PlanTask(env.value(), c, g, 1000);
  return p.ok() ? Status::Ok() : p.status();
}

std::vector<GpuDevice> Gpus(int n) {
  std::vector<GpuDevice> g(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) g[static_cast<size_t>(i)] = {i, "GPU-" + std::to_string(i), "X", {}};
  return g;
}

TEST(LaunchEnvTest, ExpandsSlurmHostLists) {
  auto h = ExpandHostList("n[1-3,7],gpu01,a[08-10]");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h.value(),
            (std::vector<std::string>{"n1", "n2", "n3", "n7", "gpu01", "a08", "a09", "a10"}));
  EXPECT_FALSE(ExpandHostList("n[1-3").ok());
  EXPECT_FALSE(ExpandHostList("n[3-1]").ok());
}

TEST(LaunchEnvTest, ExpandsSlurmTasksPerNode) {
  auto t = ExpandTasksPerNode("3(x2),1");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t.value(), (std::vector<int>{3, 3, 1}));
  EXPECT_FALSE(ExpandTasksPerNode("3x").ok());
  EXPECT_FALSE(ExpandTasksPerNode("").ok());
}

TEST(LaunchEnvTest, DetectsSlurmStep) {
  auto e = DetectLaunchEnv(SlurmTask(4, 1, 1, "3(x2)", "n[1-2]", 6));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e.value().launcher, Launcher::kSlurm);
  EXPECT_EQ(e.value().num_nodes(), 2);
  EXPECT_EQ(e.value().node0_host, "n1");
  EXPECT_EQ(e.value().job_id, "4242.3");
}

TEST(LaunchEnvTest, BatchScriptWithoutStepIsAnError) {
  Status st = DetectLaunchEnv({{"SLURM_JOB_ID", "7"}, {"SLURM_PROCID", "0"}}).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("srun"), std::string::npos) << st.message();
}

TEST(LaunchEnvTest, OpenMpiNeedsBlocksOfEqualSize) {
  EnvMap e = {{"OMPI_COMM_WORLD_RANK", "3"},       {"OMPI_COMM_WORLD_SIZE", "6"},
              {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
              {"OMPI_MCA_orte_num_nodes", "2"},    {"OMPI_MCA_ess_base_jobid", "99"}};
  auto env = DetectLaunchEnv(e);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env.value().node_id, 1);
  e["OMPI_COMM_WORLD_LOCAL_RANK"] = "1";  // cyclic placement: rank 3 is not local 0
  Status st = DetectLaunchEnv(e).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--map-by slot"), std::string::npos) << st.message();
}

TEST(PlacementTest, RenumbersTrainersWithoutLeaders) {
  // 2 nodes x 3 tasks: leaders are local 0; trainers 0,1 on n1 and 2,3 on n2.
  int expect_rank[6] = {-1, 0, 1, -1, 2, 3};
  for (int procid = 0; procid < 6; ++procid) {
    TaskPlan p = MustPlan(SlurmTask(procid, procid / 3, procid % 3, "3(x2)", "n[1-2]", 6));
    EXPECT_EQ(p.trainer_rank, expect_rank[procid]) << "task " << procid;
    EXPECT_EQ(p.trainer_world_size, 4);
    EXPECT_EQ(p.trainers_on_node, 2);
    EXPECT_EQ(p.role, procid % 3 == 0 ? Role::kLeader : Role::kTrainer);
    EXPECT_EQ(p.master_addr, "n1");
    EXPECT_EQ(p.socket_name, "batchcast-run-1000-4242.3-n" + std::to_string(procid / 3));
    EXPECT_EQ(p.master_port, DeriveMasterPort("4242.3"));
  }
  EXPECT_GE(DeriveMasterPort("4242.3"), kMasterPortBase);
  EXPECT_LT(DeriveMasterPort("4242.3"), kMasterPortBase + kMasterPortRange);
}

TEST(PlacementTest, UnevenNodesUnderSlurm) {
  // 4 tasks on n1, 2 on n2 (Slurm reports any layout): trainers 3 + 1.
  TaskPlan p = MustPlan(SlurmTask(5, 1, 1, "4,2", "n[1-2]", 6));
  EXPECT_EQ(p.trainer_rank, 3);
  EXPECT_EQ(p.trainer_world_size, 4);
  EXPECT_EQ(p.trainers_on_node, 1);
}

TEST(PlacementTest, LeaderTrainsKeepsEveryTask) {
  RunConfig c;
  c.leader_trains = true;
  TaskPlan p = MustPlan(SlurmTask(3, 1, 0, "3(x2)", "n[1-2]", 6), c);
  EXPECT_EQ(p.role, Role::kLeaderTrainer);
  EXPECT_EQ(p.trainer_rank, 3);
  EXPECT_EQ(p.trainer_world_size, 6);
}

TEST(PlacementTest, NodeWithOnlyALeaderIsAnError) {
  Status st = PlanError(SlurmTask(0, 0, 0, "3,1", "n[1-2]", 4));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("node 1 (n2) has 1 task(s), only its leader"), std::string::npos)
      << st.message();
}

TEST(PlacementTest, PinsTrainersRoundRobinOverGpus) {
  RunConfig c;
  c.trainers_per_gpu = 2;
  std::vector<std::string> got;
  for (int local = 1; local < 5; ++local)
    got.push_back(
        MustPlan(SlurmTask(local, 0, local, "5", "n1", 5), c, Gpus(2)).cuda_visible_devices);
  EXPECT_EQ(got, (std::vector<std::string>{"GPU-0", "GPU-1", "GPU-0", "GPU-1"}));
  EXPECT_EQ(MustPlan(SlurmTask(0, 0, 0, "5", "n1", 5), c, Gpus(2)).cuda_visible_devices, "");
}

TEST(PlacementTest, MoreTrainersThanSlotsIsAnError) {
  RunConfig c;
  c.trainers_per_gpu = 2;
  Status st = PlanError(SlurmTask(0, 0, 0, "6", "n1", 6), c, Gpus(2));
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("5 trainers but only 4 slots"), std::string::npos) << st.message();
}

TEST(PlacementTest, GpuRequestsWithoutGpusAreErrors) {
  EnvMap e = SlurmTask(1, 0, 1, "3", "n1", 3);
  RunConfig c;
  c.gpus = "0";
  EXPECT_NE(PlanError(e, c).message().find("has no GPU"), std::string::npos);
  c = RunConfig();
  c.mps = true;
  EXPECT_NE(PlanError(e, c).message().find("--mps asked for"), std::string::npos);
  c = RunConfig();
  c.trainers_per_gpu = 2;
  EXPECT_NE(PlanError(e, c).message().find("--trainers-per-gpu 2 asked for"), std::string::npos);
  EXPECT_TRUE(PlanError(e, RunConfig()).ok());  // CPU trainers are fine
}

TEST(PlacementTest, SelectsMigInstancesByUuid) {
  auto gpus = ParseNvidiaSmiList(
      "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)\n"
      "  MIG 3g.20gb     Device  0: (UUID: MIG-1111)\n"
      "  MIG 3g.20gb     Device  1: (UUID: MIG-2222)\n"
      "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-bbbb)\n");
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(gpus[0].mig_uuids, (std::vector<std::string>{"MIG-1111", "MIG-2222"}));
  RunConfig c;
  c.gpus = "MIG-1111,MIG-2222";
  EXPECT_EQ(MustPlan(SlurmTask(2, 0, 2, "3", "n1", 3), c, gpus).cuda_visible_devices, "MIG-2222");
  c.gpus = "MIG-9999";
  Status st = PlanError(SlurmTask(2, 0, 2, "3", "n1", 3), c, gpus);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("'MIG-9999' is not on host n1"), std::string::npos) << st.message();
}

TEST(PlacementTest, KeepsWithinSlurmGpuBinding) {
  RunConfig c;
  c.visible_devices = "2,3";  // e.g. Slurm's --gpus binding
  EXPECT_EQ(MustPlan(SlurmTask(2, 0, 2, "3", "n1", 3), c, Gpus(4)).cuda_visible_devices, "3");
}

TEST(PlacementTest, TorchrunStyleAcrossNodesUsesMasterAddr) {
  EnvMap e = {{"RANK", "5"},           {"WORLD_SIZE", "6"},
              {"LOCAL_RANK", "2"},     {"LOCAL_WORLD_SIZE", "3"},
              {"MASTER_ADDR", "head"}, {"MASTER_PORT", "29400"}};
  TaskPlan p = MustPlan(e);
  EXPECT_EQ(p.trainer_rank, 3);
  EXPECT_EQ(p.master_addr, "head");
  EXPECT_NE(p.master_port, 29400);  // the outer launcher's port stays its own
}

TEST(PlacementTest, MpirunAcrossNodesNeedsMasterAddr) {
  EnvMap e = {{"OMPI_COMM_WORLD_RANK", "1"},
              {"OMPI_COMM_WORLD_SIZE", "4"},
              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
              {"OMPI_MCA_ess_base_jobid", "99"}};
  Status st = PlanError(e);
  EXPECT_NE(st.message().find("--master-addr"), std::string::npos) << st.message();
  RunConfig c;
  c.master_addr = "head";
  EXPECT_EQ(MustPlan(e, c).master_addr, "head");
}

}  // namespace
}  // namespace batchcast::run
