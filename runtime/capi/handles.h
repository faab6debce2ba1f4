// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// What the C API's opaque consumer and batch handles point to.
#pragma once

#include <memory>

#include "batchcast/batch.h"
#include "batchcast/consumer.h"

struct bc_consumer_s {
  std::unique_ptr<batchcast::Consumer> consumer;
};

struct bc_batch_s {
  batchcast::Batch batch;
};
