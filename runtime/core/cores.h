// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// How many cores this process may run on: the decode pool's default size (pipeline) and
// what telemetry reports next to the CPU time used.
#pragma once

namespace batchcast {

// The CPUs of this process's affinity mask (sched_getaffinity: taskset, Slurm's
// --cpus-per-task, a cgroup cpuset), else the online CPUs; at least 1.
int AvailableCores();

}  // namespace batchcast
