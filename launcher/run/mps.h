// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The CUDA MPS control daemon for one node: started by the node's leader task before any
// trainer starts (trainers wait for the leader's socket, which is created after it) and
// stopped when the leader task ends. Trainers get CUDA_MPS_PIPE_DIRECTORY to find it.
#pragma once

#include <string>

#include "batchcast/status.h"

namespace batchcast::run {

class MpsDaemon {
 public:
  // `control` is the nvidia-cuda-mps-control binary ("" = look on PATH).
  MpsDaemon(std::string control, std::string pipe_dir);
  ~MpsDaemon();  // stops the daemon if Start() succeeded
  MpsDaemon(const MpsDaemon&) = delete;
  MpsDaemon& operator=(const MpsDaemon&) = delete;

  [[nodiscard]] Status Start();
  [[nodiscard]] Status Stop();
  std::string log_dir() const { return pipe_dir_ + "-log"; }

 private:
  std::string Env() const;
  std::string control_;
  std::string pipe_dir_;
  bool running_ = false;
};

}  // namespace batchcast::run
