// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Hands the device slot table to consumers on the same node and assigns each one a
// release lane. An abstract Unix socket "<leader address>.gpu" with an SO_PEERCRED
// check (same uid as the leader), like the host control socket. A consumer keeps its
// connection open while it maps the slots; the lane is free again when it closes (a
// crashed consumer's lane is reclaimed the same way). Plain sockets: built in both builds.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "batchcast/status.h"
#include "transport/cuda/device_handles.h"

namespace batchcast::cuda {

class HandleServer {
 public:
  static Result<std::unique_ptr<HandleServer>> Create(const std::string& name,
                                                      const DeviceSlotTable& table);
  ~HandleServer();
  HandleServer(const HandleServer&) = delete;
  HandleServer& operator=(const HandleServer&) = delete;

  const std::string& name() const { return name_; }
  // Lanes currently held by a connected consumer (bit i = lane i).
  uint32_t LanesInUse() const;
  // A lane for a consumer in the server's own process (it maps the ring directly, see
  // DeviceMap::OpenLocal); held until ReleaseLane. kResourceExhausted when all are taken.
  Result<int> ReserveLane();
  void ReleaseLane(int lane);

 private:
  HandleServer(const std::string& name, const DeviceSlotTable& table) : name_(name), table_(table) {}
  void Loop();
  void Accept();

  std::string name_;
  DeviceSlotTable table_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  mutable std::mutex mu_;
  std::vector<std::pair<int, int>> conns_;  // (fd, lane)
  uint32_t lanes_ = 0;
  std::thread thread_;
};

// Consumer side: connects to `name`, receives the table and a lane. The returned fd
// must stay open while the lane is in use; closing it frees the lane.
struct HandleLease {
  int fd = -1;
  int lane = -1;
  DeviceSlotTable table{};
};
Result<HandleLease> FetchDeviceTable(const std::string& name, int64_t timeout_ms);
void CloseLease(HandleLease* lease);

}  // namespace batchcast::cuda
