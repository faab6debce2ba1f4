// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Umbrella header: everything a C++ trainer needs.
#pragma once

#include "batchcast/batch.h"
#include "batchcast/consumer.h"
#include "batchcast/options.h"
#include "batchcast/runtime.h"
#include "batchcast/status.h"
