// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "node/front_door.h"

#include <unistd.h>

#include "core/errors.h"
#include "core/log.h"
#include "gpu/gpu_runtime.h"
#include "gpu/gpu_stager.h"

namespace batchcast::node {

std::string DefaultServiceSocket() { return "batchcast-" + std::to_string(getuid()) + "-service"; }

Result<std::unique_ptr<producer::Producer>> CreateNodeProducer(const producer::ProducerConfig& config,
                                                               std::string* staged) {
  if (config.front_door) {  // before the dataset opens: a refused option is the first error
    BC_RETURN_IF_ERROR(ValidateOptions(config.options).WithContext(config.who));
    BC_RETURN_IF_ERROR(CheckFrontDoorOptions(config.options, *config.front_door));
  }
  BC_ASSIGN_OR_RETURN(auto source, producer::MakePipelineSource(config.options));
  BC_ASSIGN_OR_RETURN(auto p, producer::Producer::Create(config, std::move(source)));
  std::string note;
  BC_ASSIGN_OR_RETURN(auto stager, gpu::StageOnGpu(p->staging_target(), config.options,
                                                   p->collector(), &note));
  BC_LOG(Info, Cuda, "{}: {}", config.who, note);
  if (staged != nullptr) *staged = stager != nullptr ? note : std::string();
  p->AdoptSlotHook(std::move(stager));
  return p;
}

}  // namespace batchcast::node
