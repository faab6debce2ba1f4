// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The C boundary: Guard() runs an entry point's body, turns its Status into a bc_status_t
// and the thread's last error, and catches every exception (none may cross extern "C").
#pragma once

#include <exception>
#include <new>
#include <string>
#include <vector>

#include "batchcast/batchcast_c.h"
#include "batchcast/status.h"
#include "capi/struct_io.h"

namespace batchcast::capi {

// "--a 1 --b" -> {"--a", "1", "--b"}: an options string split at whitespace.
std::vector<std::string> SplitWords(const char* text);

// The thread's last error message (bc_last_error()).
const char* LastError();
// Sets it and returns `code`.
bc_status_t Fail(bc_status_t code, std::string message);

inline bc_status_t FromStatus(const Status& s) {
  if (s.ok()) return BC_SUCCESS;
  if (s.code() == StatusCode::kEndOfStream) return Fail(BC_END_OF_STREAM, "");
  if (IsUnsupported(s)) return Fail(BC_ERR_UNSUPPORTED, s.message());
  return Fail(static_cast<bc_status_t>(s.code()), s.message());
}

template <typename F>
bc_status_t Guard(const char* function, F&& body) {
  try {
    return FromStatus(body());
  } catch (const std::bad_alloc&) {
    return Fail(BC_ERR_RESOURCE_EXHAUSTED, std::string(function) + ": out of memory");
  } catch (const std::exception& e) {
    return Fail(BC_ERR_INTERNAL, std::string(function) + ": internal error: " + e.what());
  } catch (...) {
    return Fail(BC_ERR_INTERNAL, std::string(function) + ": internal error: unknown exception");
  }
}

}  // namespace batchcast::capi
