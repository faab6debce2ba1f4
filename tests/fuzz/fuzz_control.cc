// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// libFuzzer target: the control-socket protocol as the leader serves it. A real
// shm::RingLeader runs in this process (its control thread parses what arrives on the
// socket); each input is a script of client operations on up to four connections to it:
// connect, send raw bytes (truncated, split or malformed messages), send a join (with or
// without a resume point), status, drain or leave message built from the input's bytes
// (magic, version, type and size sometimes wrong: an old protocol's shorter join too), admit the joining members, write a member's heartbeat, position or
// releases into the control segment, publish a position, close. After the script every
// connection is closed and the leader must still answer status queries, not have failed its
// stream, and soon show no member left (every closed connection reaped, whatever it sent).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/log.h"
#include "fuzz_util.h"
#include "transport/shm/control.h"
#include "transport/shm/futex.h"
#include "transport/shm/segment.h"
#include "transport/shm/ring_leader.h"

namespace {

using namespace batchcast;

constexpr size_t kMaxConnections = 4;

shm::RingLeader* Leader() {
  static std::unique_ptr<shm::RingLeader> leader = [] {
    shm::RingConfig rc;
    rc.num_slots = 4;
    rc.slot_bytes = 4096;
    rc.max_consumer_batch = 4;
    rc.producer_batch = 4;
    rc.heartbeat_ms = 3600 * 1000;  // members live as long as their connection
    rc.socket_name = "batchcast-fuzz-control-" + std::to_string(getpid());
    auto created = shm::RingLeader::Create(rc);
    fuzz::Check(created.ok(), "RingLeader::Create");
    return std::move(created).value();
  }();
  return leader.get();
}

// Reads the script: each call takes the next byte (0 once the input is used up).
class Script {
 public:
  Script(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ >= size_; }
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint32_t Word() {
    uint32_t w = 0;
    for (int i = 0; i < 4; ++i) w = (w << 8) | Byte();
    return w;
  }
  void Bytes(void* dst, size_t n) {
    auto* p = static_cast<uint8_t*>(dst);
    for (size_t i = 0; i < n; ++i) p[i] = Byte();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

void SendAll(int fd, const void* msg, size_t len) {
  // MSG_NOSIGNAL: the leader may have closed a connection it refused.
  send(fd, msg, len, MSG_NOSIGNAL | MSG_DONTWAIT);
}

// A message of the protocol built from the script: flags pick a wrong magic, version or
// size now and then, so the fuzzer reaches both the validation and what lies behind it.
void SendMessage(int fd, Script* s) {
  const uint8_t kind = s->Byte();
  union {
    shm::JoinRequest join;
    shm::MemberMessage member;
    uint8_t bytes[sizeof(shm::JoinRequest)];
  } msg;
  std::memset(&msg, 0, sizeof(msg));
  size_t len = sizeof(shm::JoinRequest);
  const uint32_t types[] = {uint32_t(shm::MessageType::kJoin), uint32_t(shm::MessageType::kStatus),
                            uint32_t(shm::MessageType::kDrain), uint32_t(shm::MessageType::kLeave),
                            uint32_t(shm::MessageType::kJoinReply), s->Byte()};
  const uint32_t type = types[kind % 6];
  if (type == uint32_t(shm::MessageType::kJoin)) {
    msg.join.pid = static_cast<int32_t>(s->Word());
    msg.join.rank = static_cast<int32_t>(s->Word());
    msg.join.batch_size = s->Byte() % 8;
    msg.join.buffer_depth = s->Byte() % 8;
    msg.join.flags = s->Byte() % 8;
    msg.join.order_seed = s->Word();
    s->Bytes(msg.join.name, sizeof(msg.join.name));  // not always terminated
    msg.join.resumes = s->Byte() % 3;                 // 2: invalid
    msg.join.resume_epoch = s->Word();
    msg.join.resume_sample = s->Word();
  } else if (type == uint32_t(shm::MessageType::kDrain) ||
             type == uint32_t(shm::MessageType::kLeave)) {
    msg.member.position = s->Word();
    len = sizeof(shm::MemberMessage);
  }
  msg.join.magic = (kind & 0x08) ? s->Word() : shm::kControlMagic;
  msg.join.version = (kind & 0x10) ? s->Byte() : shm::kProtocolVersion;
  msg.join.type = type;
  if (kind & 0x20) len = std::min<size_t>(len, s->Byte() % (sizeof(msg) + 1));
  if (kind & 0x40) len = (kind & 0x80) ? sizeof(shm::JoinRequest) : sizeof(shm::MemberMessage);
  SendAll(fd, msg.bytes, len);
}

// What a consumer process writes into the shared control segment, with values from the
// script (hostile ones included): its heartbeat (last_seen_ns, an old one gets it evicted),
// its position, its counters, and releases (its bit cleared from a slot's pending mask).
// Only its own entry and bit, as a consumer does: the segment is writable by any process of
// the leader's uid, so other entries are not a boundary the leader can defend.
void MemberWrites(shm::RingLeader* leader, Script* s) {
  std::vector<shm::MemberInfo> members = leader->Members();
  if (members.empty()) return;
  const uint32_t id = members[s->Byte() % members.size()].id;
  shm::ConsumerEntry& e = leader->view().control->consumers[id];
  const uint8_t what = s->Byte();
  const uint64_t value = (uint64_t(s->Word()) << 32) | s->Word();
  switch (what % 5) {
    case 0: e.last_seen_ns.store(shm::MonotonicNs()); break;          // a heartbeat
    case 1: e.last_seen_ns.store(static_cast<int64_t>(value)); break;  // a stale or odd one
    case 2: e.position.store(leader->next_seq() - (value % 8)); break;  // acquired up to here
    case 3: e.position.store(value); break;                             // garbage
    case 4: {                                                           // a release
      const uint32_t slot = static_cast<uint32_t>(value % leader->max_slots());
      leader->view().pending(slot).fetch_and(~shm::RingLeader::MemberBit(id));
      leader->view().control->release_futex.fetch_add(1);
      break;
    }
  }
  e.batches.fetch_add(what);
  e.wait_ns.store(value);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  log::SetLevel(log::Level::kError);  // refused connections are the point, not news
  Leader();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shm::RingLeader* leader = Leader();
  Script s(data, size);
  std::vector<int> conns;
  auto pick = [&](uint8_t b) { return conns[b % conns.size()]; };
  for (int ops = 0; ops < 64 && !s.done(); ++ops) {
    switch (s.Byte() % 7) {
      case 0:  // connect
        if (conns.size() < kMaxConnections) {
          auto fd = shm::ConnectAbstract(leader->socket_name());
          fuzz::Check(fd.ok(), "connect to the leader");
          conns.push_back(*fd);
        }
        break;
      case 1: {  // raw bytes
        if (conns.empty()) break;
        const int fd = pick(s.Byte());
        uint8_t raw[256];
        const size_t n = s.Byte();
        s.Bytes(raw, n);
        SendAll(fd, raw, n);
        break;
      }
      case 2:  // a message of the protocol
        if (!conns.empty()) SendMessage(pick(s.Byte()), &s);
        break;
      case 3:  // the producer admits whoever joined
        leader->AdmitJoining(leader->next_seq());
        break;
      case 4:  // close
        if (!conns.empty()) {
          auto it = conns.begin() + s.Byte() % conns.size();
          close(*it);
          conns.erase(it);
        }
        break;
      case 5:  // a member writes its entry of the control segment
        MemberWrites(leader, &s);
        break;
      case 6: {  // the producer publishes the next position if a slot is free now
        auto slot = leader->AcquireSlot(0);
        if (slot.ok()) leader->Publish(*slot);
        break;
      }
    }
  }
  for (int fd : conns) close(fd);
  // Every member whose connection closed must be reaped. The control thread reads one
  // message per connection and turn, so one that sent several before closing is reaped a
  // few turns later: each status query is at least one turn, and a script sends at most
  // 64 x 256 bytes, fewer than 1024 messages.
  Result<shm::StatusReply> status = UnavailableError("no status query yet");
  for (int turn = 0; turn < 1024 && (!status.ok() || status->count != 0); ++turn) {
    status = shm::QueryStatus(leader->socket_name(), 60000);
    fuzz::Check(status.ok(), "the leader answers a status query after the script");
  }
  fuzz::Check(!leader->failed(), "a client's bytes never fail the leader's stream");
  fuzz::Check(status->count == 0, "every closed connection's member is reaped");
  return 0;
}
