// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The GPU data plane's host-side logic with the device replaced by host memory, so it runs
// on any machine: a real Leader with the real GpuStager over a DeviceRing whose "device
// slots" are host buffers, and real Consumers turned into GpuConsumers over a DeviceMap
// that reads those buffers. What it proves without a GPU: the byte ranges the stager
// copies, that consumers find every sample at the offsets the device views give (exactly
// once, byte-exact), that a slot is restaged only after every consumer released it on the
// "device", that the local-lane bookkeeping holds, and the H2D / IPC byte counters.
// What it cannot prove: anything CUDA does (copies, events, IPC) — see gpu_dataplane_test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "batchcast/consumer.h"
#include "batchcast/gpu.h"
#include "core/errors.h"
#include "gpu/gpu_check.h"
#include "gpu/gpu_runtime.h"
#include "node/consumer_internal.h"
#include "node/gpu_consumer.h"
#include "gpu/gpu_stager.h"
#include "producer/producer.h"
#include "telemetry/collector.h"
#include "tests/unit/node/synthetic_source.h"
#include "transport/cuda/canary.h"

namespace batchcast::gpu {
namespace {

using producer::ProducerConfig;
using node::SyntheticPixel;
using node::SyntheticSource;

// "Device" slots in host memory; copies are synchronous memcpy.
class HostRing final : public cuda::DeviceRing {
 public:
  explicit HostRing(const cuda::DeviceRingConfig& c) : config_(c) {
    table_.magic = cuda::kDeviceTableMagic;
    table_.version = cuda::kDeviceTableVersion;
    table_.num_slots = c.num_slots;
    table_.host_slot_bytes = c.host_slot_bytes;
    table_.slot_bytes = c.host_slot_bytes;
    slots_.assign(c.num_slots, std::vector<uint8_t>(c.host_slot_bytes, 0xEE));
    held_.assign(c.num_slots, 0);
    // The canary, as CudaDeviceRing stages it: bytes from the seed, their checksum.
    table_.canary_seed = 0x5EEDULL ^ uint64_t(getpid());
    table_.canary_bytes = cuda::kCanaryBytes;
    canary_.resize(cuda::kCanaryBytes);
    cuda::FillCanary(table_.canary_seed, canary_.data(), canary_.size());
    table_.canary_checksum = cuda::CanaryChecksum(canary_.data(), canary_.size());
  }
  Status WaitHostSlotFree(uint32_t) override { return Status::Ok(); }
  Status Stage(uint32_t slot, uint64_t seq, std::span<const cuda::SlotRange> ranges,
               const cuda::FinishSpec* finish, const StageHook& hook) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (held_[slot] != 0) restaged_while_held_ += 1;  // a consumer still reads it
    const uint8_t* host = config_.host_slots + uint64_t(slot) * config_.host_slot_bytes;
    for (const cuda::SlotRange& r : ranges) {
      if (r.offset + r.bytes > config_.host_slot_bytes) return InternalError("range leaves slot");
      std::memcpy(slots_[slot].data() + r.offset, host + r.offset, r.bytes);
      stats_.h2d_bytes += r.bytes;
    }
    if (hook) BC_RETURN_IF_ERROR(hook(slots_[slot].data(), nullptr));
    if (finish != nullptr) finishes_ += 1;
    stats_.h2d_copies += 1;
    last_seq_[slot] = seq;
    return Status::Ok();
  }
  Status Synchronize() override { return Status::Ok(); }
  const cuda::DeviceSlotTable& table() const override { return table_; }
  void* device_slot(uint32_t slot) const override {
    return const_cast<uint8_t*>(slots_[slot].data());
  }
  cuda::DeviceRingStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  int device() const override { return 0; }
  void* stream() const override { return nullptr; }
  void* ready_event(uint32_t) const override { return nullptr; }
  void* release_event(uint32_t, int) const override { return nullptr; }
  const void* canary() const override { return canary_.data(); }
  void* canary_ready_event() const override { return nullptr; }

  void Hold(uint32_t slot, int delta) {
    std::lock_guard<std::mutex> lock(mu_);
    held_[slot] += delta;
  }
  int restaged_while_held() const {
    std::lock_guard<std::mutex> lock(mu_);
    return restaged_while_held_;
  }
  int finishes() const { return finishes_; }

 private:
  cuda::DeviceRingConfig config_;
  cuda::DeviceSlotTable table_{};
  std::vector<std::vector<uint8_t>> slots_;
  mutable std::mutex mu_;
  std::vector<int> held_;
  std::map<uint32_t, uint64_t> last_seq_;
  int restaged_while_held_ = 0;
  int finishes_ = 0;
  cuda::DeviceRingStats stats_;
  std::vector<uint8_t> canary_;
};

// Where a device path can break, injected into the stand-in map (docs/gpu.md "The safe
// device path"): the handle socket (open), cudaIpcOpenMemHandle (map), cudaIpcOpenEventHandle
// (event import), or a mapping that reads other bytes than the leader copied (checksum).
// A faulty map is faulty for the batches too: its Acquire fails (map, event import) or
// returns wrong bytes (checksum), so a consumer that skipped the check would read garbage.
enum class Fault { kNone, kOpen, kMap, kEventImport, kChecksum };

// A consumer's map of the HostRing: Acquire/Release bracket a "device" read.
class HostMap final : public cuda::DeviceMap {
 public:
  explicit HostMap(HostRing& ring, Fault fault = Fault::kNone) : ring_(ring), fault_(fault) {}
  Result<uint8_t*> Acquire(uint32_t slot, uint64_t, std::span<const cuda::SlotRange> ranges,
                           void*) override {
    if (fault_ == Fault::kMap || fault_ == Fault::kEventImport)
      return UnavailableError("injected: the slot's IPC handle does not open");
    ring_.Hold(slot, +1);
    for (const cuda::SlotRange& r : ranges) stats_.ipc_bytes += r.bytes;
    auto* memory = static_cast<uint8_t*>(ring_.device_slot(slot));
    if (fault_ != Fault::kChecksum) return memory;
    // A mapping of the wrong bytes: a scrambled copy of the slot.
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<uint8_t>& wrong = wrong_[slot];
    const size_t n = ring_.table().host_slot_bytes;
    wrong.assign(memory, memory + n);
    for (uint8_t& b : wrong) b ^= 0x5A;
    return wrong.data();
  }
  Status MapCanary() override {
    if (fault_ == Fault::kMap) return UnavailableError("injected: cudaIpcOpenMemHandle failed");
    return Status::Ok();
  }
  Status ImportCanaryEvents() override {
    if (fault_ == Fault::kEventImport)
      return UnavailableError("injected: cudaIpcOpenEventHandle failed");
    return Status::Ok();
  }
  Status ReadCanary(uint8_t* out, uint64_t bytes) override {
    std::memcpy(out, ring_.canary(), bytes);
    if (fault_ == Fault::kChecksum) out[bytes / 2] ^= 1;  // one bit differs
    return Status::Ok();
  }
  Status Release(uint32_t slot, void*) override {
    ring_.Hold(slot, -1);
    releases_ += 1;
    return Status::Ok();
  }
  const cuda::DeviceSlotTable& table() const override { return ring_.table(); }
  int lane() const override { return 0; }
  int device() const override { return 0; }
  bool peer() const override { return false; }
  cuda::DeviceMapStats stats() const override { return stats_; }

 private:
  HostRing& ring_;
  Fault fault_;
  cuda::DeviceMapStats stats_;
  std::atomic<int> releases_{0};
  std::mutex mu_;
  std::map<uint32_t, std::vector<uint8_t>> wrong_;
};

// How every front door opens a trainer's map: the check, then the map or the host path.
DeviceMapOpener OpenerFor(HostRing& ring, Fault fault) {
  return [&ring, fault]() -> Result<std::unique_ptr<cuda::DeviceMap>> {
    if (fault == Fault::kOpen)
      return UnavailableError("injected: connect to the leader's handle socket failed");
    return std::unique_ptr<cuda::DeviceMap>(std::make_unique<HostMap>(ring, fault));
  };
}

std::unique_ptr<telemetry::Collector> MakeCollector() {
  telemetry::Tags tags;
  tags.run = "gpu-host-ring";
  telemetry::CollectorOptions o;
  o.gpu = false;
  auto c = telemetry::Collector::Create(tags, o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

int64_t Total(telemetry::Collector& c, telemetry::Counter k) {
  return static_cast<int64_t>(c.Snapshot().Total(telemetry::col::Counter(k)));
}

struct ConsumerResult {
  Status status;
  std::map<uint64_t, std::multiset<int64_t>> seen;  // epoch -> sample ids
  int64_t bad_pixels = 0, bad_labels = 0, batches = 0;
  uint64_t view_bytes = 0;  // images + labels bytes of the device views
};

// One consumer thread: every batch through GpuConsumer::Next, checked from the "device".
void Consume(const std::string& address, int batch_size, int epochs, int depth, int rank,
             HostRing& ring, telemetry::Collector* collector, ConsumerResult* out) {
  Options o;
  o.batch_size = batch_size;
  o.epochs = epochs;
  o.buffer_depth = depth;
  auto c = Consumer::Attach(address, o, rank);
  if (!c.ok()) {
    out->status = c.status();
    return;
  }
  internal::ConsumerAccess::SetCollector(**c, collector);
  Status fallback;
  auto map = OpenCheckedMap(GpuMode::kOn, OpenerFor(ring, Fault::kNone), "", &fallback);
  if (!map.ok()) {
    out->status = map.status();
    return;
  }
  auto gpu = internal::GpuConsumerFactory::Make(**c, std::move(map).value());
  if (!gpu.ok()) {
    out->status = gpu.status();
    return;
  }
  DeviceBatch b;
  for (;;) {
    Status st = (*gpu)->Next(nullptr, &b);
    if (st.code() == StatusCode::kEndOfStream) break;
    if (!st.ok()) {
      out->status = st;
      break;
    }
    const int64_t n = b.size();
    const size_t sb = b.images().nbytes / size_t(n);
    const auto* pixels = static_cast<const uint8_t*>(b.images().data);
    const auto* labels = static_cast<const int64_t*>(b.labels().data);
    const int64_t* ids = b.host().sample_ids();
    EXPECT_NE(b.images().data, b.host().images().data);  // views point into the "device"
    for (int64_t i = 0; i < n; ++i) {
      for (size_t k = 0; k < sb; ++k)
        out->bad_pixels += pixels[size_t(i) * sb + k] != SyntheticPixel(ids[i], k);
      out->bad_labels += labels[i] != ids[i] % 10;
      out->seen[b.info().epoch].insert(ids[i]);
    }
    out->view_bytes += b.images().nbytes + b.labels().nbytes;
    out->batches += 1;
    b.Release();
  }
  internal::ConsumerAccess::SetCollector(**c, nullptr);
}

struct HostRingJob {
  std::vector<int> batch_sizes;
  int epochs = 2;
  int64_t samples = 96;
  int ring_slots = 3;
  int buffer_depth = 1;
};

void RunAndCheck(const HostRingJob& job) {
  Options o;
  o.batch_size = 8;
  o.producer_batch = 16;
  o.epochs = job.epochs;
  o.ring_slots = job.ring_slots;
  o.shuffle = true;
  o.seed = 11;
  producer::ProducerConfig cfg;
  cfg.options = o;
  cfg.expected_consumers = static_cast<int>(job.batch_sizes.size());
  cfg.max_consumer_batch = 8;
  cfg.socket_name = "batchcast-test-" + std::to_string(getpid()) + "-gpuhost-" +
                    std::to_string(job.batch_sizes.size()) + "-" + std::to_string(job.ring_slots);
  cfg.job = "test";
  cfg.join_timeout_ms = 30000;
  auto leader = producer::Producer::Create(cfg, std::make_unique<SyntheticSource>(job.samples, 8));
  ASSERT_TRUE(leader.ok()) << leader.status().ToString();
  auto leader_telemetry = MakeCollector();
  GpuStagerConfig sc;
  sc.collector = leader_telemetry.get();
  auto ring = std::make_unique<HostRing>(GpuStager::RingConfigFor((*leader)->ring(), sc).value());
  HostRing* host_ring = ring.get();
  auto stager = GpuStager::CreateWithRing((*leader)->staging_target(), sc, std::move(ring));
  ASSERT_TRUE(stager.ok()) << stager.status().ToString();

  std::vector<ConsumerResult> results(job.batch_sizes.size());
  std::vector<std::unique_ptr<telemetry::Collector>> collectors;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < job.batch_sizes.size(); ++i) {
    collectors.push_back(MakeCollector());
    threads.emplace_back(Consume, (*leader)->address(), job.batch_sizes[i], job.epochs,
                         job.buffer_depth, int(i),
                         std::ref(*host_ring), collectors.back().get(), &results[i]);
  }
  Status run = (*leader)->Run();
  ASSERT_TRUE((*stager)->Finish().ok());
  for (auto& t : threads) t.join();
  ASSERT_TRUE(run.ok()) << run.ToString();

  const int64_t producer_batches = job.epochs * ((job.samples + 15) / 16);
  const cuda::DeviceRingStats rs = host_ring->stats();
  EXPECT_EQ(int64_t(rs.h2d_copies), producer_batches);  // one copy per producer batch, any K
  EXPECT_EQ(Total(*leader_telemetry, telemetry::Counter::kBytesH2d), int64_t(rs.h2d_bytes));
  // Only the used positions of each slot: 16 samples plus at most max(b)-1 fill repeats,
  // each 192 image bytes + label + id; never the unused capacity.
  const int64_t per_position = 8 * 8 * 3 + 8 + 8;
  const int max_b = *std::max_element(job.batch_sizes.begin(), job.batch_sizes.end());
  EXPECT_EQ(int64_t(rs.h2d_bytes) % per_position, 0);
  EXPECT_GE(int64_t(rs.h2d_bytes), producer_batches * 16 * per_position);
  EXPECT_LE(int64_t(rs.h2d_bytes), producer_batches * (16 + max_b - 1) * per_position);
  EXPECT_EQ(host_ring->restaged_while_held(), 0);
  for (size_t i = 0; i < results.size(); ++i) {
    SCOPED_TRACE("consumer " + std::to_string(i));
    const ConsumerResult& r = results[i];
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.bad_pixels, 0);
    EXPECT_EQ(r.bad_labels, 0);
    ASSERT_EQ(int(r.seen.size()), job.epochs);
    for (const auto& [epoch, ids] : r.seen) {
      std::set<int64_t> distinct(ids.begin(), ids.end());
      EXPECT_EQ(int64_t(distinct.size()), job.samples) << "epoch " << epoch;
    }
    EXPECT_EQ(Total(*collectors[i], telemetry::Counter::kBytesIpc), int64_t(r.view_bytes));
  }
}

TEST(GpuHostRingTest, OneConsumerExactlyOnceFromDeviceViews) {
  RunAndCheck({{8}, 2, 96, 4, 2});
}

// Batch sizes that divide the producer batch of 16: exact batches stay in slot memory.
TEST(GpuHostRingTest, FourConsumersOneCopyPerProducerBatch) {
  RunAndCheck({{8, 4, 2, 8}, 3, 96, 4, 2});
}

TEST(GpuHostRingTest, TwoSlotRingNeverRestagesAHeldSlot) { RunAndCheck({{8, 4}, 4, 64, 2, 1}); }

// A batch size that does not divide the producer batch would make the consumer join batches
// in private host memory, which the device path cannot map: refused when the device consumer
// is made, naming the fix, not at the first joined batch.
TEST(GpuHostRingTest, BatchesThatWouldBeJoinedAreRefusedAtAttach) {
  Options o;
  o.batch_size = 8;
  o.producer_batch = 16;
  o.epochs = 1;
  producer::ProducerConfig cfg;
  cfg.options = o;
  cfg.expected_consumers = 1;
  cfg.max_consumer_batch = 8;
  cfg.socket_name = "bc-gpu-host-refuse-" + std::to_string(getpid());
  cfg.job = "test";
  cfg.join_timeout_ms = 30000;
  auto leader = producer::Producer::Create(cfg, std::make_unique<SyntheticSource>(32, 8));
  ASSERT_TRUE(leader.ok()) << leader.status().ToString();
  HostRing ring(cuda::DeviceRingConfig{});
  Options co = o;
  co.batch_size = 5;
  auto c = Consumer::Attach((*leader)->address(), co, 0);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto gpu = internal::GpuConsumerFactory::Make(**c, std::make_unique<HostMap>(ring));
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(gpu.status().message().find("batch_size does not divide the producer batch"),
            std::string::npos) << gpu.status().message();
  co.batch_size = 4;
  co.carve_offset = false;
  auto ok = Consumer::Attach((*leader)->address(), co, 1);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(internal::GpuConsumerFactory::Make(**ok, std::make_unique<HostMap>(ring)).ok());
}

TEST(GpuHostRingTest, FinishSpecOnlyForUint8WithFinishOn) {
  Options o;
  o.batch_size = 8;
  o.producer_batch = 16;
  producer::ProducerConfig cfg;
  cfg.options = o;
  cfg.expected_consumers = 1;
  cfg.max_consumer_batch = 8;
  cfg.socket_name = "batchcast-test-" + std::to_string(getpid()) + "-gpuhost-finish";
  cfg.job = "test";
  cfg.join_timeout_ms = 30000;
  auto leader = producer::Producer::Create(cfg, std::make_unique<SyntheticSource>(32, 8));
  ASSERT_TRUE(leader.ok()) << leader.status().ToString();
  GpuStagerConfig sc;
  sc.finish = true;
  cuda::DeviceRingConfig rc = GpuStager::RingConfigFor((*leader)->ring(), sc).value();
  EXPECT_EQ(rc.finished_bytes, rc.host_slot_bytes * sizeof(float));  // room for float32
  EXPECT_EQ(rc.finish_channels, 3);
  auto ring = std::make_unique<HostRing>(rc);
  HostRing* host_ring = ring.get();
  auto stager = GpuStager::CreateWithRing((*leader)->staging_target(), sc, std::move(ring));
  ASSERT_TRUE(stager.ok());
  ConsumerResult r;
  std::thread t(Consume, (*leader)->address(), 8, 1, 2, 0, std::ref(*host_ring), nullptr, &r);
  ASSERT_TRUE((*leader)->Run().ok());
  t.join();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(host_ring->finishes(), 2);  // 32 samples / 16 per producer batch
}

// `batchcast serve` stages through the same hook (dynamic membership: trials on other
// GPUs take the peer-copy path, which needs a second GPU and is not exercised here).
TEST(GpuHostRingTest, ServiceStagesEveryFilledSlot) {
  producer::ProducerConfig cfg;  // `batchcast serve`'s configuration
  cfg.who = "service";
  cfg.end_when_empty = false;
  cfg.socket_name = "batchcast-test-" + std::to_string(getpid()) + "-gpuhost-service";
  cfg.options.producer_batch = 16;
  cfg.options.batch_size = 8;
  cfg.options.ring_slots = 3;
  cfg.options.seed = 5;
  cfg.options.epochs = 2;
  auto service = producer::Producer::Create(cfg, std::make_unique<SyntheticSource>(64, 8));
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  GpuStagerConfig sc;
  auto ring = std::make_unique<HostRing>(GpuStager::RingConfigFor((*service)->ring(), sc).value());
  HostRing* host_ring = ring.get();
  auto stager = GpuStager::CreateWithRing((*service)->staging_target(), sc, std::move(ring));
  ASSERT_TRUE(stager.ok()) << stager.status().ToString();
  // The service owns its stager (node::CreateNodeProducer), and destroys it with itself at
  // the end of this test: the stager unhooks itself from a writer that must still exist
  // (`batchcast serve --gpu=on` crashed at exit on the GPU machine when it did not).
  (*service)->AdoptSlotHook(std::move(stager).value());
  ConsumerResult r;
  std::thread t(Consume, cfg.socket_name, 8, 2, 1, 0, std::ref(*host_ring), nullptr, &r);
  Status run = (*service)->Run();
  t.join();
  ASSERT_TRUE(run.ok()) << run.ToString();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.bad_pixels, 0);
  EXPECT_EQ(r.bad_labels, 0);
  ASSERT_EQ(r.seen.size(), 2u);
  for (const auto& [epoch, ids] : r.seen)
    EXPECT_EQ(std::set<int64_t>(ids.begin(), ids.end()).size(), 64u) << "epoch " << epoch;
  EXPECT_EQ(int64_t(host_ring->stats().h2d_copies), (*service)->stats().producer_batches);
  EXPECT_EQ(host_ring->restaged_while_held(), 0);
}

// The safe device path (docs/gpu.md): a fault at each step of the check keeps the trainer on
// the host path under gpu=auto with one WARN naming the step, fails it under gpu=on, and
// the trainer still gets every sample exactly once, byte-exact, from its host batches.
struct FallbackCase {
  Fault fault;
  const char* step;
};

class GpuCheckFallbackTest : public ::testing::TestWithParam<FallbackCase> {};

TEST_P(GpuCheckFallbackTest, AutoTakesTheHostPathOnFailsNamingTheStep) {
  const FallbackCase& fc = GetParam();
  Options o;
  o.batch_size = 8;
  o.producer_batch = 16;
  o.epochs = 2;
  o.ring_slots = 3;
  o.shuffle = true;
  o.seed = 3;
  producer::ProducerConfig cfg;
  cfg.options = o;
  cfg.expected_consumers = 1;
  cfg.max_consumer_batch = 8;
  cfg.socket_name = "batchcast-test-" + std::to_string(getpid()) + "-gpucheck-" +
                    std::to_string(int(fc.fault));
  cfg.job = "test";
  cfg.join_timeout_ms = 30000;
  auto leader = producer::Producer::Create(cfg, std::make_unique<SyntheticSource>(64, 8));
  ASSERT_TRUE(leader.ok()) << leader.status().ToString();
  GpuStagerConfig sc;
  auto ring = std::make_unique<HostRing>(GpuStager::RingConfigFor((*leader)->ring(), sc).value());
  HostRing* host_ring = ring.get();
  auto stager = GpuStager::CreateWithRing((*leader)->staging_target(), sc, std::move(ring));
  ASSERT_TRUE(stager.ok()) << stager.status().ToString();
  const std::string step = std::string("step '") + fc.step + "'";

  // gpu=on: the failure is the error, naming the step.
  Status fallback;
  auto on = OpenCheckedMap(GpuMode::kOn, OpenerFor(*host_ring, fc.fault), "", &fallback);
  ASSERT_FALSE(on.ok()) << "gpu=on accepted a device path broken at " << step;
  EXPECT_NE(on.status().message().find("gpu=on, but"), std::string::npos) << on.status().message();
  EXPECT_NE(on.status().message().find(step), std::string::npos) << on.status().message();
  EXPECT_NE(on.status().message().find(fc.fault == Fault::kChecksum ? "differs from the host bytes"
                                                                     : "injected"),
            std::string::npos) << on.status().message();

  // gpu=auto: no map (the host path), the cause kept, exactly one WARN saying how to report it.
  testing::internal::CaptureStderr();
  auto automatic = OpenCheckedMap(GpuMode::kAuto, OpenerFor(*host_ring, fc.fault), "gpu: trainer",
                                  &fallback);
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(automatic.ok()) << automatic.status().ToString();
  EXPECT_EQ(automatic.value(), nullptr) << "gpu=auto kept a device path broken at " << step;
  EXPECT_NE(fallback.message().find(step), std::string::npos) << fallback.message();
  size_t warns = 0;
  for (size_t at = err.find("gpu=auto: host path"); at != std::string::npos;
       at = err.find("gpu=auto: host path", at + 1))
    ++warns;
  EXPECT_EQ(warns, 1u) << err;
  EXPECT_NE(err.find(step), std::string::npos) << err;
  EXPECT_NE(err.find("Please report"), std::string::npos) << err;

  // The trainer goes on with what the check left it: device views when a map came back
  // (never, here), else its host batches. Every sample once per epoch, byte-exact.
  ConsumerResult r;
  std::thread t([&] {
    Options co = o;
    auto c = Consumer::Attach((*leader)->address(), co, 0);
    if (!c.ok()) {
      r.status = c.status();
      return;
    }
    std::unique_ptr<GpuConsumer> gpu;
    if (automatic.value() != nullptr) {
      auto g = internal::GpuConsumerFactory::Make(**c, std::move(automatic).value());
      if (!g.ok()) {
        r.status = g.status();
        return;
      }
      gpu = std::move(g).value();
    }
    for (;;) {
      Batch hb;
      DeviceBatch db;
      Status st = gpu ? gpu->Next(nullptr, &db) : (*c)->Next(&hb);
      if (st.code() == StatusCode::kEndOfStream) break;
      if (!st.ok()) {
        r.status = st;
        return;
      }
      const Batch& b = gpu ? db.host() : hb;
      const auto* pixels = static_cast<const uint8_t*>(gpu ? db.images().data : hb.images().data);
      const int64_t n = b.size();
      const size_t sb = b.images().nbytes / size_t(n);
      for (int64_t i = 0; i < n; ++i) {
        for (size_t k = 0; k < sb; ++k)
          r.bad_pixels += pixels[size_t(i) * sb + k] != SyntheticPixel(b.sample_ids()[i], k);
        r.seen[b.info().epoch].insert(b.sample_ids()[i]);
      }
    }
  });
  Status run = (*leader)->Run();
  ASSERT_TRUE((*stager)->Finish().ok());
  t.join();
  ASSERT_TRUE(run.ok()) << run.ToString();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.bad_pixels, 0);
  ASSERT_EQ(r.seen.size(), 2u);
  for (const auto& [epoch, ids] : r.seen) {
    EXPECT_EQ(ids.size(), 64u) << "epoch " << epoch;
    EXPECT_EQ(std::set<int64_t>(ids.begin(), ids.end()).size(), 64u) << "epoch " << epoch;
  }
}

INSTANTIATE_TEST_SUITE_P(EachStep, GpuCheckFallbackTest,
                         ::testing::Values(FallbackCase{Fault::kOpen, "open"},
                                           FallbackCase{Fault::kMap, "map"},
                                           FallbackCase{Fault::kEventImport, "event import"},
                                           FallbackCase{Fault::kChecksum, "checksum"}),
                         [](const auto& info) {
                           std::string n = info.param.step;
                           std::replace(n.begin(), n.end(), ' ', '_');
                           return n;
                         });

// A sound device path passes the check in both modes, without a WARN.
TEST(GpuCheckTest, SoundPathPassesWithoutWarning) {
  HostRing ring(cuda::DeviceRingConfig{});
  for (GpuMode mode : {GpuMode::kAuto, GpuMode::kOn}) {
    Status fallback;
    testing::internal::CaptureStderr();
    auto map = OpenCheckedMap(mode, OpenerFor(ring, Fault::kNone), "gpu: trainer", &fallback);
    const std::string err = testing::internal::GetCapturedStderr();
    ASSERT_TRUE(map.ok()) << map.status().ToString();
    EXPECT_NE(map.value(), nullptr);
    EXPECT_TRUE(fallback.ok()) << fallback.ToString();
    EXPECT_EQ(err.find("host path"), std::string::npos) << err;
  }
}

// A table from a leader that staged no canary (another version's) fails the check.
TEST(GpuCheckTest, TableWithoutCanaryFails) {
  HostRing ring(cuda::DeviceRingConfig{});
  HostMap map(ring);
  const_cast<cuda::DeviceSlotTable&>(ring.table()).canary_bytes = 0;
  Status st = VerifyDeviceMap(map);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("canary of 0 bytes"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace batchcast::gpu
