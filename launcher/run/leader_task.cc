// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "run/leader_task.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>

#include "core/log.h"
#include "producer/batch_source.h"
#include "gpu/gpu_runtime.h"
#include "gpu/gpu_stager.h"
#include "node/leader.h"
#include "node/task_telemetry.h"
#include "run/mps.h"

namespace batchcast::run {
namespace {

std::string Upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string TaskName(const TaskContext& t) {
  return fmt::format("task {} of {} on host {} (node {})", t.env.rank, t.env.world_size,
                     t.env.hostname, t.plan.node_id);
}

// What ended the stream early, set by the loss handler or a signal; and, with
// --on-trainer-loss continue, the trainers lost on the way.
struct LeaderState {
  std::mutex mu;
  std::string failure;
  std::vector<std::string> lost;
  node::Leader* leader = nullptr;
  void Fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (failure.empty()) failure = why;
    if (leader != nullptr) leader->Abort(why);
  }
  std::string Failure() {
    std::lock_guard<std::mutex> lock(mu);
    return failure;
  }
  // A trainer lost: fails the node, or (continue) is reported and counted.
  void Lose(const TaskContext& t, const std::string& who_and_how) {
    if (!t.continue_on_trainer_loss) {
      Fail(who_and_how + "; failing the job (--on-trainer-loss fail)");
      return;
    }
    std::lock_guard<std::mutex> lock(mu);
    lost.push_back(who_and_how);
    std::fprintf(stderr,
                 "batchcast-run: leader of node %d: %s; detached, the other trainers go on "
                 "(--on-trainer-loss continue)\n",
                 t.plan.node_id, who_and_how.c_str());
  }
  std::vector<std::string> Lost() {
    std::lock_guard<std::mutex> lock(mu);
    return lost;
  }
};

Result<std::unique_ptr<node::Leader>> CreateLeader(const TaskContext& t,
                                                   telemetry::Collector* collector) {
  node::LeaderConfig cfg;
  cfg.collector = collector;
  cfg.options = t.options;
  // mode=shard: the trainers cut their shards from this node's stream (docs/data-plane.md);
  // the trainers' world size places a resumed stream's first producer batch exactly.
  if (t.options.mode == "shard") cfg.options.world_size = t.plan.trainer_world_size;
  cfg.expected_consumers = t.plan.trainers_on_node;
  cfg.max_consumer_batch =
      static_cast<uint32_t>(t.max_batch_size > 0 ? t.max_batch_size : t.options.batch_size);
  cfg.socket_name = t.plan.socket_name;
  cfg.batch_limit_advice =
      "start batchcast-run with --max-batch-size set to the largest trainer batch_size "
      "(default: --batch-size), or ask for a smaller batch_size";
  cfg.job = t.plan.job_id;
  cfg.rank = t.env.rank;
  cfg.join_timeout_ms = t.join_timeout_ms;
  cfg.end_when_empty = true;
  BC_ASSIGN_OR_RETURN(auto source, producer::MakePipelineSource(t.options));
  return node::Leader::Create(cfg, std::move(source));
}

// Runs the trainer child of a leader that also trains; returns its exit code.
int RunOwnTrainer(const TaskContext& t, LeaderState* state) {
  auto pid = SpawnChild(t.command, TrainerEnvironment(t));
  if (!pid.ok()) {
    std::fprintf(stderr, "batchcast-run: %s: %s\n", TaskName(t).c_str(),
                 pid.status().message().c_str());
    state->Fail("the leader's own trainer could not start");
    return 127;
  }
  std::string how;
  int code = WaitChild(pid.value(), &how);
  if (code != 0) {
    std::fprintf(stderr, "batchcast-run: trainer rank %d (%s) %s: %s\n", t.plan.trainer_rank,
                 TaskName(t).c_str(), how.c_str(), JoinCommand(t.command).c_str());
    // It may have died before attaching: do not wait for it until the join timeout (with
    // continue, the leader waits for it as for any trainer that never attached).
    state->Lose(t, fmt::format("the leader's own trainer (rank {}) {}", t.plan.trainer_rank, how));
    if (t.continue_on_trainer_loss) return 0;
  }
  return code;
}

}  // namespace

EnvList TrainerEnvironment(const TaskContext& t) {
  const TaskPlan& p = t.plan;
  EnvList env = {
      {"RANK", std::to_string(p.trainer_rank)},
      {"LOCAL_RANK", std::to_string(p.trainer_local_rank)},
      {"WORLD_SIZE", std::to_string(p.trainer_world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(p.trainers_on_node)},
      {"GROUP_RANK", std::to_string(p.node_id)},
      {"NODE_RANK", std::to_string(p.node_id)},
      {"ROLE_RANK", std::to_string(p.trainer_rank)},
      {"ROLE_WORLD_SIZE", std::to_string(p.trainer_world_size)},
      {"MASTER_ADDR", p.master_addr},
      {"MASTER_PORT", std::to_string(p.master_port)},
      {"BATCHCAST_ADDRESS", p.socket_name},
  };
  for (const auto& [key, source] : t.options.sources) {
    if (source == "default") continue;
    env.emplace_back("BATCHCAST_" + Upper(key), GetOption(t.options, key));
  }
  if (!p.cuda_visible_devices.empty())
    env.emplace_back("CUDA_VISIBLE_DEVICES", p.cuda_visible_devices);
  if (!p.mps_pipe_dir.empty()) {
    env.emplace_back("CUDA_MPS_PIPE_DIRECTORY", p.mps_pipe_dir);
    env.emplace_back("CUDA_MPS_LOG_DIRECTORY", p.mps_pipe_dir + "-log");
  }
  return env;
}

bool AbstractSocketListens(const std::string& name) {
  std::ifstream in("/proc/net/unix");
  std::string line, want = "@" + name;
  while (std::getline(in, line)) {
    if (line.size() < want.size() ||
        line.compare(line.size() - want.size(), want.size(), want) != 0)
      continue;
    if (line.size() > want.size() && line[line.size() - want.size() - 1] != ' ') continue;
    // Columns: Num RefCount Protocol Flags Type St ...; Flags 00010000 marks a listener.
    if (line.find(" 00010000 ") != std::string::npos) return true;
  }
  return false;
}

int RunLeaderTask(const TaskContext& t) {
  auto state = std::make_shared<LeaderState>();
  // First, so that a signal while the dataset opens or MPS starts is handled too.
  StartSignalForwarding([state](int sig) {
    state->Fail(fmt::format("batchcast-run received signal {} ({})", sig, strsignal(sig)));
  });
  std::unique_ptr<MpsDaemon> mps;
  if (!t.plan.mps_pipe_dir.empty()) {
    mps = std::make_unique<MpsDaemon>(t.mps_control, t.plan.mps_pipe_dir);
    Status st = mps->Start();
    if (!st.ok()) {
      std::fprintf(stderr, "batchcast-run: leader %s: %s\n", TaskName(t).c_str(),
                   st.message().c_str());
      return 1;
    }
  }
  // The `telemetry` option: this leader task's own files (run.node<N>-leader.h5, ...);
  // each trainer writes its own (AttachFromEnvironment: run.rank<R>.h5).
  auto telemetry = node::TaskTelemetry::Start(
      t.options, telemetry::ProcessKind::kLeader, t.env.rank, t.env.local_rank,
      telemetry::Role::kLeader,
      fmt::format("node{}-leader", t.plan.node_id));
  if (!telemetry.ok()) {
    std::fprintf(stderr, "batchcast-run: leader %s: %s\n", TaskName(t).c_str(),
                 telemetry.status().message().c_str());
    return 1;
  }
  auto leader = CreateLeader(t, telemetry.value() ? telemetry.value()->collector() : nullptr);
  if (!leader.ok()) {
    std::fprintf(stderr, "batchcast-run: leader %s could not start: %s\n", TaskName(t).c_str(),
                 leader.status().message().c_str());
    return 1;
  }
  node::Leader* l = leader.value().get();
  {
    std::lock_guard<std::mutex> lock(state->mu);
    state->leader = l;
    if (!state->failure.empty()) l->Abort(state->failure);  // a signal came while starting
  }
  // A trainer that dies or stops heart-beating cannot be replaced here: it fails the node,
  // or, with --on-trainer-loss continue, is detached (the ring reaps it), reported, counted.
  l->ring().SetLossHandler([state, &t](const shm::MemberInfo& m, shm::LossKind kind) {
    if (kind == shm::LossKind::kDetached) return;
    state->Lose(t, fmt::format("trainer {} {}", m.Describe(),
                               kind == shm::LossKind::kHeartbeat ? "stopped heart-beating"
                                                                 : "died (its connection closed)"));
  });
  // The GPU data plane (option gpu, docs/gpu.md): with trainers placed on GPUs, stage the
  // batches on this task's GPU 0; trainers map them with AttachGpuFromEnvironment.
  std::unique_ptr<gpu::GpuStager> stager;
  if (!t.plan.node_gpus.empty()) {
    std::string note;
    auto s = gpu::StageOnGpu(l->staging_target(), t.options, nullptr, &note);
    if (!s.ok()) {
      std::fprintf(stderr, "batchcast-run: leader %s: %s\n", TaskName(t).c_str(),
                   s.status().message().c_str());
      return 1;
    }
    stager = std::move(s).value();
    BC_LOG(Info, Cuda, "batchcast-run: leader of node {}: {}", t.plan.node_id, note);
  }
  BC_LOG(Info, Init, "batchcast-run: leader of node {} on @{}: waiting for {} trainer(s)",
         t.plan.node_id, t.plan.socket_name, t.plan.trainers_on_node);
  Status run_status;
  std::thread producer([&] { run_status = l->Run(); });
  int own = t.plan.trains() ? RunOwnTrainer(t, state.get()) : 0;
  producer.join();
  if (stager) {
    Status st = stager->Finish();
    if (run_status.ok()) run_status = st;
  }
  if (run_status.ok() && state->Failure().empty())
    run_status = l->WaitUntilEmpty(24LL * 3600 * 1000);
  node::LeaderStats stats = l->stats();
  std::string failure = state->Failure();
  Status telemetry_written;
  if (telemetry.value()) {  // a file that cannot be written fails the task (exit status 1)
    telemetry_written = telemetry.value()->Finish();
    if (!telemetry_written.ok())
      std::fprintf(stderr, "batchcast-run: leader %s: telemetry: %s\n", TaskName(t).c_str(),
                   telemetry_written.message().c_str());
  }
  if (mps) {
    Status st = mps->Stop();
    if (!st.ok()) std::fprintf(stderr, "batchcast-run: %s\n", st.message().c_str());
  }
  if (!failure.empty() || !run_status.ok()) {
    std::fprintf(stderr, "batchcast-run: leader of node %d (%s) failed: %s\n", t.plan.node_id,
                 TaskName(t).c_str(),
                 failure.empty() ? run_status.message().c_str() : failure.c_str());
    return own != 0 ? own : 1;
  }
  const std::vector<std::string> lost = state->Lost();
  std::string lost_text;
  for (const auto& l : lost) lost_text += (lost_text.empty() ? ": " : "; ") + l;
  std::printf(
      "batchcast-run: leader of node %d (%s) done: %lld producer batches, %lld samples "
      "to %d trainer(s)%s\n",
      t.plan.node_id, TaskName(t).c_str(), static_cast<long long>(stats.producer_batches),
      static_cast<long long>(stats.samples_produced), t.plan.trainers_on_node,
      lost.empty() ? ""
                   : fmt::format(", {} of them lost{}", lost.size(), lost_text).c_str());
  std::fflush(stdout);
  return own != 0 ? own : (telemetry_written.ok() ? 0 : 1);
}

int RunTrainerTask(const TaskContext& t) {
  StartSignalForwarding(nullptr);
  // The leader task starts at the same time; its socket appears once it is ready.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(t.join_timeout_ms);
  auto pause = std::chrono::milliseconds(2);
  while (!AbstractSocketListens(t.plan.socket_name)) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr,
                   "batchcast-run: trainer rank %d (%s): the node leader did not listen on @%s "
                   "within %lld ms; see the leader task's error (local rank 0 of this node)\n",
                   t.plan.trainer_rank, TaskName(t).c_str(), t.plan.socket_name.c_str(),
                   static_cast<long long>(t.join_timeout_ms));
      return 1;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
  auto pid = SpawnChild(t.command, TrainerEnvironment(t));
  if (!pid.ok()) {
    std::fprintf(stderr, "batchcast-run: trainer rank %d (%s): %s\n", t.plan.trainer_rank,
                 TaskName(t).c_str(), pid.status().message().c_str());
    return 127;
  }
  std::string how;
  int code = WaitChild(pid.value(), &how);
  if (code != 0)
    std::fprintf(stderr, "batchcast-run: trainer rank %d (%s) %s: %s%s\n", t.plan.trainer_rank,
                 TaskName(t).c_str(), how.c_str(), JoinCommand(t.command).c_str(),
                 t.continue_on_trainer_loss
                     ? "; a lost trial, reported by the node's leader: this task exits 0 so that "
                       "the launcher lets the other trials finish (--on-trainer-loss continue)"
                     : "");
  return t.continue_on_trainer_loss ? 0 : code;
}

}  // namespace batchcast::run
