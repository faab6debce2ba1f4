// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// MultiModelTrainer: n TorchScript models trained in one process on one node stream
// (`batchcast train-many`, docs/multi-model.md). Each model has its own consumer (its own
// batch size), optimizer, LR schedule and criterion; the policy orders them; a finished
// model is saved (TorchScript + optimizer state) and released at once; every model is
// checkpointed at each of its epoch ends, can be paused and resumed by name through the
// control file, and a restart continues every model from its checkpoint.
//
// The header is free of LibTorch: only trainer.cc compiles against it.
#pragma once

#include <memory>
#include <string>

#include "batchcast/options.h"
#include "batchcast/status.h"
#include "multimodel/config.h"

namespace batchcast::telemetry {
class Collector;
}

namespace batchcast::multimodel {

struct TrainManyOptions {
  Options stream;         // consumer options; batch_size and epochs are set per model
  std::string address;    // the leader's or service's address
  int torch_threads = 1;  // LibTorch intra-op threads (per process)
  // Resume each model at the stream position of its checkpoint, inside an epoch too (the MPI
  // front door, whose leader starts at the earliest position). Off (train-many against a
  // service): a model checkpointed inside an epoch trains that epoch again from its start;
  // the service would replay the passed position now (issue 34), train-many does not ask yet.
  bool resume_mid_epoch = false;
  // Optional (the `telemetry` option): named series per model (model/NAME/loss, accuracy,
  // step_ms, samples_per_s per step; epoch_loss, epoch_accuracy, lr, peak_rss_mib per epoch)
  // and an annotation line per model epoch (docs/multi-model.md "Telemetry").
  telemetry::Collector* collector = nullptr;
};

class MultiModelTrainer {
 public:
  // Loads every model (or its checkpoint under config.output_dir) and its optimizer state.
  static Result<std::unique_ptr<MultiModelTrainer>> Create(const TrainManyConfig& config,
                                                           const TrainManyOptions& options);
  ~MultiModelTrainer();
  MultiModelTrainer(const MultiModelTrainer&) = delete;
  MultiModelTrainer& operator=(const MultiModelTrainer&) = delete;

  // Sets the stream's address and the telemetry collector after Create (the MPI front door
  // loads the models before its Runtime, and so the leader, exists). Call before Run().
  void SetStream(const std::string& address, telemetry::Collector* collector);
  // Trains every model under the policy; writes output_dir/results.json. Fails with the
  // first model's error (the other models stop at their next batch).
  Status Run();

 private:
  struct Impl;
  explicit MultiModelTrainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace batchcast::multimodel
