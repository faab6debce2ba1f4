// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "node/front_door.h"

#include <unistd.h>

#include "core/errors.h"
#include "core/log.h"
#include "gpu/gpu_runtime.h"
#include "gpu/gpu_stager.h"

namespace batchcast::node {

std::string DefaultServiceSocket() { return "batchcast-" + std::to_string(getuid()) + "-service"; }

Result<std::unique_ptr<producer::Producer>> CreateNodeProducer(
    const producer::ProducerConfig& config, std::string* staged, bool* refused) {
  // Before the dataset opens: a refused option or output path is the first error.
  Status checked = producer::CheckConfig(config);
  producer::ProducerConfig cfg = config;
  if (checked.ok() && cfg.telemetry == nullptr) {
    auto telemetry = producer::StartTelemetry(cfg);
    if (telemetry.ok()) cfg.telemetry = std::move(telemetry).value();
    else checked = telemetry.status();
  }
  if (refused != nullptr) *refused = !checked.ok();
  BC_RETURN_IF_ERROR(checked);
  BC_ASSIGN_OR_RETURN(auto source, producer::MakePipelineSource(cfg.options));
  BC_ASSIGN_OR_RETURN(auto p, producer::Producer::Create(cfg, std::move(source)));
  std::string note;
  BC_ASSIGN_OR_RETURN(auto stager, gpu::StageOnGpu(p->staging_target(), config.options,
                                                   p->collector(), &note));
  BC_LOG(Info, Cuda, "{}: {}", config.who, note);
  if (staged != nullptr) *staged = stager != nullptr ? note : std::string();
  p->AdoptSlotHook(std::move(stager));
  return p;
}

}  // namespace batchcast::node
