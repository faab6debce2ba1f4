// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// GpuConsumer: a Consumer's batches as device tensors (batchcast/gpu.h, docs/gpu.md), and
// attaching one from the environment `batchcast-run` sets.
#include "node/gpu_consumer.h"

#include <cstdlib>
#include <mutex>

#include "batchcast/gpu.h"
#include "core/environment.h"
#include "core/errors.h"
#include "core/log.h"
#include "gpu/gpu_check.h"
#include "gpu/gpu_plan.h"
#include "gpu/gpu_stager.h"
#include "node/consumer_internal.h"
#include "telemetry/collector.h"
#include "telemetry/metrics.h"
#include "transport/cuda/device_map.h"
#include "transport/shm/segment.h"

namespace batchcast {
namespace internal {

class GpuConsumerCore {
 public:
  Consumer* consumer = nullptr;
  const shm::SegmentView* segment = nullptr;
  std::unique_ptr<cuda::DeviceMap> map;
  std::mutex mu;  // the map's lane stream and counters
  int64_t batches = 0;

  Status ToDevice(std::shared_ptr<GpuConsumerCore> self, Batch&& batch, void* stream,
                  DeviceBatch* out);
};

struct DeviceBatchRef {
  std::shared_ptr<GpuConsumerCore> core;
  uint32_t slot = 0;
  void* stream = nullptr;
  Batch host;
  ~DeviceBatchRef() {
    {
      std::lock_guard<std::mutex> lock(core->mu);
      Status st = core->map->Release(slot, stream);
      if (!st.ok()) BC_LOG(Error, Cuda, "gpu: release of device slot {}: {}", slot, st.message());
    }
    host.Release();  // only after the release event is recorded
  }
};

namespace {

DeviceTensorView DeviceView(const TensorView& host, uint8_t* data, int device) {
  DeviceTensorView v;
  v.data = data;
  v.dtype = host.dtype;
  v.ndim = host.ndim;
  for (int i = 0; i < 4; ++i) v.shape[i] = host.shape[i];
  v.nbytes = host.nbytes;
  v.device = device;
  return v;
}

}  // namespace

Status GpuConsumerCore::ToDevice(std::shared_ptr<GpuConsumerCore> self, Batch&& batch,
                                 void* stream, DeviceBatch* out) {
  if (!batch.valid()) return InvalidArgumentError("gpu: ToDevice of an empty batch");
  const shm::SegmentView& v = *segment;
  const uint8_t* base0 = v.data(0);
  const auto* img = static_cast<const uint8_t*>(batch.images().data);
  if (img < base0 || img >= base0 + uint64_t(v.geo.max_slots) * v.geo.slot_bytes)
    return FailedPreconditionError(
        "gpu: batch {} of epoch {} spans two producer batches (or is the padded last one), so "
        "the consumer joined it in private host memory, which the device path cannot map "
        "(docs/data-plane.md, exact batches); use a producer_batch that is a multiple of "
        "batch_size and no pad_last, or gpu=off", batch.info().index, batch.info().epoch);
  const uint32_t slot = static_cast<uint32_t>((img - base0) / v.geo.slot_bytes);
  const uint8_t* slot_base = v.data(slot);
  const shm::SlotDesc& d = v.slot(slot).desc;
  cuda::SlotRange ranges[3];
  const int nr = gpu::SlotRanges(d, ranges);
  uint8_t* dev = nullptr;
  uint64_t peer_bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    const uint64_t peer_before = map->stats().peer_bytes;
    BC_ASSIGN_OR_RETURN(dev, map->Acquire(slot, batch.info().producer_seq,
                                          std::span<const cuda::SlotRange>(ranges, size_t(nr)),
                                          stream));
    peer_bytes = map->stats().peer_bytes - peer_before;
    batches += 1;
  }
  const int device = map->device();
  const uint64_t img_off = uint64_t(img - slot_base);
  DeviceTensorView images = DeviceView(batch.images(), dev + img_off, device);
  const uint64_t fin = map->table().finished_offset;
  if (fin != 0 && batch.images().dtype == DType::kUint8 && d.channels <= 3) {
    // Finished on the device: float32 N x C x H x W at the same sample positions.
    images.data = dev + fin + (img_off - d.images_offset) * sizeof(float);
    images.dtype = DType::kFloat32;
    images.shape[1] = d.channels, images.shape[2] = d.height, images.shape[3] = d.width;
    images.nbytes = batch.images().nbytes * sizeof(float);
  }
  const auto* lab = static_cast<const uint8_t*>(batch.labels().data);
  DeviceTensorView labels = DeviceView(batch.labels(), dev + (lab - slot_base), device);
  // IPC path bytes: what this batch reads in place on the same GPU, or what the peer path
  // copied from the holding GPU for it (once per producer batch).
  if (telemetry::Collector* tc = ConsumerAccess::GetCollector(*consumer); tc != nullptr)
    tc->Add(telemetry::Counter::kBytesIpc,
            map->peer() ? int64_t(peer_bytes) : int64_t(images.nbytes + labels.nbytes));
  out->Release();
  out->images_ = images;
  out->labels_ = labels;
  out->info_ = batch.info();
  out->info_.channels_last = images.dtype == DType::kFloat32 ? false : batch.info().channels_last;
  auto ref = std::make_shared<DeviceBatchRef>();
  ref->core = std::move(self);
  ref->slot = slot;
  ref->stream = stream;
  ref->host = std::move(batch);
  out->ref_ = std::move(ref);
  return Status::Ok();
}

bool TrainerTakesHostPath(const Consumer& consumer, gpu::GpuMode mode, const std::string& who,
                          Status* why) {
  if (mode != gpu::GpuMode::kAuto) return false;
  Status carving = ConsumerAccess::CheckDeviceCarving(consumer);
  if (carving.ok()) return false;
  BC_LOG(Warn, Cuda, "{}: {}", who, gpu::TrainerHostPathWarning(carving));
  *why = std::move(carving);
  return true;
}

Result<std::unique_ptr<GpuConsumer>> GpuConsumerFactory::Make(
    Consumer& consumer, std::unique_ptr<cuda::DeviceMap> map) {
  auto core = std::make_shared<GpuConsumerCore>();
  core->consumer = &consumer;
  core->segment = ConsumerAccess::Segment(consumer);
  if (core->segment == nullptr)
    return FailedPreconditionError("gpu: the consumer has no mapped ring; attach it first");
  BC_RETURN_IF_ERROR(ConsumerAccess::CheckDeviceCarving(consumer));
  core->map = std::move(map);
  std::unique_ptr<GpuConsumer> g(new GpuConsumer());
  g->core_ = std::move(core);
  return g;
}

}  // namespace internal

const Batch& DeviceBatch::host() const {
  static const Batch kEmpty;
  return ref_ ? ref_->host : kEmpty;
}

namespace {

// Every dynamic front door (a `batchcast serve` trial, a `batchcast-run` trainer) attaches
// here: the map is opened and checked once (gpu/gpu_check.h) before the first batch.
Result<std::unique_ptr<GpuConsumer>> AttachChecked(Consumer& consumer, const std::string& address,
                                                   int device, gpu::GpuMode mode,
                                                   Status* fallback) {
  if (internal::ConsumerAccess::Segment(consumer) == nullptr)
    return FailedPreconditionError("gpu: consumer of {} has no mapped ring; attach it first",
                                   address);
  if (internal::TrainerTakesHostPath(consumer, mode, "gpu consumer of " + address, fallback))
    return std::unique_ptr<GpuConsumer>();
  auto open = [&] { return cuda::DeviceMap::Open(gpu::GpuHandleSocket(address), device, 60000); };
  auto map = gpu::OpenCheckedMap(mode, open, mode == gpu::GpuMode::kAuto ? "gpu: trainer" : "",
                                 fallback);
  if (!map.ok()) return map.status().WithContext(fmt::format("gpu consumer of {}", address));
  if (map.value() == nullptr) return std::unique_ptr<GpuConsumer>();
  return internal::GpuConsumerFactory::Make(consumer, std::move(map).value());
}

}  // namespace

Result<std::unique_ptr<GpuConsumer>> GpuConsumer::Attach(Consumer& consumer,
                                                         const std::string& address, int device) {
  Status unused;  // gpu=on semantics: the check's failure is the error
  return AttachChecked(consumer, address, device, gpu::GpuMode::kOn, &unused);
}

GpuConsumer::~GpuConsumer() = default;

Status GpuConsumer::Next(void* stream, DeviceBatch* out) {
  Batch batch;
  BC_RETURN_IF_ERROR(core_->consumer->Next(&batch));
  return ToDevice(std::move(batch), stream, out);
}

Status GpuConsumer::ToDevice(Batch&& batch, void* stream, DeviceBatch* out) {
  return core_->ToDevice(core_, std::move(batch), stream, out);
}

int GpuConsumer::device() const { return core_->map->device(); }

GpuConsumerStats GpuConsumer::stats() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  cuda::DeviceMapStats m = core_->map->stats();
  GpuConsumerStats s;
  s.batches = core_->batches;
  s.ipc_bytes = m.ipc_bytes;
  s.peer_bytes = m.peer_bytes;
  s.handles_opened = m.handles_opened;
  s.peer = core_->map->peer();
  s.lane = core_->map->lane();
  return s;
}

Result<std::unique_ptr<GpuConsumer>> AttachGpuFromEnvironment(Consumer& consumer,
                                                               const Options& options) {
  if (options.gpu == "off")
    return FailedPreconditionError("gpu: option gpu=off; the trainer takes the host path");
  const std::optional<std::string> address = env::LeaderAddress();
  if (!address)
    return FailedPreconditionError(
        "gpu: BATCHCAST_ADDRESS is not set; start this trainer under batchcast-run "
        "(docs/launch.md), or call GpuConsumer::Attach with the leader's address");
  GpuPlacement placement;
  placement.trainers_per_gpu = options.trainers_per_gpu;
  BC_ASSIGN_OR_RETURN(int device, SelectGpu(placement));
  BC_ASSIGN_OR_RETURN(gpu::GpuMode mode, gpu::ParseGpuMode(options.gpu));
  Status fallback;
  BC_ASSIGN_OR_RETURN(auto gpu, AttachChecked(consumer, *address, device, mode, &fallback));
  if (gpu == nullptr)  // gpu=auto and the check failed (its one WARN is logged): host batches
    return Status(StatusCode::kUnavailable, "gpu=auto: host path: " + fallback.message());
  return gpu;
}

}  // namespace batchcast
