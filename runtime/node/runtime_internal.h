// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Runtime-internal hooks into the MPI Runtime (not part of the public API): front doors
// whose trainer rank attaches its own consumers to the node leader (`batchcast train-many`
// under mpirun: one consumer per model, docs/multi-model.md "Under mpirun").
#pragma once

#include <memory>
#include <string>

#include "batchcast/runtime.h"

namespace batchcast::telemetry {
class Collector;
}

namespace batchcast::internal {

struct RuntimeAccess {
  // Runtime::Create, except that each trainer rank attaches `consumers` consumers itself
  // (to Address(), with batch sizes up to options.batch_size and epochs up to
  // options.epochs) instead of receiving consumer(): the node leader waits for that many
  // joins before its first batch. Collective like Create; `consumers` >= 1 on trainers.
  static Result<std::unique_ptr<Runtime>> CreateWithOwnConsumers(const Options& options,
                                                                 MPI_Comm comm, int consumers);
  // The node leader's address (trainers and leaders).
  static const std::string& Address(const Runtime& runtime);
  // This rank's telemetry collector (null when the `telemetry` option is off); Finalize()
  // writes it with every other rank's.
  static telemetry::Collector* Collector(const Runtime& runtime);
};

}  // namespace batchcast::internal
