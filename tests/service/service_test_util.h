// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Process helpers for the service tests: a service_server child whose "ready" line is
// awaited (a read, not a sleep), service_consumer children, and their logs.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "transport/shm/control.h"

namespace batchcast::service_test {

// Polls the status (a condition, with a deadline of about 30 s that only turns a hang into
// a failure) until pred holds.
template <typename Pred>
bool WaitStatus(const std::string& socket, Pred pred) {
  for (int i = 0; i < 3000; ++i) {
    auto r = shm::QueryStatus(socket, 2000);
    if (r.ok() && pred(*r)) return true;
    usleep(10000);
  }
  return false;
}

inline std::string UniqueSocket(const std::string& tag) {
  return "bc-svc-test-" + std::to_string(getpid()) + "-" + tag;
}

struct Child {
  pid_t pid = -1;
  FILE* out = nullptr;  // its stdout (servers)
};

// Starts argv[0] with stdout on a pipe when capture is set.
inline Child Spawn(const std::vector<std::string>& args, bool capture) {
  int fds[2] = {-1, -1};
  if (capture && pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a failed test leaves no orphan service behind
    if (capture) {
      dup2(fds[1], 1);
      close(fds[0]);
      close(fds[1]);
    }
    std::vector<char*> av;
    for (const auto& a : args) av.push_back(const_cast<char*>(a.c_str()));
    av.push_back(nullptr);
    execv(av[0], av.data());
    _exit(127);
  }
  Child c;
  c.pid = pid;
  if (capture) {
    close(fds[1]);
    c.out = fdopen(fds[0], "r");
  }
  return c;
}

// Reads the child's stdout up to a line starting with `prefix` (blocking read; EOF = "").
inline std::string ReadLineWith(Child& c, const std::string& prefix) {
  char buf[4096];
  while (c.out != nullptr && std::fgets(buf, sizeof(buf), c.out) != nullptr) {
    std::string line(buf);
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "";
}

inline int Wait(Child& c) {
  int status = 0;
  if (c.pid > 0) waitpid(c.pid, &status, 0);
  if (c.out != nullptr) fclose(c.out);
  c.out = nullptr;
  c.pid = -1;
  return status;
}

inline Child StartServer(const std::string& socket, int samples, int p, int max_b, int hb_ms,
                         double window, int epochs, int slots = 6, int handshake_ms = 5000,
                         bool mid_epoch = false, int catch_ups = -1,
                         const std::string& telemetry = "", int expected_consumers = 0) {
  std::vector<std::string> args = {SERVICE_SERVER, socket, std::to_string(samples),
                                   std::to_string(p), std::to_string(max_b),
                                   std::to_string(hb_ms), std::to_string(window),
                                   std::to_string(epochs), std::to_string(slots),
                                   std::to_string(handshake_ms), mid_epoch ? "mid" : "next",
                                   std::to_string(catch_ups)};
  if (!telemetry.empty() || expected_consumers > 0)
    args.push_back(telemetry.empty() ? "-" : telemetry);
  if (expected_consumers > 0) args.push_back(std::to_string(expected_consumers));
  Child c = Spawn(args, true);
  ReadLineWith(c, "ready");
  return c;
}

inline std::vector<std::string> ReadLines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

// Batchcast's entries in /dev/shm (there should never be any: segments are memfds). Other
// users of the machine (e.g. Open MPI's vader segments of concurrent jobs) are ignored.
inline std::set<std::string> DevShmEntries() {
  std::set<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.find("batchcast") != std::string::npos || name.find("bc-") != std::string::npos)
        out.insert(name);
    }
    closedir(d);
  }
  return out;
}

struct EpochLine {
  long long epoch = -1, first_batch = -1, samples = 0, dups = 0, missing = 0, bad = 0;
};

inline bool ParseEpoch(const std::string& line, EpochLine* e) {
  return std::sscanf(line.c_str(),
                     "epoch %lld first_batch %lld samples %lld dups %lld missing %lld "
                     "bad_pixels %lld",
                     &e->epoch, &e->first_batch, &e->samples, &e->dups, &e->missing,
                     &e->bad) == 6;
}

inline void PutBe32(FILE* f, uint32_t v) {
  const uint8_t b[4] = {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
  std::fwrite(b, 1, 4, f);
}

// n images of 8x8 grey pixels (a real dataset: `batchcast convert idx`) and labels id % 10, in the IDX format.
inline void WriteIdx(const std::string& images, const std::string& labels, int n) {
  FILE* f = std::fopen(images.c_str(), "wb");
  PutBe32(f, 0x00000803);
  PutBe32(f, uint32_t(n));
  PutBe32(f, 8);
  PutBe32(f, 8);
  for (int i = 0; i < n; ++i)
    for (int p = 0; p < 64; ++p) std::fputc((i * 7 + p) & 0xff, f);
  std::fclose(f);
  f = std::fopen(labels.c_str(), "wb");
  PutBe32(f, 0x00000801);
  PutBe32(f, uint32_t(n));
  for (int i = 0; i < n; ++i) std::fputc(i % 10, f);
  std::fclose(f);
}

inline std::string RunShell(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  while (p != nullptr && std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  if (p != nullptr) pclose(p);
  return out;
}

}  // namespace batchcast::service_test
