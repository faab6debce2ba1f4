// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The node-local control channel: a Unix stream socket in the abstract namespace
// (no file to leave behind; scoped to the network namespace, i.e. the node). Consumers
// join and leave through it; the leader answers a join with the segment's memfd
// (SCM_RIGHTS). A closed connection is how the leader learns that a consumer died, and
// how a consumer learns that the leader died. Every message is fixed-size and validated.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "batchcast/status.h"

namespace batchcast::shm {

constexpr uint32_t kControlMagic = 0x42434331;  // "BCC1"
constexpr uint32_t kProtocolVersion = 1;

enum class MessageType : uint32_t { kJoin = 1, kJoinReply = 2, kLeave = 3 };

struct JoinRequest {
  uint32_t magic;
  uint32_t version;
  uint32_t type;  // kJoin
  int32_t pid;
  int32_t rank;
  uint32_t batch_size;
  uint32_t buffer_depth;
  uint32_t flags;  // ConsumerFlags
  uint64_t order_seed;
  char name[32];
};

struct JoinReply {
  uint32_t magic;
  uint32_t version;
  uint32_t type;  // kJoinReply
  int32_t code;   // StatusCode; 0 = accepted, the memfd is attached
  uint32_t consumer_id;
  uint32_t reserved;
  uint64_t generation;
  uint64_t segment_bytes;
  char message[256];
};

struct LeaveRequest {
  uint32_t magic;
  uint32_t version;
  uint32_t type;  // kLeave
  uint32_t reserved;
};

// Socket address text as shown to users: "@name" for the abstract namespace.
std::string DisplayAddress(const std::string& name);

Result<int> ListenAbstract(const std::string& name);
Result<int> ConnectAbstract(const std::string& name);
Result<int> AcceptConnection(int listen_fd);

// Peer credentials of a connected Unix socket.
struct PeerCred {
  pid_t pid;
  uid_t uid;
};
Result<PeerCred> GetPeerCred(int fd);

// Sends/receives exactly one fixed-size message, optionally with one file descriptor.
Status SendMessage(int fd, const void* msg, size_t len, int pass_fd = -1);
// Returns kUnavailable on orderly close by the peer.
Status RecvMessage(int fd, void* msg, size_t len, int* received_fd = nullptr,
                   int64_t timeout_ms = -1);

}  // namespace batchcast::shm
