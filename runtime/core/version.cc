// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "batchcast/version.h"

#define BC_VERSION_STR_(x) #x
#define BC_VERSION_STR(x) BC_VERSION_STR_(x)

namespace batchcast {

const char* Version() {
  return BC_VERSION_STR(BATCHCAST_VERSION_MAJOR) "." BC_VERSION_STR(
      BATCHCAST_VERSION_MINOR) "." BC_VERSION_STR(BATCHCAST_VERSION_PATCH);
}

int VersionCode() { return BATCHCAST_VERSION_CODE; }

}  // namespace batchcast
