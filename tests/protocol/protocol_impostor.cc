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
  // A segment that looks like a leader's: right magic, version and size, running.
  uint64_t slots_off = 0, data_off = 0;
  const uint64_t total = SegmentBytes(2, 4096, &slots_off, &data_off);
  int memfd = memfd_create("impostor", MFD_CLOEXEC);
  if (memfd < 0 || ftruncate(memfd, static_cast<off_t>(total)) != 0) return 4;
  auto* h = static_cast<SegmentHeader*>(
      mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0));
  if (h == MAP_FAILED) return 4;
  h->magic = kSegmentMagic;
  h->version = kSegmentVersion;
  h->num_slots = 2;
  h->slot_bytes = 4096;
  h->slots_offset = slots_off;
  h->data_offset = data_off;
  h->total_bytes = total;
  h->leader_pid = getpid();
  h->leader_uid = uid;
  h->producer_batch = 8;
  h->max_consumer_batch = 8;
  h->epoch_samples = 64;
  h->consumers[0].generation = 1;
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
      r.segment_bytes = total;
      SendMessage(*fd, &r, sizeof(r), memfd).IgnoreError();
    }
    // Keep the connection open (a consumer would take a close as the leader's death).
  }
}
