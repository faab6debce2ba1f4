// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The order in which train-many runs its models (docs/multi-model.md "Policies"). Pure
// logic over the configuration, tested without LibTorch or a leader.
//
// Every sequential policy is non-preemptive at epoch granularity: a turn is (model, epochs)
// and a model's epoch is always one whole stream epoch (it joins at the next epoch start,
// sees every sample once, then leaves or goes on). concurrent has no turns: every model
// runs all its epochs at once, each on its own consumer.
#pragma once

#include <cstdint>
#include <vector>

#include "multimodel/config.h"

namespace batchcast::multimodel {

struct Turn {
  int model = 0;   // index into TrainManyConfig::models
  int epochs = 0;  // epochs to train in this turn, back to back
};

// The turns of a sequential policy, given each model's parameter count (sjf by params) and
// the epochs it has left (epochs - epochs done by an earlier run; 0: finished, no turn).
//   fcfs         models in file order, each all its epochs
//   priority     higher priority first; models of equal priority take one epoch each in
//                turn (round-robin) until each is done
//   sjf          fewest parameters (or fewest epochs, sjf_by) first, all epochs each; ties
//                in file order
//   round-robin  one epoch per model in file order, cycling until all are done
// concurrent has no turns (an empty plan).
std::vector<Turn> PlanTurns(const TrainManyConfig& config, const std::vector<int64_t>& params,
                            const std::vector<int>& epochs_left);

}  // namespace batchcast::multimodel
