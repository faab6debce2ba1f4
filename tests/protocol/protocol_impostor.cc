// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// An impostor for the protocol test (issue 14, case 8): another uid that listens on a
// leader's abstract socket name first and answers every join with a segment of its own.
// Started as root, it drops to UID before it listens; prints "ready <pid> <uid>" and
// serves until killed.   protocol_impostor SOCKET UID
#include <grp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "transport/shm/control.h"
#include "transport/shm/segment.h"

using namespace batchcast;
using namespace batchcast::shm;

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const uid_t uid = static_cast<uid_t>(std::atoi(argv[2]));
  if (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0) {
    std::perror("protocol_impostor: setuid");
    return 4;
  }
  auto listen_fd = ListenAbstract(argv[1]);
  if (!listen_fd.ok()) {
    std::printf("listen-error %s\n", listen_fd.status().ToString().c_str());
    return 3;
  }
  // Segments that look like a leader's: right magic, version and sizes, running.
  const SegmentGeometry g = ComputeGeometry(2, 4096);
  int stream_fd = memfd_create("impostor", MFD_CLOEXEC);
  int control_fd = memfd_create("impostor-ctl", MFD_CLOEXEC);
  if (stream_fd < 0 || control_fd < 0 || ftruncate(stream_fd, static_cast<off_t>(g.stream_bytes)) != 0 ||
      ftruncate(control_fd, static_cast<off_t>(g.control_bytes)) != 0)
    return 4;
  auto* h = static_cast<StreamHeader*>(
      mmap(nullptr, g.stream_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, stream_fd, 0));
  auto* c = static_cast<ControlHeader*>(
      mmap(nullptr, g.control_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, control_fd, 0));
  if (h == MAP_FAILED || c == MAP_FAILED) return 4;
  h->magic = kSegmentMagic;
  h->version = kSegmentVersion;
  h->ring_slots = 2;
  h->max_slots = 2;
  h->heartbeat_ms = 10000;
  h->slot_bytes = 4096;
  h->slots_offset = g.slots_offset;
  h->positions_offset = g.positions_offset;
  h->data_offset = g.data_offset;
  h->total_bytes = g.stream_bytes;
  h->control_bytes = g.control_bytes;
  h->leader_pid = getpid();
  h->leader_uid = uid;
  h->producer_batch = 8;
  h->max_consumer_batch = 8;
  h->epoch_samples = 64;
  c->magic = kControlSegmentMagic;
  c->version = kSegmentVersion;
  c->max_slots = 2;
  c->consumers[0].generation = 1;
  std::printf("ready %d %u\n", getpid(), unsigned(uid));
  std::fflush(stdout);
  for (;;) {
    auto fd = AcceptConnection(*listen_fd);
    if (!fd.ok()) continue;
    JoinRequest req{};
    if (RecvMessage(*fd, &req, sizeof(req), nullptr, 2000).ok()) {
      JoinReply r{};
      r.magic = kControlMagic;
      r.version = kProtocolVersion;
      r.type = static_cast<uint32_t>(MessageType::kJoinReply);
      r.code = 0;
      r.consumer_id = 0;
      r.generation = 1;
      r.segment_bytes = g.stream_bytes;
      r.control_bytes = g.control_bytes;
      SendMessage(*fd, &r, sizeof(r), stream_fd, control_fd).IgnoreError();
    }
    // Keep the connection open (a consumer would take a close as the leader's death).
  }
}
