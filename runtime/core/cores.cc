// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "core/cores.h"

#include <sched.h>
#include <unistd.h>

namespace batchcast {

int AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace batchcast
