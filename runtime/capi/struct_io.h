// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Size-prefixed structs of the C API (batchcast_c.h): each starts with `struct_size`, the
// size the caller's header knows. In: a smaller struct than the first version is refused; a
// larger one (a newer header) is accepted when every byte this library does not know is 0.
// Out: only the bytes the caller's struct has are written; bytes beyond this library's
// struct are zeroed, which newer fields read as "not provided".
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "batchcast/batchcast_c.h"
#include "batchcast/status.h"

namespace batchcast::capi {

// The sizes of the first version (0.1) of each struct on LP64: a struct may only grow.
template <typename T>
constexpr size_t kFirstSize = 0;
template <>
inline constexpr size_t kFirstSize<bc_consumer_config_t> = 72;
template <>
inline constexpr size_t kFirstSize<bc_leader_config_t> = 40;
template <>
inline constexpr size_t kFirstSize<bc_batch_info_t> = 184;
template <>
inline constexpr size_t kFirstSize<bc_position_t> = 32;
template <>
inline constexpr size_t kFirstSize<bc_ragged_t> = 80;
static_assert(sizeof(void*) != 8 || sizeof(bc_consumer_config_t) >= 72);
static_assert(sizeof(void*) != 8 || sizeof(bc_leader_config_t) >= 40);
static_assert(sizeof(void*) != 8 || sizeof(bc_batch_info_t) >= 184);
static_assert(sizeof(void*) != 8 || sizeof(bc_position_t) >= 32);
static_assert(sizeof(void*) != 8 || sizeof(bc_ragged_t) >= 80);

// A field or feature this library cannot honour: BC_ERR_UNSUPPORTED in C (Guard() maps the
// "unsupported: " prefix, which also tells a reader of the message what happened).
inline Status Unsupported(const std::string& message) {
  return Status(StatusCode::kInvalidArgument, "unsupported: " + message);
}
inline bool IsUnsupported(const Status& s) {
  return s.code() == StatusCode::kInvalidArgument && s.message().rfind("unsupported: ", 0) == 0;
}

// "bc_consumer_config_t" -> "bc_consumer_config_init".
inline std::string InitFunction(const std::string& type) {
  return type.substr(0, type.size() - 2) + "_init";
}

template <typename T>
Status CheckStructSize(const char* name, const T* user) {
  if (user == nullptr) return Status(StatusCode::kInvalidArgument, std::string(name) + " is NULL");
  size_t first = sizeof(void*) == 8 ? kFirstSize<T> : sizeof(T);
  if (user->struct_size < first) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(name) + ".struct_size is " + std::to_string(user->struct_size) +
                      ", smaller than any version of it (" + std::to_string(first) +
                      "): initialise it with " + InitFunction(name) + "()");
  }
  return Status::Ok();
}

// Copies the caller's struct into `out` (already initialised with defaults).
template <typename T>
Status StructIn(const char* name, const T* user, T* out) {
  BC_RETURN_IF_ERROR(CheckStructSize(name, user));
  const auto* bytes = reinterpret_cast<const unsigned char*>(user);
  for (size_t i = sizeof(T); i < user->struct_size; ++i) {
    if (bytes[i] != 0) {
      return Unsupported(std::string(name) + " sets a field at byte " +
                        std::to_string(i) + " that this library (" + Version() +
                        ") does not know: use the library your header comes from");
    }
  }
  std::memcpy(out, user, std::min(sizeof(T), user->struct_size));
  out->struct_size = sizeof(T);
  return Status::Ok();
}

// Writes `full` into the caller's struct, as far as it reaches.
template <typename T>
void StructOut(const T& full, T* user) {
  size_t user_size = user->struct_size;
  size_t n = std::min(sizeof(T), user_size);
  std::memcpy(user, &full, n);
  if (user_size > sizeof(T)) {
    std::memset(reinterpret_cast<unsigned char*>(user) + sizeof(T), 0, user_size - sizeof(T));
  }
  user->struct_size = user_size;
}

}  // namespace batchcast::capi
