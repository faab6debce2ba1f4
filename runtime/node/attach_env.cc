// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// AttachFromEnvironment: the trainer side of `batchcast-run`, which exports the node
// leader's address as BATCHCAST_ADDRESS and the trainers-only rank as RANK.
#include <unistd.h>

#include <optional>
#include <string>

#include "batchcast/consumer.h"
#include "core/environment.h"
#include "core/errors.h"
#include "core/log.h"
#include "node/task_telemetry.h"

namespace batchcast {

Result<std::unique_ptr<Consumer>> AttachFromEnvironment(const Options& options) {
  const std::optional<std::string> address = env::LeaderAddress();
  if (!address)
    return FailedPreconditionError(
        "attach: BATCHCAST_ADDRESS is not set; start this trainer under batchcast-run "
        "(docs/launch.md), or call Consumer::Attach with the leader's address");
  auto rank_env = env::GetInt(env::Var::kRank, 0, 1 << 30);
  if (!rank_env.ok()) return rank_env.status().WithContext("attach");
  const int rank = static_cast<int>(rank_env->value_or(-1));
  std::string name = rank >= 0 ? "rank " + std::to_string(rank) : "";
  if (std::optional<std::string> host = env::Get(env::Var::kSlurmdNodeName)) name += " on " + *host;
  auto local = env::LauncherLocalRank();
  if (!local.ok()) return local.status().WithContext("attach");
  // The `telemetry` option (batchcast-run exports it): this trainer's own per-rank files,
  // checked before it attaches.
  auto telemetry = producer::ProcessTelemetry::Start(
      options, telemetry::ProcessKind::kTrainer, rank, local->value_or(-1),
      telemetry::Role::kConsumer,
      rank >= 0 ? "rank" + std::to_string(rank) : "pid" + std::to_string(getpid()));
  if (!telemetry.ok()) return telemetry.status().WithContext("attach from environment");
  // batchcast-run starts a trainer once the leader listens; a trainer started some other
  // way may come up first: Attach waits options.connect_timeout_ms for the leader.
  auto c = Consumer::Attach(*address, options, rank, name);
  if (!c.ok()) return c.status().WithContext("attach from environment (BATCHCAST_ADDRESS)");
  node::OwnTelemetry(**c, std::move(telemetry).value());
  return c;
}

}  // namespace batchcast
