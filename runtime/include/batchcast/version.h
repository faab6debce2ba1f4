// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The version of the headers you compile against, and of the library you run with.
// This file is plain C and C++ (batchcast_c.h includes it). The top-level CMakeLists.txt
// reads the three numbers below as the project version: this is the one place to bump it.
//
//   #if BATCHCAST_VERSION_CODE >= BATCHCAST_VERSION_NUMBER(0, 2, 0) ... #endif
//
// The ABI policy (docs/api.md "ABI policy"): the shared library's SONAME is
// libbatchcast.so.MAJOR.MINOR while MAJOR is 0 and libbatchcast.so.MAJOR from 1.0 on; a
// release that keeps the SONAME keeps every exported symbol and every public struct layout
// (scripts/abi_check.py, run by ctest, compares them with abi/libbatchcast.abi).
#ifndef BATCHCAST_VERSION_H_
#define BATCHCAST_VERSION_H_

#define BATCHCAST_VERSION_MAJOR 0
#define BATCHCAST_VERSION_MINOR 4
#define BATCHCAST_VERSION_PATCH 0

#define BATCHCAST_VERSION_NUMBER(major, minor, patch) ((major) * 10000 + (minor) * 100 + (patch))
#define BATCHCAST_VERSION_CODE                                               \
  BATCHCAST_VERSION_NUMBER(BATCHCAST_VERSION_MAJOR, BATCHCAST_VERSION_MINOR, \
                           BATCHCAST_VERSION_PATCH)

#ifdef __cplusplus
#include "batchcast/export.h"

namespace batchcast {

// The version of the library loaded at run time, "MAJOR.MINOR.PATCH" (compare with
// BATCHCAST_VERSION_* to detect a header/library mismatch). The Python module's version().
BATCHCAST_API const char* Version();
// BATCHCAST_VERSION_CODE of the library loaded at run time.
BATCHCAST_API int VersionCode();

}  // namespace batchcast
#endif

#endif  // BATCHCAST_VERSION_H_
