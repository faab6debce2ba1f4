// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// `batchcast inspect`: placeholder until the reader lands.
#include "cli/commands.h"

namespace batchcast::cli {
void RegisterInspect(CLI::App& app, int* exit_code) {}
}  // namespace batchcast::cli
