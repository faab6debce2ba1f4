// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "multimodel/progress.h"

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/errors.h"

namespace batchcast::multimodel {

std::string StatePath(const TrainManyConfig& config, const ModelSpec& spec) {
  return (std::filesystem::path(config.output_dir) / spec.name / "state.json").string();
}

namespace {

// A state.json that cannot be used: the file, what is wrong, and the fix.
Status CorruptState(const std::string& path, const std::string& model, const std::string& what) {
  return CorruptDataError(
      "train-many: checkpoint state {} {}; restore it from a copy, or delete {} to train model "
      "'{}' from scratch",
      path, what, std::filesystem::path(path).parent_path().string(), model);
}

}  // namespace

Result<std::optional<ModelStateFile>> ReadModelStateFile(const std::string& path,
                                                         const std::string& model) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<ModelStateFile>();  // fresh
  std::ifstream in(path);
  if (!in) return ErrnoError(errno, "train-many: cannot read checkpoint state {}", path);
  const nlohmann::json st = nlohmann::json::parse(in, nullptr, false);
  if (st.is_discarded() || !st.is_object()) return CorruptState(path, model, "is not valid JSON");
  ModelStateFile f;
  const char* field = "epochs_done";
  try {  // `field` names the one being read when a type does not match
    f.progress.epochs_done = st.at(field).get<int>();
    if (f.progress.epochs_done < 0)
      return CorruptState(path, model, fmt::format("has 'epochs_done' {}, expected a count >= 0",
                                                   f.progress.epochs_done));
    f.steps = st.at(field = "steps").get<int64_t>();
    f.progress.finished = st.at(field = "finished").get<bool>();
    f.params = st.at(field = "params").get<int64_t>();
    f.epochs = st.at(field = "epochs");
    if (!f.epochs.is_array()) return CorruptState(path, model, "has 'epochs' that is not a list");
    field = "train_s";
    if (st.contains(field)) f.train_s = st.at(field).get<double>();
    field = "test_accuracy";
    if (st.contains(field)) f.test_accuracy = st.at(field).get<double>();
    field = "position";
    if (st.contains(field)) {
      f.progress.position.epoch = st.at(field).at(0).get<uint64_t>();
      f.progress.position.batch = st.at(field).at(1).get<uint64_t>();
    }
    field = "partial";
    if (st.contains(field)) {
      if (!st.at(field).is_object())
        return CorruptState(path, model, "has 'partial' that is not a mid-epoch record");
      f.partial = st.at(field);
    }
  } catch (const nlohmann::json::exception& e) {
    return CorruptState(path, model, fmt::format("has a missing or malformed '{}' ({})", field,
                                                 e.what()));
  }
  f.progress.mid_epoch = !f.partial.is_null();
  return std::optional<ModelStateFile>(std::move(f));
}

Result<ModelProgress> ReadModelProgress(const TrainManyConfig& config, const ModelSpec& spec) {
  BC_ASSIGN_OR_RETURN(std::optional<ModelStateFile> f,
                      ReadModelStateFile(StatePath(config, spec), spec.name));
  return f ? f->progress : ModelProgress();
}

Status CheckMpiWorld(int world_size) {
  if (world_size == 2) return Status::Ok();
  return FailedPreconditionError(
      "train-many under mpirun runs as one leader rank and one trainer rank that trains "
      "every model (mpirun -n 2), but the job has {} ranks; launch it with -n 2 (one "
      "train-many per node stream)",
      world_size);
}

Status CheckMpiNode(int rank, int node_size) {
  if (node_size == 2) return Status::Ok();
  return FailedPreconditionError(
      "train-many under mpirun runs its leader rank and its trainer rank on one node, but rank "
      "{} shares its node with {} other ranks, so it would lead a node of its own and no rank "
      "would train; run both ranks on one node (e.g. mpirun -n 2 --host HOST:2, not --map-by "
      "node)",
      rank, node_size - 1);
}

Status CheckMpiFrontDoor(const TrainManyConfig& config, const Options& options) {
  if (config.policy != Policy::kConcurrent)
    return FailedPreconditionError(
        "train-many under mpirun runs policy 'concurrent' only, not '{}': the MPI Runtime's "
        "leader fixes its epochs at start and ends its stream when its last consumer leaves, "
        "and a sequential policy attaches one model after another; run '{}' against `batchcast "
        "serve` (--address=ADDR)",
        PolicyName(config.policy), PolicyName(config.policy));
  if (!config.control_file.empty())
    return FailedPreconditionError(
        "train-many under mpirun does not take 'control_file' ({}): a paused model leaves the "
        "stream, and the MPI Runtime's leader ends the stream when every model has; pause and "
        "resume models against `batchcast serve` (--address=ADDR)",
        config.control_file);
  if (options.mode == "shard" || options.leader_trains)
    return InvalidArgumentError(
        "train-many under mpirun: option '{}' does not apply (one trainer rank receives the "
        "whole stream for its models); unset it",
        options.mode == "shard" ? "mode=shard" : "leader_trains");
  if (options.ranks_per_node > 0)
    return InvalidArgumentError(
        "train-many under mpirun: option 'ranks_per_node' ({}) does not apply: its two ranks "
        "must form one node (rank 0 leads, rank 1 trains every model); unset it and run both "
        "ranks on one node",
        options.ranks_per_node);
  if (options.gpu == "on")
    return InvalidArgumentError(
        "train-many under mpirun: option 'gpu=on' does not apply: the trainer rank's per-model "
        "consumers train on host batches, so the MPI front door runs gpu=off; unset 'gpu' (the "
        "models still run where their TorchScript code puts them)");
  return Status::Ok();
}

MpiStream PlanMpiStream(const TrainManyConfig& config, const std::vector<ModelProgress>& progress,
                        const Options& base) {
  MpiStream s;
  s.options = base;
  // No GPU staging: the models' consumers never take the device path, so staging would only
  // limit the slot pool and copy every batch for nothing (CheckMpiFrontDoor refuses gpu=on).
  s.options.gpu = "off";
  int max_b = 0, end_epoch = 0;
  uint64_t first_epoch = ~0ULL, first_sample = 0;
  for (size_t i = 0; i < config.models.size(); ++i) {
    const ModelSpec& m = config.models[i];
    const ModelProgress& p = progress[i];
    if (p.finished) continue;
    ++s.consumers;
    max_b = std::max(max_b, m.batch_size);
    end_epoch = std::max(end_epoch, int(p.position.epoch) + m.epochs - p.epochs_done);
    const uint64_t sample = p.position.batch * uint64_t(m.batch_size);
    if (p.position.epoch < first_epoch || (p.position.epoch == first_epoch && sample < first_sample))
      first_epoch = p.position.epoch, first_sample = sample;
  }
  if (s.consumers == 0) return s;
  s.options.batch_size = max_b;
  s.options.epochs = end_epoch;
  s.options.start_epoch = int(first_epoch);
  // The leader starts at the producer batch holding sample start_batch x batch_size: at or
  // before every model's position (each consumer skips to its own).
  s.options.start_batch = int64_t(first_sample / uint64_t(max_b));
  return s;
}

}  // namespace batchcast::multimodel
