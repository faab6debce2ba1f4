// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "run/process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/environment.h"
#include "core/errors.h"

namespace batchcast::run {
namespace {

std::atomic<pid_t> g_child{0};
constexpr int kSignalGraceSeconds = 10;

sigset_t ForwardedSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&set, s);
  return set;
}

}  // namespace

void StartSignalForwarding(std::function<void(int)> on_signal) {
  sigset_t set = ForwardedSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, on_signal = std::move(on_signal)] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      pid_t child = g_child.load();
      if (child > 0) kill(child, sig);
      if (on_signal) on_signal(sig);
      if (child <= 0 && !on_signal) _exit(128 + sig);  // nothing to wind down: go now
      // Whatever is still running gets a bounded grace period to wind down and report.
      std::thread([sig] {
        std::this_thread::sleep_for(std::chrono::seconds(kSignalGraceSeconds));
        _exit(128 + sig);
      }).detach();
    }
  }).detach();
}

Result<pid_t> SpawnChild(const std::vector<std::string>& argv, const EnvList& env) {
  if (argv.empty()) return InvalidArgumentError("batchcast-run: no trainer command after '--'");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The environment is built before fork: the child of a threaded process may only make
  // async-signal-safe calls (no setenv/malloc) until it execs.
  std::vector<std::string> entries;
  for (const auto& [key, value] : env::Snapshot()) {
    bool replaced = false;
    for (const auto& e : env) replaced = replaced || e.first == key;
    if (!replaced) entries.push_back(key + "=" + value);
  }
  for (const auto& [k, v] : env) entries.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : entries) envp.push_back(e.data());
  envp.push_back(nullptr);
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) return ErrnoError(errno, "batchcast-run: pipe");
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(err_pipe[0]);
    close(err_pipe[1]);
    return ErrnoError(err, "batchcast-run: fork for '{}'", JoinCommand(argv));
  }
  if (pid == 0) {
    sigset_t set = ForwardedSignals();
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    execvpe(args[0], args.data(), envp.data());
    int err = errno;
    ssize_t w = write(err_pipe[1], &err, sizeof(err));
    (void)w;
    _exit(127);
  }
  close(err_pipe[1]);
  int child_err = 0;
  ssize_t n;
  do {
    n = read(err_pipe[0], &child_err, sizeof(child_err));
  } while (n < 0 && errno == EINTR);
  close(err_pipe[0]);
  if (n == sizeof(child_err)) {
    waitpid(pid, nullptr, 0);
    return ErrnoError(child_err, "batchcast-run: cannot run trainer command '{}'", argv[0]);
  }
  g_child.store(pid);
  return pid;
}

int WaitChild(pid_t pid, std::string* how) {
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid, &status, 0);
  } while (r < 0 && errno == EINTR);
  g_child.store(0);
  if (r < 0) {
    *how = fmt::format("could not be waited for: {}", std::strerror(errno));
    return 1;
  }
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    *how = fmt::format("was killed by signal {} ({})", sig, strsignal(sig));
    return 128 + sig;
  }
  int code = WEXITSTATUS(status);
  *how = fmt::format("exited with status {}", code);
  return code;
}

std::string JoinCommand(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

}  // namespace batchcast::run
