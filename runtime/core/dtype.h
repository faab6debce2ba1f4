// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The element types of batch tensors (batchcast::DType codes) in one table: size, name and
// DLPack type code, used by the slot layout, the consumer views and every tensor export
// (C API, Python, GPU). DLPack codes are written as numbers so that this header does not
// need dlpack.h: kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4 (DLPack 0.6 and 1.0).
#pragma once

#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

namespace batchcast::core {

struct DTypeInfo {
  uint32_t code;       // batchcast::DType
  const char* name;    // as numpy / torch spell it
  uint8_t bytes;
  uint8_t dl_code;     // DLDataTypeCode
  uint8_t dl_bits;
};

inline constexpr DTypeInfo kDTypes[] = {
    {0, "uint8", 1, 1, 8},     {1, "float32", 4, 2, 32}, {2, "int64", 8, 0, 64},
    {3, "float16", 2, 2, 16},  {4, "int32", 4, 0, 32},   {5, "float64", 8, 2, 64},
    {6, "bool", 1, 1, 8},      {7, "int8", 1, 0, 8},     {8, "int16", 2, 0, 16},
    {9, "bfloat16", 2, 4, 16},
};

// The entry of a DType code; nullptr for a code this build does not know.
inline const DTypeInfo* DTypeInfoOf(uint32_t code) {
  return code < std::size(kDTypes) ? &kDTypes[code] : nullptr;
}
// The entry named `name` ("float32", "int64", ...); nullptr when none is.
inline const DTypeInfo* DTypeNamed(std::string_view name) {
  for (const DTypeInfo& t : kDTypes)
    if (name == t.name) return &t;
  return nullptr;
}
// The names of every DType, for messages: "uint8, float32, ...".
inline std::string DTypeNames() {
  std::string out;
  for (const DTypeInfo& t : kDTypes) out += (out.empty() ? "" : ", ") + std::string(t.name);
  return out;
}

}  // namespace batchcast::core
