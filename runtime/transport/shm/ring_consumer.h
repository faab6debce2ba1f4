// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The consumer side of the node data plane: joins a leader through its control
// socket, maps the segment it is handed, waits (futex, no spinning) for published
// producer batches, and releases them. A heartbeat thread keeps the membership entry
// alive and watches the socket, so a dead leader is noticed within a heartbeat tick
// even while the trainer is busy.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "batchcast/status.h"
#include "transport/shm/segment.h"

namespace batchcast::shm {

struct ConsumerConfig {
  uint32_t batch_size = 64;
  uint32_t buffer_depth = 2;
  uint32_t flags = 0;         // ConsumerFlags
  uint64_t order_seed = 0;
  int rank = -1;
  std::string name;
  int64_t heartbeat_ms = 10000;
  int64_t join_timeout_ms = 60000;
};

class RingConsumer {
 public:
  static Result<std::unique_ptr<RingConsumer>> Attach(const std::string& socket_name,
                                                      const ConsumerConfig& config);
  ~RingConsumer();  // detaches if still attached
  RingConsumer(const RingConsumer&) = delete;
  RingConsumer& operator=(const RingConsumer&) = delete;

  // Blocks until the leader admits this consumer; returns its first stream position.
  Result<uint64_t> WaitAdmitted(int64_t timeout_ms);

  // Blocks until the producer batch at position() is published and returns its
  // descriptor (valid until Release(seq)); advances position(). kEndOfStream when the
  // stream ended; kUnavailable naming the cause when the leader failed or vanished.
  // *waited_ns gets the time spent blocked.
  Result<const SlotDesc*> Acquire(int64_t* waited_ns);
  // Bytes of the slot that holds `desc`.
  const uint8_t* Data(const SlotDesc* desc) const;
  // Gives a producer batch back; thread-safe; each acquired seq exactly once.
  void Release(uint64_t seq);

  // Leaves the stream cleanly (the leader releases whatever this consumer still holds).
  Status Detach();

  uint64_t position() const { return position_; }
  uint32_t id() const { return id_; }
  const SegmentHeader* header() const { return header_; }
  const ConsumerConfig& config() const { return config_; }
  void RecordBatch();  // bookkeeping shown by the leader (batches taken)

 private:
  explicit RingConsumer(const ConsumerConfig& config) : config_(config) {}
  Status Join(const std::string& socket_name);
  Status CheckAlive() const;
  Result<const SlotDesc*> AcquireAt(uint64_t seq, int64_t* waited_ns);
  void HeartbeatLoop();

  ConsumerConfig config_;
  int sock_ = -1;
  int stop_fd_ = -1;
  SegmentHeader* header_ = nullptr;
  ConsumerEntry* entry_ = nullptr;
  uint64_t mapped_bytes_ = 0;
  uint32_t id_ = 0;
  uint64_t generation_ = 0;
  uint64_t position_ = 0;
  std::atomic<bool> leader_gone_{false};
  std::atomic<bool> detached_{false};
  std::thread heartbeat_;
};

}  // namespace batchcast::shm
