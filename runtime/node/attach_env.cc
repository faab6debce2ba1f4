// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// AttachFromEnvironment: the trainer side of `batchcast-run`, which exports the node
// leader's address as BATCHCAST_ADDRESS and the trainers-only rank as RANK.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "batchcast/consumer.h"
#include "core/errors.h"
#include "core/log.h"

namespace batchcast {
namespace {

constexpr int64_t kAttachWaitMs = 60000;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace

Result<std::unique_ptr<Consumer>> AttachFromEnvironment(const Options& options) {
  std::string address = Env("BATCHCAST_ADDRESS");
  if (address.empty())
    return FailedPreconditionError(
        "attach: BATCHCAST_ADDRESS is not set; start this trainer under batchcast-run "
        "(docs/launch.md), or call Consumer::Attach with the leader's address");
  int rank = -1;
  std::string rank_text = Env("RANK");
  if (!rank_text.empty()) {
    char* end = nullptr;
    long r = std::strtol(rank_text.c_str(), &end, 10);
    if (*end != '\0' || r < 0 || r > (1L << 30))
      return InvalidArgumentError("attach: RANK='{}' is not a rank; batchcast-run sets it",
                                  rank_text);
    rank = static_cast<int>(r);
  }
  std::string name = rank >= 0 ? "rank " + std::to_string(rank) : "";
  if (std::string host = Env("SLURMD_NODENAME"); !host.empty()) name += " on " + host;
  // batchcast-run starts a trainer once the leader listens; a trainer started some other
  // way may come up first, so an absent leader is retried for a bounded time.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kAttachWaitMs);
  auto pause = std::chrono::milliseconds(5);
  for (;;) {
    auto c = Consumer::Attach(address, options, rank, name);
    if (c.ok() || c.status().code() != StatusCode::kUnavailable ||
        std::chrono::steady_clock::now() > deadline) {
      if (!c.ok()) return c.status().WithContext("attach from environment (BATCHCAST_ADDRESS)");
      return c;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

}  // namespace batchcast
