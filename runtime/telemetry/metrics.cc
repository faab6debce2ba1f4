// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "telemetry/metrics.h"

namespace batchcast::telemetry {
namespace {

constexpr std::string_view kCounterNames[] = {
    "batches_received", "samples_received", "batches_produced", "samples_produced",
    "samples_skipped",  "bytes_shm",        "bytes_mpi",        "bytes_h2d",
    "bytes_ipc",        "bytes_nccl",       "consumers_detached", "cache_hits",
    "cache_misses",     "batches_replayed", "late_join_catch_ups", "late_joins_deferred"};
constexpr std::string_view kTimerNames[] = {"data_wait", "step",    "read",    "decode",
                                            "transform", "collate", "publish", "exchange",
                                            "stage",     "slot_wait", "queue_wait", "lock_wait"};
constexpr std::string_view kGaugeNames[] = {"buffer_occupancy", "ring_occupancy", "ring_slots",
                                            "worker_threads", "consumers_attached", "image_size",
                                            "batch_size", "lr_factor", "eval_accuracy",
                                            "cache_bytes"};
constexpr std::string_view kSpanNames[] = {"produce", "publish", "exchange",
                                           "wait",    "step",    "h2d"};
constexpr std::string_view kRoleNames[] = {"leader", "consumer", "both"};

static_assert(std::size(kCounterNames) == kNumCounters, "a Counter has no name");
static_assert(std::size(kTimerNames) == kNumTimers, "a Timer has no name");
static_assert(std::size(kGaugeNames) == kNumGauges, "a Gauge has no name");
static_assert(std::size(kSpanNames) == kNumSpanKinds, "a SpanKind has no name");

}  // namespace

std::string_view CounterName(Counter c) { return kCounterNames[static_cast<int>(c)]; }
std::string_view TimerName(Timer t) { return kTimerNames[static_cast<int>(t)]; }
std::string_view GaugeName(Gauge g) { return kGaugeNames[static_cast<int>(g)]; }
std::string_view SpanKindName(SpanKind k) { return kSpanNames[static_cast<int>(k)]; }
std::string_view RoleName(Role r) { return kRoleNames[static_cast<int>(r)]; }

bool ParseRole(std::string_view text, Role* out) {
  for (int i = 0; i < 3; ++i)
    if (text == kRoleNames[i]) {
      *out = static_cast<Role>(i);
      return true;
    }
  return false;
}

}  // namespace batchcast::telemetry
