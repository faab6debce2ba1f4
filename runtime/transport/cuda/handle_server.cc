// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "transport/cuda/handle_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

#include "core/errors.h"
#include "core/log.h"
#include "transport/shm/control.h"

namespace batchcast::cuda {
namespace {

constexpr uint32_t kHelloMagic = 0x42434748;  // "BCGH"

struct Hello {
  uint32_t magic;
  uint32_t version;
  int32_t pid;
  int32_t reserved;
};

void Reply(int fd, StatusCode code, int lane, const std::string& message) {
  DeviceHandleReply r{};
  r.code = static_cast<int32_t>(code);
  r.lane = lane;
  std::snprintf(r.message, sizeof r.message, "%s", message.c_str());
  (void)shm::SendMessage(fd, &r, sizeof r);  // a consumer that vanished is handled at poll
}

}  // namespace

Result<std::unique_ptr<HandleServer>> HandleServer::Create(const std::string& name,
                                                           const DeviceSlotTable& table) {
  std::unique_ptr<HandleServer> s(new HandleServer(name, table));
  BC_ASSIGN_OR_RETURN(s->listen_fd_, shm::ListenAbstract(name));
  s->stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (s->stop_fd_ < 0) return ErrnoError(errno, "gpu handle server {}: eventfd", name);
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

HandleServer::~HandleServer() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    if (write(stop_fd_, &one, sizeof one) < 0)
      BC_LOG(Warn, Cuda, "gpu handle server {}: cannot wake the loop: {}", name_, strerror(errno));
    thread_.join();
  }
  for (auto& [fd, lane] : conns_) close(fd);
  if (listen_fd_ >= 0) close(listen_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
}

uint32_t HandleServer::LanesInUse() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lanes_;
}

Result<int> HandleServer::ReserveLane() {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t i = 0; i < kMaxGpuLanes; ++i) {
    if (lanes_ & (1u << i)) continue;
    lanes_ |= 1u << i;
    return static_cast<int>(i);
  }
  return ResourceExhaustedError(
      "gpu handle server {}: all {} IPC lanes of this GPU are taken; place fewer trainers per "
      "GPU", name_, kMaxGpuLanes);
}

void HandleServer::ReleaseLane(int lane) {
  std::lock_guard<std::mutex> lock(mu_);
  if (lane >= 0 && lane < int(kMaxGpuLanes)) lanes_ &= ~(1u << lane);
}

void HandleServer::Accept() {
  auto fd = shm::AcceptConnection(listen_fd_);
  if (!fd.ok()) return;
  int c = fd.value();
  auto cred = shm::GetPeerCred(c);
  Hello hello{};
  Status st = shm::RecvMessage(c, &hello, sizeof hello, nullptr, 5000);
  if (!st.ok() || hello.magic != kHelloMagic || hello.version != kDeviceTableVersion) {
    Reply(c, StatusCode::kInvalidArgument, -1,
          fmt::format("gpu handle server {}: bad hello (version mismatch?)", name_));
    close(c);
    return;
  }
  if (!cred.ok() || cred.value().uid != getuid()) {
    Reply(c, StatusCode::kPermissionDenied, -1,
          fmt::format("gpu handle server {}: consumer runs as another user; run it as uid {}",
                      name_, getuid()));
    close(c);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  int lane = -1;
  for (uint32_t i = 0; i < kMaxGpuLanes; ++i)
    if (!(lanes_ & (1u << i))) { lane = static_cast<int>(i); break; }
  if (lane < 0) {
    Reply(c, StatusCode::kResourceExhausted, -1,
          fmt::format("gpu handle server {}: all {} IPC lanes of this GPU are taken; place fewer "
                      "trainers per GPU", name_, kMaxGpuLanes));
    close(c);
    return;
  }
  Reply(c, StatusCode::kOk, lane, "");
  if (!shm::SendMessage(c, &table_, sizeof table_).ok()) {
    close(c);
    return;
  }
  lanes_ |= 1u << lane;
  conns_.emplace_back(c, lane);
  BC_LOG(Debug, Cuda, "gpu handle server {}: pid {} got lane {}", name_, hello.pid, lane);
}

void HandleServer::Loop() {
  for (;;) {
    std::vector<pollfd> fds{{stop_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [fd, lane] : conns_) fds.push_back({fd, POLLIN, 0});
    }
    int n = poll(fds.data(), fds.size(), -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (fds[0].revents & POLLIN)) return;
    if (fds[1].revents & POLLIN) Accept();
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char b;  // consumers never send after the hello: readable means closed
      if (read(fds[i].fd, &b, 1) > 0) continue;
      for (size_t k = 0; k < conns_.size(); ++k) {
        if (conns_[k].first != fds[i].fd) continue;
        lanes_ &= ~(1u << conns_[k].second);
        close(conns_[k].first);
        conns_.erase(conns_.begin() + static_cast<long>(k));
        break;
      }
    }
  }
}

Result<HandleLease> FetchDeviceTable(const std::string& name, int64_t timeout_ms) {
  HandleLease lease;
  auto fd = shm::ConnectAbstract(name);
  if (!fd.ok())
    return fd.status().WithContext("gpu: the leader publishes no device slots (is gpu staging on?)");
  lease.fd = fd.value();
  Hello hello{kHelloMagic, kDeviceTableVersion, static_cast<int32_t>(getpid()), 0};
  DeviceHandleReply reply{};
  Status st = shm::SendMessage(lease.fd, &hello, sizeof hello);
  if (st.ok()) st = shm::RecvMessage(lease.fd, &reply, sizeof reply, nullptr, timeout_ms);
  if (st.ok() && reply.code != 0) st = Status(static_cast<StatusCode>(reply.code), reply.message);
  if (st.ok()) st = shm::RecvMessage(lease.fd, &lease.table, sizeof lease.table, nullptr, timeout_ms);
  if (st.ok() && (lease.table.magic != kDeviceTableMagic ||
                  lease.table.num_slots > kMaxDeviceSlots))
    st = InternalError("gpu: device slot table from {} is malformed", shm::DisplayAddress(name));
  if (!st.ok()) {
    close(lease.fd);
    return st;
  }
  lease.lane = reply.lane;
  return lease;
}

void CloseLease(HandleLease* lease) {
  if (lease->fd >= 0) close(lease->fd);
  lease->fd = -1;
  lease->lane = -1;
}

}  // namespace batchcast::cuda
