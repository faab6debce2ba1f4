// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Why a producer was told to stop (producer::Producer::Abort: a trainer
// died, the job failed to start, the front door closed it). The producer's loop polls the
// flag; the status it returns names the first reason, so the front door that reports the
// failure reports its cause (it said only "leader: aborted", and the cause was printed by the
// ring's log line alone).
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <string_view>

#include "batchcast/status.h"
#include "core/errors.h"

namespace batchcast::producer {

class AbortReason {
 public:
  // The first reason is kept; later ones only confirm the stop.
  void Set(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (why_.empty()) why_ = why;
    }
    flag_.store(true);
  }
  bool set() const { return flag_.load(); }
  const std::atomic<bool>& flag() const { return flag_; }
  // "<who>: aborted: <first reason>" (kCancelled).
  Status Error(std::string_view who) const {
    std::lock_guard<std::mutex> lock(mu_);
    return CancelledError("{}: aborted: {}", who, why_.empty() ? "no reason given" : why_);
  }

 private:
  mutable std::mutex mu_;
  std::string why_;
  std::atomic<bool> flag_{false};
};

}  // namespace batchcast::producer
