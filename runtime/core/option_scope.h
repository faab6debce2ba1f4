// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Which front doors read which options. Every registry entry (options.cc) has a scope:
// leader-only (dataset, decode, transforms, the ring, placement, GPU staging), consumer-only
// (drop_last, pad_last, carving, connect_timeout, allowed_leader_uid) or both (batch sizes,
// epochs, seed, mode/rank, telemetry, the resume point).
//
// - A front door that configures one program's leader and its consumers with one options
//   string (the MPI Runtime, batchcast-run, the C API) accepts every option.
// - A leader front door with options of its own (the Python Leader) refuses consumer-only
//   options set in code, like a consumer refuses leader-only ones.
// - A consumer front door whose options are the consumer's alone (the Python Consumer)
//   refuses leader-only options the caller set explicitly, instead of accepting and ignoring
//   them. Values from the environment or a config file are not refused there: a job-wide
//   BATCHCAST_* setting is meant for the leader that shares the job.
// - A leader that publishes batches made elsewhere (the Python Producer) is the job's
//   leader but runs no decode pipeline: it refuses every leader-only option it does not read,
//   from any source, BATCHCAST_* variables and config files included, since no other process
//   of the job would read it either.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "batchcast/options.h"
#include "batchcast/status.h"

namespace batchcast {

// Whether a consumer reads option `key` (a registry key).
bool ConsumerReadsOption(std::string_view key);
// Whether a leader reads option `key`.
bool LeaderReadsOption(std::string_view key);

// The first consumer-only option set explicitly ("code" or "flag"), as an error naming it,
// the front door `leader` and `consumer` (where it belongs). Ok when there is none.
Status CheckLeaderOptions(const Options& options, std::string_view leader,
                          std::string_view consumer);

// A one-node leader that publishes one shared stream (`batchcast serve`, batchcast.Leader):
// drop_last, pad_last, mode, rank and world_size carve that stream per consumer and are each
// consumer's own; set on the leader they would be ignored, so they are refused with a
// message naming `front_door` and `consumer` (where they belong).
Status CheckSharedStreamOptions(const Options& options, std::string_view front_door,
                                std::string_view consumer);

// The first option set explicitly ("code" or "flag" source) that only the leader reads, as
// an error naming it, `leader` (where it belongs, e.g. "batchcast.Leader(...)") and the
// options a consumer accepts; `consumer` names the front door. Ok when there is none.
Status CheckConsumerOptions(const Options& options, std::string_view consumer,
                            std::string_view leader);

// The first leader-only option set from any source (not left at its default) that is not
// in `reads`, as an error naming the option, where it was set (the BATCHCAST_* variable, the
// config file, the code), why `front_door` does not read it, and `instead` (what to do).
// Ok when there is none.
Status CheckPublisherOptions(const Options& options, std::string_view front_door,
                             std::initializer_list<std::string_view> reads,
                             std::string_view instead);

}  // namespace batchcast
