// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The train-many configuration (docs/multi-model.md): n TorchScript models and their
// per-model settings, from one JSON file. Parsing is strict: an unknown key is an error
// with a "did you mean" hint, a bad value names the model, the key and what is allowed,
// and a missing model file is reported before anything attaches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "batchcast/status.h"

namespace batchcast::multimodel {

enum class Optimizer { kSgd, kAdam, kAdamW };
enum class LrSchedule { kNone, kStep, kCosine };
enum class Criterion { kCrossEntropy, kNll };
enum class Policy { kConcurrent, kFcfs, kPriority, kSjf, kRoundRobin };
enum class SjfBy { kParams, kEpochs };

struct ModelSpec {
  std::string name;  // unique; names the output directory and the control-file line
  std::string path;  // the TorchScript .pt file (absolute after parsing)
  double lr = 0.01;
  int batch_size = 64;  // this model's consumer batch size on the node stream
  Optimizer optimizer = Optimizer::kSgd;
  double momentum = 0.9;  // SGD only
  double weight_decay = 0.0;
  LrSchedule schedule = LrSchedule::kNone;
  int step_size = 1;     // step: epochs between decays
  double gamma = 0.1;    // step: decay factor
  double eta_min = 0.0;  // cosine: the last learning rate
  Criterion criterion = Criterion::kCrossEntropy;
  int epochs = 1;
  int priority = 0;  // priority policy: higher first, ties round-robin
};

struct TrainManyConfig {
  Policy policy = Policy::kConcurrent;
  SjfBy sjf_by = SjfBy::kParams;
  std::string output_dir;        // checkpoints, final models, events.jsonl, results.json
  std::string control_file;      // pause/resume by name (empty: none)
  std::string test_dataset;      // evaluated after each model finishes (empty: none)
  int64_t test_limit = 0;        // 0: the whole test file
  double mean = 0.0, std = 1.0;  // input normalization after scaling pixels to [0,1]
  // Mid-epoch checkpoints every this many steps of a model (0: at epoch ends only); a
  // restart resumes each model at its saved stream position. Needs the MPI front door
  // (docs/multi-model.md "Mid-epoch resume").
  int64_t checkpoint_every = 0;
  std::vector<ModelSpec> models;
};

// Parses and validates `text` (the contents of `path`; relative paths in it are relative
// to the directory of `path`). Model files must exist and be readable.
Result<TrainManyConfig> ParseTrainManyConfig(const std::string& text, const std::string& path);
Result<TrainManyConfig> LoadTrainManyConfig(const std::string& path);

const char* PolicyName(Policy p);
// The learning rate of `spec` for its epoch `epoch` (0-based) under its schedule.
double LearningRate(const ModelSpec& spec, int epoch);

}  // namespace batchcast::multimodel
