// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "multimodel/progress.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/errors.h"

namespace batchcast::multimodel {

std::string StatePath(const TrainManyConfig& config, const ModelSpec& spec) {
  return (std::filesystem::path(config.output_dir) / spec.name / "state.json").string();
}

Result<ModelProgress> ReadModelProgress(const TrainManyConfig& config, const ModelSpec& spec) {
  ModelProgress p;
  const std::string path = StatePath(config, spec);
  std::ifstream in(path);
  if (!in) return p;  // fresh
  nlohmann::json st = nlohmann::json::parse(in, nullptr, false);
  if (st.is_discarded() || !st.contains("epochs_done"))
    return CorruptDataError(
        "train-many: checkpoint state {} is not valid JSON; delete {} to train model '{}' from "
        "scratch",
        path, std::filesystem::path(path).parent_path().string(), spec.name);
  p.epochs_done = st["epochs_done"].get<int>();
  p.finished = st.value("finished", false);
  if (st.contains("position")) {
    p.position.epoch = st["position"].at(0).get<uint64_t>();
    p.position.batch = st["position"].at(1).get<uint64_t>();
  }
  p.mid_epoch = st.contains("partial");
  return p;
}

Status CheckMpiWorld(int world_size) {
  if (world_size == 2) return Status::Ok();
  return FailedPreconditionError(
      "train-many under mpirun runs as one leader rank and one trainer rank that trains "
      "every model (mpirun -n 2), but the job has {} ranks; launch it with -n 2 (one "
      "train-many per node stream)",
      world_size);
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
  return Status::Ok();
}

MpiStream PlanMpiStream(const TrainManyConfig& config, const std::vector<ModelProgress>& progress,
                        const Options& base) {
  MpiStream s;
  s.options = base;
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
