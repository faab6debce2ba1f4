// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// MPI -> Status moved to core (core/mpi_status.h), where telemetry may use it too. This
// alias keeps the includes of code written before the move compiling; include
// "core/mpi_status.h" in new code.
#pragma once

#include "core/mpi_status.h"
