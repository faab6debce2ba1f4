// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Status and Result<T>: how every Batchcast function that can fail reports it.
//
// A Status is either OK or carries a code and a message that names the object and
// the cause ("hdf5: dataset 'images' in /data/x.h5 has dtype float32, expected uint8").
// Callers add context with WithContext() and pass it on; nothing in Batchcast throws
// across the public API.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "batchcast/export.h"

namespace batchcast {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,     // a bad option, spec string or parameter
  kNotFound,            // a file, dataset or peer that does not exist
  kIoError,             // a read/write/system call failed
  kCorruptData,         // a damaged image, HDF5 layout or shared-memory record
  kOutOfRange,          // an index or size beyond its bounds (incl. pixel limit)
  kResourceExhausted,   // no free slot / membership entry / memory
  kUnavailable,         // a peer (leader, consumer, rank) is gone
  kFailedPrecondition,  // called in the wrong state
  kPermissionDenied,    // another user's segment, socket or file
  kDeadlineExceeded,    // a bounded wait ran out
  kCancelled,           // interrupted on request (signal, shutdown)
  kEndOfStream,         // the stream ended normally; not an error for iterators
  kInternal,            // a bug: an invariant did not hold
};

BATCHCAST_API const char* StatusCodeName(StatusCode code);

class Status;
namespace internal {
// Result<T>::value() on an error: prints "batchcast: fatal: ..." with the status message
// and the rank (when known) to stderr and aborts. Never returns.
[[noreturn]] BATCHCAST_API void DieOnErrorValue(const Status& status);
}  // namespace internal

class [[nodiscard]] BATCHCAST_API Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  // The message without the code name; empty for OK.
  const std::string& message() const;
  // "<code name>: <message>", or "ok".
  std::string ToString() const;

  // Prefixes the message with "context: ". OK stays OK.
  Status WithContext(std::string_view context) const;

  // Explicitly drops a status (e.g. in cleanup paths that already logged it).
  void IgnoreError() const {}

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;
};

// A value or the Status that explains its absence.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Result built from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  // The value. On an error this prints the status message (and the rank) and aborts, so
  // check ok() first where the error is expected.
  T& value() & {
    CheckValue();
    return std::get<T>(v_);
  }
  const T& value() const& {
    CheckValue();
    return std::get<T>(v_);
  }
  T&& value() && {
    CheckValue();
    return std::get<T>(std::move(v_));
  }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void CheckValue() const {
    if (!ok()) internal::DieOnErrorValue(std::get<Status>(v_));
  }
  std::variant<T, Status> v_;
};

}  // namespace batchcast

#define BC_STATUS_CONCAT_INNER_(a, b) a##b
#define BC_STATUS_CONCAT_(a, b) BC_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define BC_RETURN_IF_ERROR(expr)                      \
  do {                                                \
    ::batchcast::Status bc_status_tmp_ = (expr);      \
    if (!bc_status_tmp_.ok()) return bc_status_tmp_;  \
  } while (0)

// `lhs = value of expr` (a Result<T>) or returns its Status.
#define BC_ASSIGN_OR_RETURN(lhs, expr) \
  BC_ASSIGN_OR_RETURN_IMPL_(BC_STATUS_CONCAT_(bc_result_, __LINE__), lhs, expr)
#define BC_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
