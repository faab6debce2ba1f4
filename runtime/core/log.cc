// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "core/log.h"

#include "core/environment.h"
#include "core/path_pattern.h"

#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <optional>
#include <string>

namespace batchcast::log {
namespace internal {
std::atomic<int> g_level{-1};
std::atomic<uint32_t> g_subsys{kAll};
}  // namespace internal

namespace {

std::mutex g_mu;
FILE* g_out = nullptr;
std::string g_file_pattern;
int g_rank = -1;
int g_local_rank = -1;
std::once_flag g_once;

struct SubsysName {
  const char* name;
  Subsys bit;
};
constexpr SubsysName kSubsysNames[] = {
    {"INIT", kInit}, {"SHM", kShm},     {"CUDA", kCuda},   {"MPI", kMpi},
    {"DATA", kData}, {"PIPE", kPipe},   {"TELEM", kTelem}, {"SCHED", kSched},
    {"NODE", kNode}, {"CLI", kCli},     {"ALL", kAll},
};

const char* LevelName(Level level) {
  switch (level) {
    case Level::kError: return "ERROR";
    case Level::kWarn: return "WARN";
    case Level::kInfo: return "INFO";
    case Level::kDebug: return "DEBUG";
    case Level::kTrace: return "TRACE";
  }
  return "?";
}

const char* SubsysLabel(Subsys s) {
  for (const auto& n : kSubsysNames)
    if (n.bit == s) return n.name;
  return "?";
}

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

uint32_t ParseSubsys(const std::optional<std::string>& text) {
  if (!text) return kAll;
  bool exclude = false;
  std::string s(*text);
  if (s[0] == '^') {
    exclude = true;
    s.erase(0, 1);
  }
  uint32_t mask = 0;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string tok = s.substr(start, end - start);
    for (const auto& n : kSubsysNames)
      if (tok == n.name) mask |= n.bit;
    start = end + 1;
  }
  return exclude ? ~mask : mask;
}

void InitOnce() {
  const std::optional<std::string> lvl = env::Get(env::Var::kDebug);
  Level level = lvl ? ParseLevel(*lvl, Level::kWarn) : Level::kWarn;
  internal::g_subsys.store(ParseSubsys(env::Get(env::Var::kDebugSubsys)));
  if (std::optional<std::string> file = env::Get(env::Var::kDebugFile)) g_file_pattern = *file;
  int expected = -1;
  internal::g_level.compare_exchange_strong(expected, static_cast<int>(level));
}

}  // namespace

namespace internal {
void Init() { std::call_once(g_once, InitOnce); }
}  // namespace internal

Level ParseLevel(std::string_view text, Level fallback) {
  std::string t(text);
  for (auto& c : t) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (t == "ERROR") return Level::kError;
  if (t == "WARN" || t == "WARNING") return Level::kWarn;
  if (t == "INFO") return Level::kInfo;
  if (t == "DEBUG") return Level::kDebug;
  if (t == "TRACE") return Level::kTrace;
  return fallback;
}

void SetLevel(Level level) {
  internal::Init();
  internal::g_level.store(static_cast<int>(level));
}

std::string ExpandPathPattern(std::string_view pattern, int rank) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[++i];
      if (c == 'h') out += HostName();
      else if (c == 'p') out += std::to_string(getpid());
      else if (c == 'r') out += std::to_string(rank);
      else out += c;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

void SetRank(int rank, int local_rank) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_rank = rank;
  g_local_rank = local_rank;
}

int Rank() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_rank;
}

void Write(Level level, Subsys subsys, std::string_view message) {
  static const std::string host = HostName();
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_out == nullptr) {
    g_out = stderr;
    if (!g_file_pattern.empty()) {
      std::string path = ExpandPathPattern(g_file_pattern, g_rank);
      FILE* f = std::fopen(path.c_str(), "a");
      if (f != nullptr) g_out = f;
    }
  }
  std::fprintf(g_out, "%s:%d:%d/%d batchcast %s %s: %.*s\n", host.c_str(), getpid(), g_rank,
               g_local_rank, LevelName(level), SubsysLabel(subsys),
               static_cast<int>(message.size()), message.data());
  std::fflush(g_out);
}

void Report(Subsys subsys, std::string_view message) {
  std::fprintf(stderr, "batchcast: %.*s\n", static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  bool to_file;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    to_file = !g_file_pattern.empty();
  }
  if (to_file && Enabled(Level::kError, subsys)) Write(Level::kError, subsys, message);
}

}  // namespace batchcast::log
