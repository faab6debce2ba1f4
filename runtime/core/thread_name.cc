// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "core/thread_name.h"

#include <pthread.h>

namespace batchcast {

void NameThread(const std::string& name) {
  // pthread_setname_np fails with ERANGE past 15 characters: cut instead.
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace batchcast
