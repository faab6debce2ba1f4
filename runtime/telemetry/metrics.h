// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// What the telemetry collector records, as enums so that call sites cannot misspell a
// metric. The names below are the dataset/column names in every output (see
// docs/telemetry-format.md); append new values before the kCount sentinel and add their
// names in metrics.cc — never reorder (the HDF5 format records names, not indices, but
// old traces keep their span kind numbers).
#pragma once

#include <cstdint>
#include <string_view>

namespace batchcast::telemetry {

// Monotonic event counts and byte totals. Add(Counter, n).
enum class Counter : int {
  kBatchesReceived = 0,  // consumer: batches handed to the trainer
  kSamplesReceived,      // consumer: samples in those batches
  kBatchesProduced,      // leader: producer batches published into the ring
  kSamplesProduced,      // leader: samples in those producer batches
  kSamplesSkipped,       // leader: samples skipped as bad (on_bad_sample=skip)
  kBytesShm,             // bytes moved through host shared memory
  kBytesMpi,             // bytes sent or received over MPI (replicate-mode exchange)
  kBytesH2d,             // bytes copied host to device
  kBytesIpc,             // bytes mapped through CUDA IPC
  kBytesNccl,            // bytes broadcast over NCCL
  kConsumersDetached,    // leader: consumers detached for silence or death
  kCacheHits,            // leader: samples taken from the decoded-sample cache (option cache)
  kCacheMisses,          // leader: samples decoded with the cache on (not, or not yet, in it)
  kBatchesReplayed,      // leader: producer batches decoded again for some consumers alone
                         // (late-join replays, catch-ups, resume replays)
  kLateJoinCatchUps,     // leader: late joiners given an epoch of their own (catch-up)
  kLateJoinsDeferred,    // leader: late joiners deferred to the next epoch by the catch-up
                         // limit (option late_join_catch_ups)
  kCount
};

// Accumulated durations in nanoseconds, with the number of intervals. AddTime(Timer, ns).
enum class Timer : int {
  kDataWait = 0,  // consumer: blocked waiting for the next batch
  kStep,          // consumer: from receiving a batch to releasing it (the training step)
  kRead,          // leader worker: reading encoded samples
  kDecode,        // leader worker: image decode (incl. DCT-domain downscaling)
  kTransform,     // leader worker: resize / crop / flip / normalize
  kCollate,       // leader worker: copying samples into the producer batch
  kPublish,       // leader: publishing a producer batch to the ring / consumers
  kExchange,      // leader: MPI exchange of decoded samples between node leaders
  kStage,         // leader: model stages (--stage) run on each producer batch
  // Waits, each its own timer so that no wait is ever inside read, decode or transform
  // (docs/telemetry.md "Stage times").
  kSlotWait,      // leader: backpressure, the producer thread waiting for a free ring slot
  kQueueWait,     // leader: the producer thread waiting for the decode workers' queued batch
  kLockWait,      // leader worker: waiting for a lock a dataset read needs (the process-wide
                  // HDF5 lock: layout version 1 encoded files, compressed chunks); not in kRead
  kCount
};

// Levels. SetGauge(Gauge, v) records a sample; each time-series row holds the mean of the
// values set during its interval (or the last value if none was set).
enum class Gauge : int {
  kBufferOccupancy = 0,  // consumer: batches held unreleased (0..buffer_depth)
  kRingOccupancy,        // leader: ring slots in use (0..ring_slots)
  kRingSlots,            // leader: ring capacity, for occupancy fractions
  kWorkerThreads,        // leader: decode worker threads
  kConsumersAttached,    // leader: consumers currently attached
  kImageSize,            // progressive resizing: image size of the batches (leader: produced,
                         // consumer: received); absent (0) without a resize schedule
  kBatchSize,            // progressive resizing: samples per batch (leader: producer batch,
                         // consumer: its scaled batch)
  kLrFactor,             // progressive resizing: LR factor delivered with the batches
  kEvalAccuracy,         // trainer: last held-out accuracy it reported (0..1); 0 until then
  kCacheBytes,           // leader: bytes held by the decoded-sample cache (option cache)
  kCount
};

// Batch-lifecycle spans in the timeline trace. `seq` is the producer-batch sequence number
// so that a consumer's kWait/kStep of a batch lines up with the leader's kProduce of it.
enum class SpanKind : int {
  kProduce = 0,  // leader: first read of a producer batch .. it is ready to publish
  kPublish,      // leader: publishing it (ring slot write, notifications)
  kExchange,     // leader: MPI exchange for it
  kWait,         // consumer: blocked waiting for it
  kStep,         // consumer: acquired .. released (the trainer used it)
  kH2d,          // host-to-device copy of it
  kCount
};

// What a rank does on its node. A leader that also trains (leader_trains) is kBoth.
enum class Role : int { kLeader = 0, kConsumer, kBoth };

inline constexpr int kNumCounters = static_cast<int>(Counter::kCount);
inline constexpr int kNumTimers = static_cast<int>(Timer::kCount);
inline constexpr int kNumGauges = static_cast<int>(Gauge::kCount);
inline constexpr int kNumSpanKinds = static_cast<int>(SpanKind::kCount);

// Snake-case names used in every sink ("batches_received", "decode", ...).
std::string_view CounterName(Counter c);
std::string_view TimerName(Timer t);
std::string_view GaugeName(Gauge g);
std::string_view SpanKindName(SpanKind k);
std::string_view RoleName(Role r);
// "leader" | "consumer" | "both" → Role; false if unknown.
bool ParseRole(std::string_view text, Role* out);

// True for the timers spent working in decode workers (read, decode, transform, collate):
// their sum over threads divided by (threads × wall) is the worker utilisation. Lock waits
// (kLockWait) are waits, not work (IsWait).
constexpr bool IsWorkerStage(Timer t) {
  return t == Timer::kRead || t == Timer::kDecode || t == Timer::kTransform ||
         t == Timer::kCollate;
}
// True for the timers that measure waiting, not work: a consumer's data wait, the leader's
// backpressure and queue waits, and lock waits. The diagnosis never blames a wait as the
// slow stage; the report draws them apart from the work they hold up.
constexpr bool IsWait(Timer t) {
  return t == Timer::kDataWait || t == Timer::kSlotWait || t == Timer::kQueueWait ||
         t == Timer::kLockWait;
}
// True for the leader's work stages (read .. stage): the candidates for the slow stage.
constexpr bool IsLeaderWork(Timer t) {
  return t != Timer::kDataWait && t != Timer::kStep && !IsWait(t);
}

}  // namespace batchcast::telemetry
