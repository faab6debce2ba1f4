// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "batchcast/status.h"

#include <cstdio>
#include <cstdlib>

#include "core/environment.h"
#include "core/log.h"

namespace batchcast {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kIoError: return "i/o error";
    case StatusCode::kCorruptData: return "corrupt data";
    case StatusCode::kOutOfRange: return "out of range";
    case StatusCode::kResourceExhausted: return "resource exhausted";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kFailedPrecondition: return "failed precondition";
    case StatusCode::kPermissionDenied: return "permission denied";
    case StatusCode::kDeadlineExceeded: return "deadline exceeded";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kEndOfStream: return "end of stream";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown";
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) rep_ = std::make_shared<Rep>(Rep{code, std::move(message)});
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(StatusCodeName(rep_->code)) + ": " + rep_->message;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += rep_->message;
  return Status(rep_->code, std::move(msg));
}

namespace internal {

namespace {
// The rank Runtime::Create set, else the launcher's (batchcast-run, mpirun, srun), else -1.
int KnownRank() {
  int rank = log::Rank();
  return rank >= 0 ? rank : env::LauncherRank();
}
}  // namespace

void DieOnErrorValue(const Status& status) {
  int rank = KnownRank();
  std::string where = rank >= 0 ? " (rank " + std::to_string(rank) + ")" : "";
  std::fprintf(stderr,
               "batchcast: fatal%s: Result::value() on an error: %s\n"
               "batchcast: check ok() (or use BC_ASSIGN_OR_RETURN) where this error can happen\n",
               where.c_str(), status.ToString().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace internal

}  // namespace batchcast
