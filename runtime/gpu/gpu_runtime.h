// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The GPU data plane inside the MPI Runtime (docs/gpu.md "Automatic use"): every rank of
// a node calls Setup() once the leader exists and before it runs. Trainers probe their
// devices and pick a GPU (gpu, trainers_per_gpu options); the node's table decides the
// stager GPU and one NCCL relay per other GPU (gpu/gpu_plan.h); the leader installs the
// stager, the relays join the node's NCCL communicator (unique id over MPI), and each
// trainer on a GPU gets a GpuConsumer. With gpu=auto and no device, nothing is created
// and the node keeps the host path (one log line).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "batchcast/consumer.h"
#include "batchcast/gpu.h"
#include "batchcast/options.h"
#include "batchcast/status.h"
#include "gpu/gpu_plan.h"
#include "producer/slot_hook.h"
#include "transport/cuda/device_map.h"

namespace batchcast::telemetry {
class Collector;
}

namespace batchcast::gpu {

class GpuStager;
class GpuRelay;
struct GpuStagerConfig;

// The stager settings an Options asks for: gpu_finish with its mean / std.
Status StagerConfigFromOptions(const Options& options, GpuStagerConfig* config);

// Leaders without MPI membership (`batchcast serve`, the `batchcast-run` leader task): with
// gpu=auto|on and a visible device, stages the batches on visible device 0 of this process
// (CUDA_VISIBLE_DEVICES picks it). Trainers on that GPU map the slots in place; trainers
// on other GPUs take the peer-copy path (no NCCL: no communicator to build). Null with an
// ok status on the host path (`note` says why); gpu=on without a device is an error.
Result<std::unique_ptr<GpuStager>> StageOnGpu(const producer::StagingTarget& target,
                                              const Options& options,
                                              telemetry::Collector* collector, std::string* note);

struct GpuRuntimeInput {
  Options options;
  MPI_Comm node = MPI_COMM_NULL;   // the node communicator (local rank 0 leads)
  MPI_Comm world = MPI_COMM_NULL;  // for MPI_Abort when a relay fails
  int local_rank = 0, node_size = 0, node_id = 0;
  bool trainer = false;
  bool multinode_leader = false;   // the node runs the multi-node leader (no slot hook yet)
  producer::StagingTarget leader;  // local rank 0 only: the node leader's ring and hook
  std::string address;             // the leader's socket name
  telemetry::Collector* collector = nullptr;
};

class GpuRuntime {
 public:
  // Collective over input.node. Errors are this rank's; the caller agrees on them.
  static Result<std::unique_ptr<GpuRuntime>> Setup(const GpuRuntimeInput& input);
  ~GpuRuntime();

  // Trainers: the device map this trainer reads its batches through (after Consumer::Attach;
  // the front door wraps it in a GpuConsumer), checked once (gpu/gpu_check.h). Null on the
  // host path, and under gpu=auto when the check failed; under gpu=on that is the error.
  Result<std::unique_ptr<cuda::DeviceMap>> OpenConsumerMap();
  // Collective over the node, after every trainer's OpenConsumerMap: true when the node
  // keeps the device path. Under gpu=auto one trainer's failed check keeps every trainer of
  // the node on the host path (drop the GpuConsumer) and the leader logs one WARN naming it.
  bool AgreeOnDevicePath();
  // Leader thread, after Leader::Run returned: ends the relays' stream.
  Status FinishLeader();
  // After the job's final barrier: joins the relay; returns its status.
  Status Shutdown();

  const NodeGpuPlan& plan() const { return plan_; }
  GpuMode mode() const { return mode_; }
  // True when the plan gives this rank's trainer a device map to open (OpenConsumerMap).
  bool trainer_on_device_path() const {
    return local_rank_ < static_cast<int>(plan_.source.size()) && plan_.source[local_rank_] >= 0;
  }
  int device() const { return device_; }

 private:
  GpuRuntime() = default;
  Status DecideTrainer(const GpuRuntimeInput& in, GpuMode mode, std::string* bus,
                       std::string* reason);
  Status StartLeaderSide(const GpuRuntimeInput& in, std::string* nccl_id);
  Status StartNccl(const GpuRuntimeInput& in, const std::string& nccl_id, uint32_t num_slots,
                   uint64_t slot_bytes);

  NodeGpuPlan plan_;
  GpuMode mode_ = GpuMode::kAuto;
  MPI_Comm node_ = MPI_COMM_NULL;
  int node_id_ = 0;
  Status check_failure_;       // this trainer's failed device-path check (gpu=auto)
  int local_rank_ = 0;
  int device_ = -1;            // this rank's visible ordinal on the device path
  std::string address_;
  std::unique_ptr<GpuStager> stager_;
  std::unique_ptr<GpuRelay> relay_;
  int relay_index_ = -1;
};

}  // namespace batchcast::gpu
