// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "core/hdf5_lock.h"

namespace batchcast {

std::mutex& Hdf5Lock() {
  static std::mutex mu;  // function-local: initialised on first use, never destroyed early
  return mu;
}

}  // namespace batchcast
