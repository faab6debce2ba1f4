// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Where each model of a train-many run stands after its last checkpoint, and what the node
// leader must produce for them under mpirun (docs/multi-model.md "Under mpirun" and
// "Mid-epoch resume"). Free of LibTorch: the leader rank plans the same stream from the same
// files as the trainer rank without loading a model.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "batchcast/consumer.h"
#include "batchcast/options.h"
#include "batchcast/status.h"
#include "multimodel/config.h"

namespace batchcast::multimodel {

// What output_dir/NAME/state.json says (a model without one is fresh).
struct ModelProgress {
  int epochs_done = 0;
  bool finished = false;
  // The batch its consumer gets next: the stream epoch and the batch within it in the
  // model's batch size (Consumer::Position() when the checkpoint was taken).
  StreamPosition position;
  bool mid_epoch = false;  // the checkpoint was taken inside an epoch (checkpoint_every)
};

// Everything a model's state.json holds (the trainer writes it at each checkpoint).
struct ModelStateFile {
  ModelProgress progress;
  int64_t steps = 0, params = 0;
  nlohmann::json epochs = nlohmann::json::array();  // the record of each epoch trained
  double train_s = 0, test_accuracy = -1;
  nlohmann::json partial;  // the mid-epoch record (null: checkpointed at an epoch end)
};

// The path of a model's state.json.
std::string StatePath(const TrainManyConfig& config, const ModelSpec& spec);
// The one parser of a state.json, shared by the leader rank's plan and the trainer's load:
// nullopt when `path` does not exist (a fresh model); a CorruptDataError naming the file,
// the field and the fix when it is not JSON or a field is missing or of the wrong type.
Result<std::optional<ModelStateFile>> ReadModelStateFile(const std::string& path,
                                                         const std::string& model);
Result<ModelProgress> ReadModelProgress(const TrainManyConfig& config, const ModelSpec& spec);

// Under mpirun: the policy must be concurrent, with no control file, mode=shard,
// leader_trains, ranks_per_node or gpu=on (each refused with the reason and the fix).
// Checked before MPI_Init.
Status CheckMpiFrontDoor(const TrainManyConfig& config, const Options& options);
// Under mpirun: the job must be one leader rank and one trainer rank.
Status CheckMpiWorld(int world_size);
// Under mpirun: both ranks on one node (`node_size`: the ranks sharing this rank's node),
// else each rank would lead its own node and none would train.
Status CheckMpiNode(int rank, int node_size);

// The stream the node leader produces under mpirun so that every unfinished model resumes
// at its position: epochs up to the last a model needs, starting at the earliest position
// (batch_size is the largest model batch; gpu=off, since the trainer's per-model
// consumers take host batches only). `consumers` is the number of unfinished models
// (0: nothing to train).
struct MpiStream {
  Options options;
  int consumers = 0;
};
MpiStream PlanMpiStream(const TrainManyConfig& config, const std::vector<ModelProgress>& progress,
                        const Options& base);

}  // namespace batchcast::multimodel
