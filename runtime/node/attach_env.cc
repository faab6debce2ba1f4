// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// AttachFromEnvironment: the trainer side of `batchcast-run`, which exports the node
// leader's address as BATCHCAST_ADDRESS and the trainers-only rank as RANK.
#include <unistd.h>

#include <cstdlib>

#include "batchcast/consumer.h"
#include "core/errors.h"
#include "core/log.h"
#include "node/task_telemetry.h"

namespace batchcast {
namespace {

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
  // way may come up first: Attach waits options.connect_timeout_ms for the leader.
  auto c = Consumer::Attach(address, options, rank, name);
  if (!c.ok()) return c.status().WithContext("attach from environment (BATCHCAST_ADDRESS)");
  // The `telemetry` option (batchcast-run exports it): this trainer's own per-rank files.
  const std::string local = Env("LOCAL_RANK");
  auto telemetry = producer::ProcessTelemetry::Start(
      options, rank, local.empty() ? -1 : std::atoi(local.c_str()), telemetry::Role::kConsumer,
      rank >= 0 ? "rank" + std::to_string(rank) : "pid" + std::to_string(getpid()));
  if (!telemetry.ok()) return telemetry.status().WithContext("attach from environment");
  node::OwnTelemetry(**c, std::move(telemetry).value());
  return c;
}

}  // namespace batchcast
