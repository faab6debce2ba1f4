// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/shm/control.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string_view>

#include "core/errors.h"
#include "transport/shm/segment.h"

namespace batchcast::shm {
namespace {

Result<socklen_t> MakeAddress(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof(addr->sun_path))
    return InvalidArgumentError("control socket name '{}' must be 1..{} characters", name,
                                sizeof(addr->sun_path) - 2);
  // Abstract namespace: sun_path[0] = '\0', name follows, no terminator.
  std::memcpy(addr->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

}  // namespace

std::string DisplayAddress(const std::string& name) { return "@" + name; }

Result<int> ListenAbstract(const std::string& name) {
  sockaddr_un addr;
  BC_ASSIGN_OR_RETURN(socklen_t len, MakeAddress(name, &addr));
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError(errno, "control socket: socket()");
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    int err = errno;
    close(fd);
    if (err == EADDRINUSE) {
      auto holder = ListenerOf(name);
      std::string who = holder.ok() ? fmt::format("pid {} (uid {}{})", holder->pid, holder->uid,
                                                  holder->uid == getuid() ? ", you" : ", another user")
                                    : std::string("a process that does not answer");
      return MakeError(StatusCode::kResourceExhausted,
                       "control socket {} is already taken by {} on this node: another Batchcast "
                       "leader or service with the same address runs there; stop it "
                       "(`batchcast status {}` shows it) or choose another --job-id / address",
                       DisplayAddress(name), who, DisplayAddress(name));
    }
    return ErrnoError(err, "control socket: bind {}", DisplayAddress(name));
  }
  if (listen(fd, 128) != 0) {
    int err = errno;
    close(fd);
    return ErrnoError(err, "control socket: listen {}", DisplayAddress(name));
  }
  return fd;
}

namespace {
constexpr std::string_view kNoListener = "no Batchcast leader listens on";
}  // namespace

bool NoListener(const Status& st) {
  return st.code() == StatusCode::kUnavailable &&
         st.message().find(kNoListener) != std::string::npos;
}

Result<int> ConnectAbstract(const std::string& name) {
  sockaddr_un addr;
  BC_ASSIGN_OR_RETURN(socklen_t len, MakeAddress(name, &addr));
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError(errno, "control socket: socket()");
  int rc = RetryEintr([&] { return connect(fd, reinterpret_cast<sockaddr*>(&addr), len); });
  if (rc != 0) {
    int err = errno;
    close(fd);
    if (err == ECONNREFUSED || err == ENOENT)
      return MakeError(StatusCode::kUnavailable,
                       "{} {} (is it running on this node, as this user, with the same job id?)",
                       kNoListener, DisplayAddress(name));
    return ErrnoError(err, "control socket: connect {}", DisplayAddress(name));
  }
  return fd;
}

Result<int> AcceptConnection(int listen_fd) {
  int fd = RetryEintr([&] { return accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC); });
  if (fd < 0) return ErrnoError(errno, "control socket: accept");
  return fd;
}

Result<PeerCred> GetPeerCred(int fd) {
  ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return ErrnoError(errno, "control socket: SO_PEERCRED");
  return PeerCred{cred.pid, cred.uid};
}

Result<PeerCred> ListenerOf(const std::string& name) {
  BC_ASSIGN_OR_RETURN(int fd, ConnectAbstract(name));
  auto cred = GetPeerCred(fd);
  close(fd);
  return cred;
}

Status SendMessage(int fd, const void* msg, size_t len, int pass_fd, int pass_fd2) {
  iovec iov{const_cast<void*>(msg), len};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
  const int fds[2] = {pass_fd, pass_fd2};
  const int nfds = pass_fd < 0 ? 0 : (pass_fd2 < 0 ? 1 : 2);
  if (nfds > 0) {
    std::memset(control, 0, sizeof(control));
    mh.msg_control = control;
    mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
    cmsghdr* cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    std::memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
  }
  ssize_t n = RetryEintr([&] { return sendmsg(fd, &mh, MSG_NOSIGNAL); });
  if (n < 0) return ErrnoError(errno, "control socket: send");
  if (static_cast<size_t>(n) != len)
    return IoError("control socket: short send ({} of {} bytes)", n, len);
  return Status::Ok();
}

Status RecvMessage(int fd, void* msg, size_t len, int* received_fd, int64_t timeout_ms,
                   int* received_fd2) {
  if (received_fd) *received_fd = -1;
  if (received_fd2) *received_fd2 = -1;
  if (timeout_ms >= 0) {
    pollfd p{fd, POLLIN, 0};
    int rc = RetryEintr([&] { return poll(&p, 1, static_cast<int>(timeout_ms)); });
    if (rc < 0) return ErrnoError(errno, "control socket: poll");
    if (rc == 0) return DeadlineExceededError("control socket: no reply within {} ms", timeout_ms);
  }
  iovec iov{msg, len};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
  mh.msg_control = control;
  mh.msg_controllen = sizeof(control);
  ssize_t n = RetryEintr([&] { return recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL); });
  if (n < 0) return ErrnoError(errno, "control socket: receive");
  int* wanted[2] = {received_fd, received_fd2};
  int taken = 0;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm != nullptr; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
      const size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int got;
        std::memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
        if (taken < 2 && wanted[taken] != nullptr) *wanted[taken++] = got;
        else close(got);  // never leak a descriptor nobody asked for
      }
    }
  }
  if (n == 0) return UnavailableError("control socket: peer closed the connection");
  if (static_cast<size_t>(n) != len)
    return CorruptDataError("control socket: message of {} bytes, expected {}", n, len);
  return Status::Ok();
}

Status VersionMismatch(uint32_t theirs, const char* peer, const char* self) {
  return FailedPreconditionError(
      "the {} speaks control protocol {}, this {} protocol {}: the consumer and its leader "
      "come from different Batchcast versions. Run both from one installation (rebuild the "
      "trainer against the leader's Batchcast, or restart the leader or service from the "
      "trainer's)", peer, theirs, self, kProtocolVersion);
}

Status RecvMessageNow(int fd, void* msg, size_t len, size_t* received) {
  if (received != nullptr) *received = 0;
  ssize_t n = RetryEintr([&] { return recv(fd, msg, len, MSG_DONTWAIT); });
  if (n > 0 && received != nullptr) *received = static_cast<size_t>(n);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return DeadlineExceededError("control socket: no message ready");
    return ErrnoError(errno, "control socket: receive");
  }
  if (n == 0) return UnavailableError("control socket: peer closed the connection");
  if (static_cast<size_t>(n) != len)
    return CorruptDataError("control socket: message of {} bytes, expected {}", n, len);
  return Status::Ok();
}

static_assert(kMaxStatusGroups == kMaxViewGroups, "a status reply lists every view group");

Result<StatusReply> QueryStatus(const std::string& name, int64_t timeout_ms) {
  BC_ASSIGN_OR_RETURN(int fd, ConnectAbstract(name));
  StatusRequest req{};
  req.magic = kControlMagic;
  req.version = kProtocolVersion;
  req.type = static_cast<uint32_t>(MessageType::kStatus);
  Status st = SendMessage(fd, &req, sizeof(req));
  auto reply = std::make_unique<StatusReply>();
  if (st.ok()) st = RecvMessage(fd, reply.get(), sizeof(StatusReply), nullptr, timeout_ms);
  close(fd);
  if (!st.ok()) return st.WithContext("status of " + DisplayAddress(name));
  if (reply->magic != kControlMagic || reply->type != static_cast<uint32_t>(MessageType::kStatusReply))
    return CorruptDataError("status of {}: malformed reply", DisplayAddress(name));
  reply->message[sizeof(reply->message) - 1] = '\0';
  if (reply->code != 0)
    return Status(static_cast<StatusCode>(reply->code),
                  fmt::format("leader at {} refused the status query: {}", DisplayAddress(name),
                              reply->message));
  if (reply->count > 64) return CorruptDataError("status of {}: {} members", DisplayAddress(name),
                                                 reply->count);
  if (reply->stream.view_groups > kMaxStatusGroups)
    return CorruptDataError("status of {}: {} view groups", DisplayAddress(name),
                            reply->stream.view_groups);
  for (GroupStatus& g : reply->stream.groups) g.view[sizeof(g.view) - 1] = '\0';
  return *reply;
}

}  // namespace batchcast::shm
