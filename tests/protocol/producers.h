// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The protocol test's ONLY contact with the producers (producer::Producer as each front door
// configures it) and with the leader's status query: when their API changes, this file and
// producers.cc are all that needs updating.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "batchcast/status.h"

namespace batchcast::protocol_test {

enum class ProducerKind { kLeader, kService, kExternal, kMultinode };
const char* ProducerName(ProducerKind kind);
bool ParseProducer(const std::string& name, ProducerKind* kind);

struct ProducerSpec {
  ProducerKind kind = ProducerKind::kLeader;
  std::string socket;              // abstract socket name (no '@')
  int64_t samples = 64;            // dataset size; content: content.h
  int64_t producer_batch = 16;
  uint32_t max_batch = 8;          // largest consumer batch admitted
  int ring_slots = 0;              // 0: the producer's default (from buffer_depth)
  int buffer_depth = 2;            // the deepest consumer's buffer_depth (ring sizing)
  int64_t heartbeat_ms = 1000;
  int epochs = 2;                  // epochs of the stream
  int expect = 1;                  // joins to wait for before the first batch
  uint64_t seed = 7;
  double late_join_window = 0.02;
  bool end_when_empty = true;      // leader / external: end once every consumer has left
  int views_max = 1;               // leader / service: view groups served (content.h ViewPixel)
};

// One running producer, as its front door runs it (a leader: the MPI runtime, the Python
// Leader; a service: `batchcast serve`; external: the Python Producer; the multi-node leader).
class Producer {
 public:
  virtual ~Producer() = default;
  virtual std::string address() const = 0;  // what Consumer::Attach takes
  // Produces the stream until it is complete or Stop() was called.
  virtual Status Run() = 0;
  // Ends Run() and fails the stream with `why` (thread-safe; not async-signal-safe).
  virtual void Stop(const std::string& why) = 0;
  // Consumers blocked in Next() waiting for a publish (case 10: "Next is blocked").
  virtual int ConsumerWaiters() const = 0;
};

// For kMultinode the caller must have initialised MPI (MPI_THREAD_MULTIPLE).
Result<std::unique_ptr<Producer>> CreateProducer(const ProducerSpec& spec);

// What the leader at `socket` says about its members (the `batchcast status` query).
struct MemberView {
  uint32_t id = 0;                 // member id (its bit in a slot's pending mask)
  int pid = 0;
  bool addressed = false;          // receives batches (joining or active)
  bool admitted = false;           // active: admission settled where its stream starts
  uint64_t attached_ms = 0;
};
struct LeaderView {
  int leader_pid = 0;
  uint64_t published = 0;
  std::vector<MemberView> members;
};
Result<LeaderView> QueryLeader(const std::string& socket, int64_t timeout_ms);

}  // namespace batchcast::protocol_test
