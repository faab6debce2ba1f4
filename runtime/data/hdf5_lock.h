// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The process-wide HDF5 lock for data code; see core/hdf5_lock.h for the rules.
// Every HDF5 call in the project holds it:  std::lock_guard lock(batchcast::Hdf5Lock());
#pragma once

#include "core/hdf5_lock.h"
