// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Internal helpers that build a Status with an fmt-style message, and the one
// place where errno becomes a Status.
#pragma once

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "batchcast/status.h"

namespace batchcast {

template <typename... Args>
Status MakeError(StatusCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}

#define BC_DEFINE_ERROR_(Name, Code)                                          \
  template <typename... Args>                                                 \
  Status Name(fmt::format_string<Args...> f, Args&&... args) {                \
    return Status(StatusCode::Code, fmt::format(f, std::forward<Args>(args)...)); \
  }
BC_DEFINE_ERROR_(InvalidArgumentError, kInvalidArgument)
BC_DEFINE_ERROR_(NotFoundError, kNotFound)
BC_DEFINE_ERROR_(IoError, kIoError)
BC_DEFINE_ERROR_(CorruptDataError, kCorruptData)
BC_DEFINE_ERROR_(OutOfRangeError, kOutOfRange)
BC_DEFINE_ERROR_(ResourceExhaustedError, kResourceExhausted)
BC_DEFINE_ERROR_(UnavailableError, kUnavailable)
BC_DEFINE_ERROR_(FailedPreconditionError, kFailedPrecondition)
BC_DEFINE_ERROR_(PermissionDeniedError, kPermissionDenied)
BC_DEFINE_ERROR_(DeadlineExceededError, kDeadlineExceeded)
BC_DEFINE_ERROR_(CancelledError, kCancelled)
BC_DEFINE_ERROR_(InternalError, kInternal)
#undef BC_DEFINE_ERROR_

inline StatusCode CodeFromErrno(int err) {
  switch (err) {
    case ENOENT: return StatusCode::kNotFound;
    case EACCES:
    case EPERM: return StatusCode::kPermissionDenied;
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE: return StatusCode::kResourceExhausted;
    case EINVAL: return StatusCode::kInvalidArgument;
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE: return StatusCode::kUnavailable;
    case ETIMEDOUT: return StatusCode::kDeadlineExceeded;
    default: return StatusCode::kIoError;
  }
}

// "<what>: <strerror(err)> (errno N)". The single errno → Status conversion.
template <typename... Args>
Status ErrnoError(int err, fmt::format_string<Args...> f, Args&&... args) {
  return Status(CodeFromErrno(err), fmt::format("{}: {} (errno {})",
                                                fmt::format(f, std::forward<Args>(args)...),
                                                std::strerror(err), err));
}

// Retries a system call while it fails with EINTR.
template <typename F>
auto RetryEintr(F&& f) -> decltype(f()) {
  decltype(f()) rc;
  do {
    rc = f();
  } while (rc == -1 && errno == EINTR);
  return rc;
}

}  // namespace batchcast
