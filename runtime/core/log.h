// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Subsystem logging in NCCL's manner:
//   BATCHCAST_DEBUG=ERROR|WARN|INFO|DEBUG|TRACE            (default WARN)
//   BATCHCAST_DEBUG_SUBSYS=INIT,SHM,CUDA,MPI,DATA,PIPE,TELEM,SCHED,NODE,CLI  (default ALL;
//                          a leading ^ excludes the listed ones)
//   BATCHCAST_DEBUG_FILE=log.%h.%p   (%h host, %p pid, %r rank; default stderr)
// Every line starts with "host:pid:rank/local_rank". The level is checked before the
// message is formatted, so disabled logging costs one load and one compare.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <string_view>

namespace batchcast::log {

enum class Level : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

enum Subsys : uint32_t {
  kInit = 1u << 0,
  kShm = 1u << 1,
  kCuda = 1u << 2,
  kMpi = 1u << 3,
  kData = 1u << 4,
  kPipe = 1u << 5,
  kTelem = 1u << 6,
  kSched = 1u << 7,
  kNode = 1u << 8,
  kCli = 1u << 9,
  kAll = 0xffffffffu,
};

namespace internal {
extern std::atomic<int> g_level;       // -1: not initialised yet
extern std::atomic<uint32_t> g_subsys;
void Init();
}  // namespace internal

inline bool Enabled(Level level, Subsys subsys) {
  int cur = internal::g_level.load(std::memory_order_relaxed);
  if (cur < 0) {
    internal::Init();
    cur = internal::g_level.load(std::memory_order_relaxed);
  }
  if (static_cast<int>(level) > cur) return false;
  return level == Level::kError ||
         (internal::g_subsys.load(std::memory_order_relaxed) & subsys) != 0;
}

void Write(Level level, Subsys subsys, std::string_view message);

// A fatal report for the user, printed once: "batchcast: <message>" on stderr, and the same
// as an Error line in the log file when BATCHCAST_DEBUG_FILE sends the log elsewhere (a
// log on stderr would repeat it).
void Report(Subsys subsys, std::string_view message);

// Identity shown in every line; set by the runtime once ranks are known.
void SetRank(int rank, int local_rank);
// The rank set by SetRank(), or -1.
int Rank();
// Overrides the environment (tests, CLI --verbose).
void SetLevel(Level level);
Level ParseLevel(std::string_view text, Level fallback);

}  // namespace batchcast::log

#define BC_LOG(level, subsys, ...)                                                 \
  do {                                                                             \
    if (::batchcast::log::Enabled(::batchcast::log::Level::k##level,               \
                                  ::batchcast::log::k##subsys)) {                  \
      ::batchcast::log::Write(::batchcast::log::Level::k##level,                   \
                              ::batchcast::log::k##subsys, fmt::format(__VA_ARGS__)); \
    }                                                                              \
  } while (0)
