// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "multimodel/config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/errors.h"
#include "core/suggest.h"

namespace batchcast::multimodel {
namespace {

using nlohmann::json;

// " (did you mean 'x'?)" when `word` is close to one of `candidates`.
std::string Hint(const std::string& word, const std::vector<std::string>& candidates) {
  std::string close = ClosestMatch(word, candidates);
  return close.empty() ? "" : " (did you mean '" + close + "'?)";
}

// Every key of `obj` must be in `allowed`; an unknown one names the closest allowed key.
Status CheckKeys(const json& obj, const std::vector<std::string>& allowed,
                 const std::string& where) {
  for (const auto& [key, value] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    return InvalidArgumentError("train-many: {}: unknown key '{}'{}; known keys: {}", where, key,
                                Hint(key, allowed), fmt::join(allowed, ", "));
  }
  return Status::Ok();
}

Status GetNumber(const json& obj, const std::string& key, const std::string& where, double lo,
                 double hi, double* out) {
  if (!obj.contains(key)) return Status::Ok();
  const json& v = obj.at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < lo ||
      v.get<double>() > hi) {
    return InvalidArgumentError("train-many: {}: '{}' is {}; expected a number in [{}, {}]", where,
                                key, v.dump(), lo, hi);
  }
  *out = v.get<double>();
  return Status::Ok();
}

template <typename Int>
Status GetInt(const json& obj, const std::string& key, const std::string& where, int64_t lo,
              int64_t hi, Int* out) {
  if (!obj.contains(key)) return Status::Ok();
  const json& v = obj.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    return InvalidArgumentError("train-many: {}: '{}' is {}; expected an integer in [{}, {}]",
                                where, key, v.dump(), lo, hi);
  *out = static_cast<Int>(v.get<int64_t>());
  return Status::Ok();
}

Status GetString(const json& obj, const std::string& key, const std::string& where,
                 std::string* out) {
  if (!obj.contains(key)) return Status::Ok();
  if (!obj.at(key).is_string() || obj.at(key).get<std::string>().empty())
    return InvalidArgumentError("train-many: {}: '{}' is {}; expected a non-empty string", where,
                                key, obj.at(key).dump());
  *out = obj.at(key).get<std::string>();
  return Status::Ok();
}

// A string key whose value must be one of `names` (mapped to `values`).
template <typename E>
Status GetChoice(const json& obj, const std::string& key, const std::string& where,
                 const std::vector<std::string>& names, const std::vector<E>& values, E* out) {
  std::string s;
  BC_RETURN_IF_ERROR(GetString(obj, key, where, &s));
  if (s.empty()) return Status::Ok();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == s) {
      *out = values[i];
      return Status::Ok();
    }
  return InvalidArgumentError("train-many: {}: '{}' is '{}'{}; expected one of {}", where, key, s,
                              Hint(s, names), fmt::join(names, ", "));
}

std::string Resolve(const std::string& dir, const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  return (std::filesystem::path(dir) / p).lexically_normal().string();
}

Status ParseSchedule(const json& m, const std::string& where, ModelSpec* s) {
  if (!m.contains("scheduler")) return Status::Ok();
  const json& sch = m.at("scheduler");
  const std::vector<std::string> names = {"none", "step", "cosine"};
  const std::vector<LrSchedule> values = {LrSchedule::kNone, LrSchedule::kStep,
                                          LrSchedule::kCosine};
  if (sch.is_string()) return GetChoice(m, "scheduler", where, names, values, &s->schedule);
  if (!sch.is_object())
    return InvalidArgumentError(
        "train-many: {}: 'scheduler' is {}; expected \"none\", \"step\", \"cosine\" or an object "
        "{{\"type\": \"step\", \"step_size\": 2, \"gamma\": 0.5}}",
        where, sch.dump());
  const std::string w = where + " scheduler";
  BC_RETURN_IF_ERROR(CheckKeys(sch, {"type", "step_size", "gamma", "eta_min"}, w));
  if (!sch.contains("type"))
    return InvalidArgumentError("train-many: {}: 'type' is missing; expected step or cosine", w);
  BC_RETURN_IF_ERROR(GetChoice(sch, "type", w, names, values, &s->schedule));
  BC_RETURN_IF_ERROR(GetInt(sch, "step_size", w, 1, 1 << 20, &s->step_size));
  BC_RETURN_IF_ERROR(GetNumber(sch, "gamma", w, 0.0, 1.0, &s->gamma));
  return GetNumber(sch, "eta_min", w, 0.0, 1e3, &s->eta_min);
}

Result<ModelSpec> ParseModel(const json& m, size_t index, const std::string& dir) {
  std::string where = "models[" + std::to_string(index) + "]";
  if (!m.is_object())
    return InvalidArgumentError("train-many: {}: is {}; expected an object", where, m.dump());
  if (m.contains("name") && m.at("name").is_string())
    where += " ('" + m.at("name").get<std::string>() + "')";
  BC_RETURN_IF_ERROR(CheckKeys(m,
                               {"name", "model", "lr", "batch_size", "optimizer", "momentum",
                                "weight_decay", "scheduler", "criterion", "epochs", "priority"},
                               where));
  ModelSpec s;
  for (const char* required : {"name", "model"})
    if (!m.contains(required))
      return InvalidArgumentError("train-many: {}: '{}' is missing", where, required);
  BC_RETURN_IF_ERROR(GetString(m, "name", where, &s.name));
  for (char c : s.name)
    if ((!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') ||
        s.name == "." || s.name == "..")
      return InvalidArgumentError(
          "train-many: {}: 'name' '{}' may hold only letters, digits, '_', '-' and '.', and "
          "may not be '.' or '..' (it names a directory, a control-file line and the "
          "telemetry series model/NAME/...)",
          where, s.name);
  BC_RETURN_IF_ERROR(GetString(m, "model", where, &s.path));
  s.path = Resolve(dir, s.path);
  if (access(s.path.c_str(), R_OK) != 0)
    return NotFoundError(
        "train-many: {}: model file {} cannot be read ({}); make it with "
        "torch.jit.script(model).save(path)",
        where, s.path, std::strerror(errno));
  BC_RETURN_IF_ERROR(GetNumber(m, "lr", where, 0.0, 1e3, &s.lr));
  BC_RETURN_IF_ERROR(GetInt(m, "batch_size", where, 1, 1 << 20, &s.batch_size));
  BC_RETURN_IF_ERROR(GetChoice(m, "optimizer", where, {"sgd", "adam", "adamw"},
                               {Optimizer::kSgd, Optimizer::kAdam, Optimizer::kAdamW},
                               &s.optimizer));
  BC_RETURN_IF_ERROR(GetNumber(m, "momentum", where, 0.0, 1.0, &s.momentum));
  if (m.contains("momentum") && s.optimizer != Optimizer::kSgd)
    return InvalidArgumentError(
        "train-many: {}: 'momentum' applies to optimizer sgd only; remove it or use \"sgd\"",
        where);
  BC_RETURN_IF_ERROR(GetNumber(m, "weight_decay", where, 0.0, 1.0, &s.weight_decay));
  BC_RETURN_IF_ERROR(ParseSchedule(m, where, &s));
  BC_RETURN_IF_ERROR(GetChoice(m, "criterion", where, {"cross_entropy", "nll"},
                               {Criterion::kCrossEntropy, Criterion::kNll}, &s.criterion));
  BC_RETURN_IF_ERROR(GetInt(m, "epochs", where, 1, 1 << 20, &s.epochs));
  BC_RETURN_IF_ERROR(GetInt(m, "priority", where, -1000000, 1000000, &s.priority));
  return s;
}

}  // namespace

Result<TrainManyConfig> ParseTrainManyConfig(const std::string& text, const std::string& path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    return InvalidArgumentError("train-many: {}: not valid JSON: {}", path, e.what());
  }
  if (!j.is_object())
    return InvalidArgumentError("train-many: {}: expected a JSON object with \"models\"", path);
  BC_RETURN_IF_ERROR(CheckKeys(j,
                               {"policy", "sjf_by", "output_dir", "control_file", "test_dataset",
                                "test_limit", "mean", "std", "checkpoint_every", "models"},
                               path));
  const std::string dir = std::filesystem::absolute(path).parent_path().string();
  TrainManyConfig c;
  BC_RETURN_IF_ERROR(GetChoice(
      j, "policy", path, {"concurrent", "fcfs", "priority", "sjf", "round-robin"},
      {Policy::kConcurrent, Policy::kFcfs, Policy::kPriority, Policy::kSjf, Policy::kRoundRobin},
      &c.policy));
  BC_RETURN_IF_ERROR(GetChoice(j, "sjf_by", path, {"params", "epochs"},
                               {SjfBy::kParams, SjfBy::kEpochs}, &c.sjf_by));
  if (j.contains("sjf_by") && c.policy != Policy::kSjf)
    return InvalidArgumentError(
        "train-many: {}: 'sjf_by' applies to policy sjf only; remove it or set \"policy\": \"sjf\"",
        path);
  BC_RETURN_IF_ERROR(GetString(j, "output_dir", path, &c.output_dir));
  if (c.output_dir.empty())
    return InvalidArgumentError(
        "train-many: {}: 'output_dir' is missing; it holds the checkpoints and the finished models",
        path);
  c.output_dir = Resolve(dir, c.output_dir);
  BC_RETURN_IF_ERROR(GetString(j, "control_file", path, &c.control_file));
  c.control_file = Resolve(dir, c.control_file);
  BC_RETURN_IF_ERROR(GetString(j, "test_dataset", path, &c.test_dataset));
  c.test_dataset = Resolve(dir, c.test_dataset);
  BC_RETURN_IF_ERROR(GetInt(j, "test_limit", path, 0, int64_t(1) << 40, &c.test_limit));
  BC_RETURN_IF_ERROR(GetInt(j, "checkpoint_every", path, 0, int64_t(1) << 40, &c.checkpoint_every));
  BC_RETURN_IF_ERROR(GetNumber(j, "mean", path, -1e3, 1e3, &c.mean));
  BC_RETURN_IF_ERROR(GetNumber(j, "std", path, 1e-6, 1e3, &c.std));
  if (!j.contains("models") || !j.at("models").is_array() || j.at("models").empty())
    return InvalidArgumentError(
        "train-many: {}: 'models' is missing or empty; expected a list of "
        "{{\"name\", \"model\", \"lr\", \"batch_size\", ...}}",
        path);
  std::set<std::string> names;
  for (size_t i = 0; i < j.at("models").size(); ++i) {
    BC_ASSIGN_OR_RETURN(ModelSpec s, ParseModel(j.at("models")[i], i, dir));
    if (!names.insert(s.name).second)
      return InvalidArgumentError("train-many: {}: two models are named '{}'; names must be unique",
                                  path, s.name);
    c.models.push_back(std::move(s));
  }
  return c;
}

Result<TrainManyConfig> LoadTrainManyConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return NotFoundError("train-many: cannot read the configuration {} ({})", path,
                         std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseTrainManyConfig(ss.str(), path);
}

const char* PolicyName(Policy p) {
  switch (p) {
    case Policy::kConcurrent: return "concurrent";
    case Policy::kFcfs: return "fcfs";
    case Policy::kPriority: return "priority";
    case Policy::kSjf: return "sjf";
    case Policy::kRoundRobin: return "round-robin";
  }
  return "?";
}

double LearningRate(const ModelSpec& s, int epoch) {
  switch (s.schedule) {
    case LrSchedule::kNone: return s.lr;
    case LrSchedule::kStep: return s.lr * std::pow(s.gamma, epoch / s.step_size);
    case LrSchedule::kCosine:
      // PyTorch's CosineAnnealingLR with T_max = epochs, stepped once per epoch.
      return s.eta_min +
             (s.lr - s.eta_min) * 0.5 * (1.0 + std::cos(M_PI * double(epoch) / double(s.epochs)));
  }
  return s.lr;
}

}  // namespace batchcast::multimodel
