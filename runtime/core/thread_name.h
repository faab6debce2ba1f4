// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Names for the threads Batchcast starts (`bc-decode-0`, `bc-ctl`, `bc-leader`, ...), so that
// `top -H`, perf and gdb show what each one is. Linux keeps 15 characters.
#pragma once

#include <string>

namespace batchcast {

// Names the calling thread; a name over 15 characters is cut (never an error).
void NameThread(const std::string& name);

}  // namespace batchcast
