// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Umbrella header: everything a C++ consumer needs, without MPI. The MPI front door
// (batchcast::Runtime) is in batchcast/runtime.h, which includes <mpi.h>; the C API is
// batchcast/batchcast_c.h (docs/api.md).
#pragma once

#include "batchcast/batch.h"
#include "batchcast/consumer.h"
#include "batchcast/gpu.h"
#include "batchcast/options.h"
#include "batchcast/status.h"
#include "batchcast/version.h"
