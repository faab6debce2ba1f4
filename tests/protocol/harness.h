// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The protocol test's driver engine: runs one scenario of real processes (a leader, the
// consumers, optionally an impostor), answers their sync points, injects SIGSTOP/SIGCONT/
// SIGKILL, and checks what every consumer reported against the reference model.
// Used by protocol_random (random schedules from a seed) and protocol_cases_test (one
// hand-written scenario per numbered case of issue 14).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/protocol/producers.h"

namespace batchcast::protocol_test {

// How a consumer's run must end for the model.
enum class Expect {
  kComplete,       // all its epochs, each sample exactly once per epoch (+ reported repeats)
  kEarlyEnd,       // it quits, detaches or is destroyed early: completed epochs exact
  kEvicted,        // stopped past the heartbeat at "sync cstop": the next Next() fails
  kLeaderLost,     // the leader is stopped: completes, or fails naming the leader
  kKilled,         // SIGKILLed at "sync kill": only its reported content is checked
  kWriteFaults,    // writes into a batch ("W"): must die with a message naming the batch
  kAttachRefused,  // attaches to an impostor: refused, naming the impostor's uid and pid
  kAttachError,    // Attach must fail with a clear error (e.g. more epochs than the stream)
  kCompleteOrError,  // complete, or a clear error; never a silent end short of its epochs
};
const char* ExpectName(Expect e);

struct ConsumerPlan {
  std::string name;
  int b = 4, depth = 2, epochs = 1, hold = 1;
  bool offset = false, shuffle = false;
  uint64_t seed = 1;
  std::string script;              // protocol_consumer ops
  std::string tail = "drain";      // drain | keep | stop
  Expect expect = Expect::kComplete;
  int late_after = -1;             // started when consumer late_after says "sync late"
                                   // (-2: started by the scenario's own hooks)
  int64_t hb_ms = 0;               // 0: the leader's
  int view = 0;                    // the size of its view (0: the leader's; needs views_max)
  std::string resize;              // or its sizes by epoch, "3@0:5@2" (view(resize=...))
};

struct Scenario {
  ProducerSpec producer;
  std::vector<ConsumerPlan> consumers;
  bool impostor = false;           // an impostor listens on the address first (root only)
  int64_t deadline_ms = 45000;     // the whole run; on expiry: dump and fail
  // Custom sync points (regression cases): called on "sync NAME" from consumer i; return
  // true when handled (the handler answers with Go() when it is time).
  std::function<bool(class Engine&, int i, const std::string& name)> on_sync;
  // Called every loop iteration (~20 ms) for custom conditions.
  std::function<void(class Engine&)> on_tick;
};

struct ConsumerRun {
  pid_t pid = -1;
  int in_fd = -1, out_fd = -1;
  std::string partial;
  std::vector<std::string> lines;
  std::string parked;              // sync name it waits at ("" = running)
  bool started = false, exited = false;
  int wait_status = 0;
  std::string err_path, cmd;
  int64_t recv = 0;
  // Stopped past the heartbeat, but the leader finished the stream (already published to
  // it) and exited first: it was never evicted, so a clean end is as right as an error.
  bool stop_outlived_leader = false;
};

class Engine {
 public:
  Engine(Scenario s, std::string bin_dir, std::string tag);
  ~Engine();
  // Runs the scenario; returns the model violations (empty: passed).
  std::vector<std::string> Run();
  // A human-readable dump of every process's state and last lines.
  std::string Dump() const;

  // For sync handlers and tick hooks.
  void Go(int i);                               // answers consumer i's sync
  void StartConsumer(int i);                    // starts consumer i (late joiners)
  void Signal(int i, int sig);                  // to consumer i
  void SignalLeader(int sig);
  bool Evicted(int i);                          // leader no longer addresses consumer i
  Result<LeaderView> Query();
  const ConsumerRun& consumer(int i) const { return runs_[size_t(i)]; }
  int consumers() const { return static_cast<int>(runs_.size()); }
  pid_t leader_pid() const { return leader_pid_; }
  bool leader_exited() const { return leader_exited_; }  // reaped (Tick runs before on_tick)
  void Fail(const std::string& why) { violations_.push_back(why); }
  int64_t ElapsedMs() const;
  // Others have moved on: every consumer but i exited, is parked, or received `more`
  // batches since `since` (a snapshot of recv counts).
  bool OthersProgressed(int i, const std::vector<int64_t>& since, int64_t more) const;
  std::vector<int64_t> RecvCounts() const;

 private:
  bool StartLeader(bool expect_refused, std::string* out_line);
  bool StartImpostorPhase();
  void Pump(int timeout_ms);
  void OnLine(int i, const std::string& line);
  void OnSync(int i, const std::string& name);
  void Tick();
  // Whether every consumer started with the leader has attached or failed to attach.
  bool InitialSettled() const;
  // Starts the late joiners that trigger i's "late" sync releases.
  void StartLateJoiners(int i);
  void ReapExits();
  bool AllDone() const;
  void Finish();
  void Check();
  void CheckConsumer(int i);

  Scenario s_;
  std::string bin_, tag_, dir_;
  std::vector<ConsumerRun> runs_;
  pid_t leader_pid_ = -1, impostor_pid_ = -1;
  pid_t leader_proc_pid_ = -1;  // the leader process (differs from leader_pid_ under mpirun)
  int leader_out_ = -1;
  std::string leader_partial_;
  std::vector<std::string> leader_lines_;
  bool leader_exited_ = false, leader_stopped_ = false, leader_termed_ = false;
  int leader_status_ = 0;
  int64_t start_ns_ = 0;
  // The chaos procedures in flight.
  int cstop_ = -1;                       // consumer being stopped past the heartbeat
  int cstop_phase_ = 0;
  std::vector<int64_t> cstop_since_;
  int lstop_by_ = -1;                    // consumer at whose sync the leader was stopped
  std::map<int, std::set<int>> late_waiting_;  // trigger -> late joiners not yet attached
  std::set<int> late_parked_;  // triggers at "late" while an initial consumer is not attached
  std::vector<std::string> violations_;
  std::string impostor_info_;
};

// Directory of the test programs (protocol_leader, protocol_consumer, protocol_impostor).
std::string ProgramDir(const char* argv0);

}  // namespace batchcast::protocol_test
