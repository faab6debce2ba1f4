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
// 2: two segments, drain, member messages carry a position. 3: a join carries the consumer's
// resume point (a service replays what its stream has passed); the join reply names the
// leader's features; the status reply counts resume replays. 4: a join may carry the consumer
// flag kLoopHoldsBatch (the pool reserves the batch a Python `for` loop holds). 5: a join
// carries the consumer's view spec; the join reply names its view group (docs/pipeline.md
// "Views through the Producer") and, from a leader without kLeaderReplaysResume, why it
// cannot replay a passed position; the status reply carries view groups and late joiners'
// catch-ups (StreamStatus).
constexpr uint32_t kProtocolVersion = 5;
// The header every message starts with (magic, version, type): a peer of another protocol
// version is recognised by it, whatever the size of the rest.
constexpr size_t kMessageHeaderBytes = 3 * sizeof(uint32_t);

enum class MessageType : uint32_t {
  kJoin = 1,
  kJoinReply = 2,
  kLeave = 3,
  kStatus = 4,       // a status query (`batchcast status`): a JoinRequest-sized message
  kStatusReply = 5,
  kDrain = 6,        // the member is done: stop addressing it; it keeps what it holds
};

// Room for a view spec in a join (NUL included).
constexpr uint32_t kViewSpecBytes = 256;

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
  // Resume point (Consumer options start_epoch / start_batch): with `resumes` = 1 the
  // consumer's first batch is sample `resume_sample` of epoch `resume_epoch` (in the epoch's
  // global order: start_batch x batch_size x world). A leader whose stream has passed it
  // and that can replay (kLeaderReplaysResume) replays the rest of that epoch to it alone.
  uint32_t resumes;  // 0 or 1
  uint32_t reserved;
  uint64_t resume_epoch;
  uint64_t resume_sample;
  // The consumer's view (Options::view): spec text "view(size=160,...)" over the leader's
  // view, NUL-terminated; empty = the leader's own view (group 0). The leader parses it.
  char view[kViewSpecBytes];
};

// JoinReply::features: what the leader does beyond the protocol's minimum.
enum LeaderFeature : uint32_t {
  kLeaderReplaysResume = 1,  // a joiner resuming behind the stream gets its epoch replayed
};

struct JoinReply {
  uint32_t magic;
  uint32_t version;
  uint32_t type;  // kJoinReply
  int32_t code;   // StatusCode; 0 = accepted: the stream and control memfds are attached
  uint32_t consumer_id;
  uint32_t features;  // LeaderFeature bits
  uint64_t generation;
  uint64_t segment_bytes;  // the stream segment
  uint64_t control_bytes;  // the control segment
  // The consumer's view group (SlotDesc::groups; 0: the leader's view) and its view key
  // (SlotDesc GroupDesc::view_key); on success `message` holds the view's canonical spec.
  uint32_t group;
  uint32_t reserved;
  uint64_t view_key;
  char message[512];
  // Accepted by a leader without kLeaderReplaysResume: why it cannot replay a passed position
  // and what to do (the consumer's refusal of such a resume names it).
  char resume_refusal[256];
};

// What a joined member sends: kLeave (it is gone: free everything it holds) or kDrain
// (stop addressing it from `position` on; the slots it holds stay until it releases them).
struct MemberMessage {
  uint32_t magic;
  uint32_t version;
  uint32_t type;
  uint32_t reserved;
  uint64_t position;  // kDrain: the next position it would have acquired
};
using LeaveRequest = MemberMessage;

// --- status query (`batchcast status`, docs/service.md) ---
// A new connection sends either a JoinRequest or a StatusRequest (same size, so the
// leader reads one fixed-size message either way); the leader answers a status request
// from its membership table with one StatusReply and closes the connection.
struct StatusRequest {
  uint32_t magic;
  uint32_t version;
  uint32_t type;  // kStatus
  uint8_t pad[sizeof(JoinRequest) - 3 * sizeof(uint32_t)];
};
static_assert(sizeof(StatusRequest) == sizeof(JoinRequest));

struct MemberStatus {
  uint32_t id;
  uint32_t state;        // MemberState
  int32_t pid;
  int32_t rank;
  uint32_t batch_size;
  uint32_t buffer_depth;
  uint64_t start_seq;    // first position it receives (~0: not admitted yet)
  uint64_t position;     // next position it will acquire
  uint64_t batches;      // consumer batches taken
  uint64_t wait_ns;      // time blocked waiting for data
  int64_t attached_ns;   // time since its join
  int64_t silent_ns;     // time since its last heartbeat
  uint32_t group;        // its view group (StreamStatus::groups; 0: the leader's view)
  uint32_t reserved;
  char name[32];
};

// One view group a leader serves (docs/pipeline.md "Views through the Producer").
struct GroupStatus {
  uint32_t group;        // its index (0: the leader's own view)
  uint32_t image_size;   // its images' size now (a view's schedule at the epoch being made;
                         // 0 for the leader's own group, whose size is each batch's)
  uint64_t view_key;     // core::ViewKey of its view
  uint64_t slot_bytes;   // its region of every slot (group 0: the leader's images, 0 here)
  char view[232];        // its canonical spec, NUL-terminated (cut to fit)
};
inline constexpr uint32_t kMaxStatusGroups = 16;  // == kMaxViewGroups (segment.h)

// What the leader's owner (producer::Producer) adds to a status reply.
struct StreamStatus {
  uint64_t epoch;             // epoch being produced
  uint64_t batch_in_epoch;    // next producer batch of that epoch
  uint64_t batches_in_epoch;
  uint64_t producer_batches;  // produced since start (replays included)
  uint64_t replayed_batches;  // late-join replays
  uint32_t idle;              // 1: nobody attached, decoding paused
  uint32_t resume_replays;    // resuming consumers whose epoch was replayed to them alone
  uint64_t resume_replayed_batches;  // producer batches decoded for them alone
  // View groups: the groups served now (entries used in groups[]; 1 = the leader's view
  // alone), views_max, and the image room per slot beyond the leader's own images
  // (view_bytes: total and held by the groups).
  uint32_t view_groups;
  uint32_t views_max;
  uint64_t view_room_bytes, view_room_used_bytes;
  GroupStatus groups[kMaxStatusGroups];
  // Late joiners after the window (option late_join_catch_ups, docs/service.md): member bits
  // of the consumers receiving their own epoch now (catching up), and of the joiners waiting
  // for the next epoch because that many were catching up already (deferred).
  uint64_t catching_up;
  uint64_t catch_up_deferred;
  uint32_t catch_ups;          // late joiners caught up so far
  uint32_t catch_up_limit;     // late_join_catch_ups (0: joiners after the window wait)
  uint64_t catch_up_deferrals;  // joiners deferred to the next epoch by the limit so far
};

struct StatusReply {
  uint32_t magic;
  uint32_t version;
  uint32_t type;  // kStatusReply
  int32_t code;   // StatusCode; 0 = ok
  int32_t leader_pid;
  uint32_t count;            // entries used in members[]
  uint32_t stream_state;     // StreamState
  uint32_t num_slots;
  uint64_t published;        // positions [0, published) are out
  uint32_t occupied_slots;
  uint32_t heartbeat_ms;
  StreamStatus stream;
  char message[256];
  MemberStatus members[64];  // kMaxConsumers
};

// Socket address text as shown to users: "@name" for the abstract namespace.
std::string DisplayAddress(const std::string& name);

Result<int> ListenAbstract(const std::string& name);
Result<int> ConnectAbstract(const std::string& name);
// Whether `st` is ConnectAbstract's "nothing listens there" (ECONNREFUSED, ENOENT): the one
// failure worth retrying while a leader may still be starting (Consumer connect_timeout).
bool NoListener(const Status& st);
Result<int> AcceptConnection(int listen_fd);

// Peer credentials of a connected Unix socket.
struct PeerCred {
  pid_t pid;
  uid_t uid;
};
Result<PeerCred> GetPeerCred(int fd);
// Who listens on the abstract socket `name` (connects and reads the listener's
// credentials): for "the name is taken by uid U, pid P" messages.
Result<PeerCred> ListenerOf(const std::string& name);

// Sends/receives exactly one fixed-size message, optionally with one or two file
// descriptors (SCM_RIGHTS).
Status SendMessage(int fd, const void* msg, size_t len, int pass_fd = -1, int pass_fd2 = -1);
// Returns kUnavailable on orderly close by the peer.
Status RecvMessage(int fd, void* msg, size_t len, int* received_fd = nullptr,
                   int64_t timeout_ms = -1, int* received_fd2 = nullptr);
// Receives one fixed-size message that must already be complete (the leader's control
// thread: a short or partial message is rejected at once instead of blocking the thread
// that serves every consumer). kUnavailable on close, kCorruptData on a short message,
// kDeadlineExceeded when nothing is readable yet. *received (optional) gets the bytes read.
Status RecvMessageNow(int fd, void* msg, size_t len, size_t* received = nullptr);
// The refusal for a message of another protocol version (its header read): names both
// versions (the `peer`'s and this `self`'s, e.g. "consumer", "leader") and what to do.
Status VersionMismatch(uint32_t theirs, const char* peer, const char* self);

// Asks the leader at `name` for its status (`batchcast status`).
Result<StatusReply> QueryStatus(const std::string& name, int64_t timeout_ms);

}  // namespace batchcast::shm
