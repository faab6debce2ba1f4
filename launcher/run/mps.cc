// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "run/mps.h"

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>

#include "core/errors.h"
#include "core/log.h"

namespace batchcast::run {
namespace {

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

int RunShell(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  if (rc == -1) return -1;
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

}  // namespace

MpsDaemon::MpsDaemon(std::string control, std::string pipe_dir)
    : control_(control.empty() ? "nvidia-cuda-mps-control" : std::move(control)),
      pipe_dir_(std::move(pipe_dir)) {}

MpsDaemon::~MpsDaemon() {
  if (!running_) return;
  Status st = Stop();
  if (!st.ok()) BC_LOG(Warn, Init, "batchcast-run: {}", st.message());
}

std::string MpsDaemon::Env() const {
  return "CUDA_MPS_PIPE_DIRECTORY=" + Quote(pipe_dir_) +
         " CUDA_MPS_LOG_DIRECTORY=" + Quote(log_dir());
}

Status MpsDaemon::Start() {
  std::error_code ec;
  for (const std::string& d : {pipe_dir_, log_dir()}) {
    std::filesystem::create_directories(d, ec);
    if (ec)
      return IoError("mps: cannot create {}: {}; check that /tmp is writable", d, ec.message());
  }
  std::string cmd = Env() + " " + Quote(control_) + " -d";
  int rc = RunShell(cmd);
  if (rc != 0)
    return UnavailableError(
        "mps: '{}' failed with status {}; is the CUDA MPS control daemon installed and are the "
        "GPUs in a compute mode that allows it? (log: {})",
        cmd, rc, log_dir());
  running_ = true;
  BC_LOG(Info, Init, "batchcast-run: started the MPS control daemon (pipe directory {})",
         pipe_dir_);
  return Status::Ok();
}

Status MpsDaemon::Stop() {
  if (!running_) return Status::Ok();
  running_ = false;
  std::string cmd = "echo quit | " + Env() + " " + Quote(control_);
  int rc = RunShell(cmd);
  if (rc != 0)
    return UnavailableError("mps: stopping the daemon with '{}' failed with status {}", cmd, rc);
  std::error_code ec;
  std::filesystem::remove_all(pipe_dir_, ec);
  std::filesystem::remove_all(log_dir(), ec);  // kept above when quitting failed, for its log
  return Status::Ok();
}

}  // namespace batchcast::run
