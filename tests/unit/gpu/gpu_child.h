// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Consumer processes for the GPU tests. CUDA state does not survive fork(), and the
// test process has touched CUDA before it starts consumers, so each consumer is this
// binary re-executed (posix_spawn) running the disabled test GpuChild.DISABLED_Consumer
// with its job in the environment; it writes one result line to BC_GPU_CHILD_OUT.
#pragma once

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace batchcast::gputest {

struct ChildJob {
  std::string address;
  std::string out;      // result file
  std::string mode;     // "check" | "alias" | "late"
  int rank = 0;
  int epochs = 1;
  int batch_size = 8;
  int buffer_depth = 2;
};

inline pid_t SpawnChild(const ChildJob& job) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  env.push_back("BC_GPU_CHILD_ADDRESS=" + job.address);
  env.push_back("BC_GPU_CHILD_OUT=" + job.out);
  env.push_back("BC_GPU_CHILD_MODE=" + job.mode);
  env.push_back("BC_GPU_CHILD_RANK=" + std::to_string(job.rank));
  env.push_back("BC_GPU_CHILD_EPOCHS=" + std::to_string(job.epochs));
  env.push_back("BC_GPU_CHILD_BATCH=" + std::to_string(job.batch_size));
  env.push_back("BC_GPU_CHILD_DEPTH=" + std::to_string(job.buffer_depth));
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe";
  std::string filter = "--gtest_filter=GpuChild.DISABLED_Consumer";
  std::string disabled = "--gtest_also_run_disabled_tests";
  char* argv[] = {self.data(), filter.data(), disabled.data(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) return -1;
  return pid;
}

// "key=value key=value" -> map; empty when the file is missing.
inline std::map<std::string, std::string> ReadResult(const std::string& path) {
  std::map<std::string, std::string> kv;
  std::ifstream in(path);
  std::string tok;
  while (in >> tok) {
    auto eq = tok.find('=');
    if (eq != std::string::npos) kv[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return kv;
}

inline int WaitChild(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace batchcast::gputest
