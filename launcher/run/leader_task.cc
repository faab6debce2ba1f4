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
#include "core/option_scope.h"
#include "node/front_door.h"
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

// What ended the stream early (a signal, a lost trainer, the leader's own trainer), before
// or after the Producer exists.
struct LeaderState {
  std::mutex mu;
  std::string failure;
  producer::Producer* producer = nullptr;
  void Fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (failure.empty()) failure = why;
    if (producer != nullptr) producer->Abort(why);
  }
  // A trainer lost (`who_and_how`): fails the node (--on-trainer-loss fail), or is reported
  // here and counted by the Producer, which detached it (continue).
  void Lose(const TaskContext& t, const std::string& who_and_how) {
    if (!t.continue_on_trainer_loss) {
      Fail(who_and_how + "; failing the job (--on-trainer-loss fail)");
      return;
    }
    std::fprintf(stderr,
                 "batchcast-run: leader of node %d: %s; detached, the other trainers go on "
                 "(--on-trainer-loss continue)\n",
                 t.plan.node_id, who_and_how.c_str());
  }
  void Set(producer::Producer* p) {
    std::lock_guard<std::mutex> lock(mu);
    producer = p;
    if (!failure.empty()) p->Abort(failure);  // a signal came while starting
  }
};

// The node's Producer: the trainers are its consumers; one that dies or stops heart-beating
// cannot be replaced here: it fails the node, or, with --on-trainer-loss continue, is
// detached, reported and counted. The task ends once every trainer left.
Result<std::unique_ptr<producer::Producer>> CreateLeader(const TaskContext& t,
                                                         std::shared_ptr<LeaderState> state,
                                                         std::string* staged) {
  producer::ProducerConfig cfg;
  cfg.front_door = FrontDoor::kLauncher;
  cfg.options = t.options;
  // mode=shard: the trainers cut their shards from this node's stream (docs/data-plane.md);
  // the trainers' world size places a resumed stream's first producer batch exactly.
  if (t.options.mode == "shard") cfg.options.world_size = t.plan.trainer_world_size;
  cfg.expected_consumers = t.plan.trainers_on_node;
  cfg.max_consumer_batch =
      static_cast<uint32_t>(t.max_batch_size > 0 ? t.max_batch_size : t.options.batch_size);
  cfg.socket_name = t.plan.socket_name;
  cfg.job = t.plan.job_id;
  cfg.rank = t.env.rank;
  cfg.local_rank = t.env.local_rank;
  cfg.join_timeout_ms = t.join_timeout_ms;
  cfg.loss = producer::LossPolicy::kCount;  // the policy is the task's: LeaderState::Lose
  cfg.on_loss = [state, &t](const std::string& what) { state->Lose(t, "trainer " + what); };
  cfg.wait_until_empty = true;
  // The `telemetry` option: this leader task's own files (run.node<N>-leader.h5, ...); each
  // trainer writes its own (AttachFromEnvironment: run.rank<R>.h5).
  cfg.telemetry_tag = fmt::format("node{}-leader", t.plan.node_id);
  // The GPU data plane (option gpu, docs/gpu.md): only with trainers placed on GPUs.
  if (t.plan.node_gpus.empty() && cfg.options.gpu != "on") cfg.options.gpu = "off";
  return node::CreateNodeProducer(cfg, staged);
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
  std::string staged;
  auto leader = CreateLeader(t, state, &staged);
  if (!leader.ok()) {
    std::fprintf(stderr, "batchcast-run: leader %s could not start: %s\n", TaskName(t).c_str(),
                 leader.status().message().c_str());
    return leader.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  producer::Producer& l = **leader;
  state->Set(&l);
  if (!staged.empty())
    BC_LOG(Info, Cuda, "batchcast-run: leader of node {}: {}", t.plan.node_id, staged);
  BC_LOG(Info, Init, "batchcast-run: leader of node {} on @{}: waiting for {} trainer(s)",
         t.plan.node_id, t.plan.socket_name, t.plan.trainers_on_node);
  l.Start();
  int own = t.plan.trains() ? RunOwnTrainer(t, state.get()) : 0;
  Status run_status = l.Wait();
  const producer::ProducerStats stats = l.stats();
  if (mps) {
    Status st = mps->Stop();
    if (!st.ok()) std::fprintf(stderr, "batchcast-run: %s\n", st.message().c_str());
  }
  std::string failure;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    failure = state->failure;
  }
  if (!failure.empty() || !run_status.ok()) {
    std::fprintf(stderr, "batchcast-run: leader of node %d (%s) failed: %s\n", t.plan.node_id,
                 TaskName(t).c_str(),
                 failure.empty() ? run_status.message().c_str() : failure.c_str());
    return own != 0 ? own : 1;
  }
  const std::vector<std::string> lost = l.lost_consumers();
  std::string lost_text;
  for (const auto& who : lost) lost_text += (lost_text.empty() ? ": trainer " : "; trainer ") + who;
  std::printf(
      "batchcast-run: leader of node %d (%s) done: %lld producer batches, %lld samples "
      "to %d trainer(s)%s\n",
      t.plan.node_id, TaskName(t).c_str(), static_cast<long long>(stats.producer_batches),
      static_cast<long long>(stats.samples_produced), t.plan.trainers_on_node,
      lost.empty() ? ""
                   : fmt::format(", {} of them lost{}", lost.size(), lost_text).c_str());
  std::fflush(stdout);
  return own;
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
