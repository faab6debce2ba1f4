// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The trainer child process: started with extra environment variables, waited for, its exit
// described in words. SIGTERM/SIGINT/SIGHUP sent to batchcast-run reach the child (srun and
// mpirun signal the task they started, which is batchcast-run, not the trainer).
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "batchcast/status.h"

namespace batchcast::run {

using EnvList = std::vector<std::pair<std::string, std::string>>;

// Blocks the forwarded signals in this thread (call first, before any thread starts) and
// starts a thread that waits for them: each one is sent to the current child, then
// `on_signal(sig)` runs (it may stop the leader). The process then exits with 128+sig: at
// once when there is neither a child nor `on_signal`, else after a 10 s grace period (if the
// child and the leader have not ended it before).
void StartSignalForwarding(std::function<void(int)> on_signal);

// fork + execvp(argv[0]) with `env` added to (and overriding) this process's environment.
Result<pid_t> SpawnChild(const std::vector<std::string>& argv, const EnvList& env);

// Waits for the child. Returns its exit code (128+N when killed by signal N) and describes
// the way it ended in `how` ("exited with status 3", "was killed by signal 9 (Killed)").
int WaitChild(pid_t pid, std::string* how);

// Joins argv for messages: `python3 train.py --lr 0.1`.
std::string JoinCommand(const std::vector<std::string>& argv);

}  // namespace batchcast::run
