// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "producer/batch_stage.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "core/environment.h"
#include "core/errors.h"

namespace batchcast::producer {
namespace {

std::atomic<StageFactory> g_factory{nullptr};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Where the LibTorch model stage module may be (BATCHCAST_STAGE_MODULE first); "" when this
// build has none.
#ifndef BATCHCAST_STAGE_MODULE_PATHS
#define BATCHCAST_STAGE_MODULE_PATHS ""
#endif

// Loads the model stage module once (dlopen) and installs its factory; the reason when none
// could be loaded.
std::string LoadStageModule() {
  static std::mutex mu;
  static std::string why;
  std::lock_guard<std::mutex> lock(mu);
  if (g_factory.load() != nullptr) return "";
  std::string paths = BATCHCAST_STAGE_MODULE_PATHS;
  if (const std::optional<std::string> module = env::Get(env::Var::kStageModule))
    paths = *module + ":" + paths;
  why = "this build has no LibTorch model stage module";
  for (size_t at = 0; at < paths.size();) {
    const size_t end = std::min(paths.find(':', at), paths.size());
    const std::string path = paths.substr(at, end - at);
    at = end + 1;
    if (path.empty()) continue;
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      why = fmt::format("cannot load {}: {}", path, dlerror());
      continue;
    }
    using Entry = StageFactory (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(lib, "batchcast_model_stage_factory"));
    if (entry == nullptr) {
      why = fmt::format("{} has no batchcast_model_stage_factory", path);
      continue;
    }
    g_factory.store(entry());  // stays loaded for the process's life
    return "";
  }
  return why;
}

}  // namespace

void SetStageFactory(StageFactory factory) { g_factory.store(factory); }
bool HaveStageFactory() { return g_factory.load() != nullptr; }

Result<std::vector<std::unique_ptr<BatchStage>>> CreateStages(std::string_view specs,
                                                               StageContext context,
                                                               std::string_view who) {
  std::vector<std::unique_ptr<BatchStage>> stages;
  if (Trim(specs).empty()) return stages;
  const std::string why = LoadStageModule();
  const StageFactory factory = g_factory.load();
  if (factory == nullptr)
    return FailedPreconditionError(
        "{}: option 'stage' ({}) needs the LibTorch model stage module "
        "(libbatchcast_model_stage.so), and {}: build Batchcast with LibTorch "
        "(-DBATCHCAST_TORCH=ON) or point BATCHCAST_STAGE_MODULE at the module, or leave "
        "'stage' unset (docs/model-stage.md)", who, specs, why);
  while (!specs.empty()) {
    const size_t end = specs.find(';');
    const std::string_view one = Trim(specs.substr(0, end));
    specs = end == std::string_view::npos ? std::string_view() : specs.substr(end + 1);
    if (one.empty()) continue;
    context.index += 1;
    auto stage = factory(one, context);
    if (!stage.ok()) return stage.status().WithContext(who);
    for (TensorSpec& t : (*stage)->Outputs()) context.tensors.push_back(std::move(t));
    stages.push_back(std::move(stage).value());
  }
  return stages;
}

Status PrepareStages(std::string_view specs, const pipeline::SampleLayout& images,
                     std::span<const pipeline::SampleLayout> image_sizes,
                     int64_t producer_batch, int decode_threads, std::string_view who,
                     SlotLayout* slot, std::vector<std::unique_ptr<BatchStage>>* stages) {
  if (Trim(specs).empty()) return Status::Ok();
  StageContext context;
  context.images = images;
  context.image_sizes.assign(image_sizes.begin(), image_sizes.end());
  if (context.image_sizes.empty()) context.image_sizes.push_back(images);
  context.producer_batch = producer_batch;
  context.decode_threads = decode_threads;
  BC_ASSIGN_OR_RETURN(*stages, CreateStages(specs, context, who));
  if (StagesDrop(*stages, "images")) DropImagesTail(slot);
  for (const auto& stage : *stages) BC_RETURN_IF_ERROR(AddTensors(stage->Outputs(), who, slot));
  return Status::Ok();
}

bool StagesDrop(std::span<const std::unique_ptr<BatchStage>> stages, std::string_view name) {
  return std::any_of(stages.begin(), stages.end(), [&](const std::unique_ptr<BatchStage>& s) {
    return !s->keeps_input() && s->input() == name;
  });
}

}  // namespace batchcast::producer
