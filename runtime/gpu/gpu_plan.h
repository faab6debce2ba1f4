// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// When the MPI Runtime takes the GPU data plane, and how a node's GPUs are wired
// (docs/gpu.md "Which path when"). Pure functions of their inputs, so the decisions are
// unit-tested on a machine without a GPU; node/gpu_runtime.cc feeds them the probe and
// the node's gathered table.
#pragma once

#include <string>
#include <vector>

#include "batchcast/status.h"

namespace batchcast::gpu {

enum class GpuMode { kOff, kAuto, kOn };

// "auto" | "off" | "on" (the `gpu` option).
Result<GpuMode> ParseGpuMode(const std::string& text);
const char* GpuModeName(GpuMode mode);

// What one trainer rank sees.
struct GpuProbe {
  bool built_with_cuda = false;
  int visible_devices = 0;   // 0 when the probe failed
  std::string cause;         // the probe's message when visible_devices == 0
};

// One trainer's verdict. use_gpu false with an ok Status: the host path, `reason` says
// why (logged once). gpu=on without a device is an error naming the cause.
struct GpuDecision {
  bool use_gpu = false;
  std::string reason;
};
Result<GpuDecision> DecideGpuPath(GpuMode mode, const GpuProbe& probe);

// The GPU of the trainer with index `trainer_index` among its node's `node_trainers`
// trainers, for `trainers_per_gpu` (0 = spread evenly: ceil(trainers / visible)).
// A single visible device (a launcher pinned one per rank) is always this rank's.
Result<int> GpuForTrainer(int trainer_index, int node_trainers, int trainers_per_gpu,
                          int visible_devices);

// How a node's device batches flow, from the GPU (PCI bus id, "" = host path) of every
// local rank, indexed by local rank (the leader's entry is its own trainer's GPU, or ""
// when it only leads).
//   stager: the GPU the leader copies each producer batch to (the first GPU a trainer
//           uses, in local-rank order);
//   relays: one per other GPU, the lowest local rank on it; it receives every producer
//           batch by NCCL broadcast from the stager's GPU and serves it to the trainers
//           on its GPU by CUDA IPC. NCCL rank 0 is the leader, relay i is NCCL rank i+1.
struct NodeGpuPlan {
  std::string stager_bus;              // "" = no device path on this node
  std::vector<std::string> relay_bus;  // the other GPUs, in first-use order
  std::vector<int> relay_rank;         // local rank of relay i
  // Per local rank: -1 host path; 0 maps the stager's slots; i+1 maps relay i's slots.
  std::vector<int> source;

  bool any() const { return !stager_bus.empty(); }
  int nccl_ranks() const { return relay_bus.empty() ? 0 : 1 + static_cast<int>(relay_bus.size()); }
  // This local rank's NCCL rank (0 for the leader, local rank 0), or -1.
  int NcclRank(int local_rank) const;
};
NodeGpuPlan PlanNodeGpus(const std::vector<std::string>& bus_by_local_rank);

}  // namespace batchcast::gpu
