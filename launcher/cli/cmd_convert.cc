// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// `batchcast convert`: placeholder until the converters land.
#include "cli/commands.h"

namespace batchcast::cli {
void RegisterConvert(CLI::App& app, int* exit_code) {}
}  // namespace batchcast::cli
