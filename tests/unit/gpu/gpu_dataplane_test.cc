// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The GPU data plane (label gpu). Placement, DLPack and the CPU-only stub run anywhere;
// every test that needs a device starts with GTEST_SKIP() << "no CUDA device: ..." when
// cudaGetDeviceCount fails or returns 0, so CPU-only CI is green and says what it skipped.
// Written to run on an H100/H200: a leader in this process stages batches on GPU 0 and
// consumers in re-executed child processes (gpu_child.h) read them through CUDA IPC.
#include <dlpack/dlpack.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "batchcast/consumer.h"
#include "batchcast/gpu.h"
#include "node/consumer_internal.h"
#include "gpu/gpu_dlpack.h"
#include "gpu/gpu_stager.h"
#include "producer/producer.h"
#include "tests/unit/gpu/gpu_child.h"
#include "tests/unit/gpu/require_device.h"
#include "tests/unit/node/synthetic_source.h"
#include "transport/cuda/device_map.h"
#include "transport/cuda/device_probe.h"
#include "transport/cuda/handle_server.h"
#include "transport/shm/segment.h"

#if BATCHCAST_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace batchcast {
namespace {

using node::SyntheticPixel;

// --- anywhere: placement, DLPack, the stub ------------------------------------------

TEST(GpuPlacementTest, KTrainersPerGpuShareOneDevice) {
  EXPECT_EQ(GpuForLocalRank(0, 2, 4).value(), 0);
  EXPECT_EQ(GpuForLocalRank(1, 2, 4).value(), 0);
  EXPECT_EQ(GpuForLocalRank(2, 2, 4).value(), 1);
  EXPECT_EQ(GpuForLocalRank(7, 2, 4).value(), 3);
  EXPECT_EQ(GpuForLocalRank(3, 1, 4).value(), 3);
}

TEST(GpuPlacementTest, TooFewGpusNamesTheShortfall) {
  auto r = GpuForLocalRank(8, 2, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("needs GPU 4"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("sees 4"), std::string::npos);
  EXPECT_FALSE(GpuForLocalRank(0, 0, 4).ok());
  EXPECT_FALSE(GpuForLocalRank(-1, 1, 4).ok());
  EXPECT_EQ(GpuForLocalRank(0, 1, 0).status().code(), StatusCode::kUnavailable);
}

TEST(GpuPlacementTest, NoDeviceGivesTheProbeMessage) {
  auto n = cuda::VisibleDeviceCount();
  if (n.ok()) GTEST_SKIP() << "a CUDA device is visible: nothing to check here";
  auto r = SelectGpu({0, 1});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(r.status().message().rfind("no CUDA device visible: ", 0), 0u) << r.status().message();
}

TEST(GpuStubTest, DeviceRingAndMapRefuseWithoutDevice) {
  if (cuda::VisibleDeviceCount().ok()) GTEST_SKIP() << "a CUDA device is visible";
  cuda::DeviceRingConfig rc;
  rc.num_slots = 2;
  auto ring = cuda::DeviceRing::Create(rc);
  ASSERT_FALSE(ring.ok());
  EXPECT_NE(ring.status().message().find("no CUDA device visible"), std::string::npos);
  auto map = cuda::DeviceMap::Open("batchcast-test-none.gpu", 0, 10);
  ASSERT_FALSE(map.ok());
}

TEST(GpuDlpackTest, DescribesADeviceTensorAndDropsTheKeepAlive) {
  float dummy = 0;
  DeviceTensorView v;
  v.data = &dummy;
  v.dtype = DType::kFloat32;
  v.ndim = 4;
  v.shape[0] = 8, v.shape[1] = 3, v.shape[2] = 32, v.shape[3] = 32;
  v.device = 1;
  auto keep = std::make_shared<int>(7);
  std::weak_ptr<int> watch = keep;
  DLManagedTensor* m = gpu::ToDlpack(v, keep);
  keep.reset();
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(m->dl_tensor.device.device_id, 1);
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLFloat);
  EXPECT_EQ(m->dl_tensor.dtype.bits, 32);
  EXPECT_EQ(m->dl_tensor.ndim, 4);
  EXPECT_EQ(m->dl_tensor.shape[1], 3);
  EXPECT_FALSE(watch.expired());  // the capsule keeps the slot
  m->deleter(m);
  EXPECT_TRUE(watch.expired());
}

// --- on a device ----------------------------------------------------------------------

std::string UniqueSocket(const char* tag) {
  static int n = 0;
  return "batchcast-gputest-" + std::to_string(getpid()) + "-" + tag + "-" + std::to_string(n++);
}

struct GpuJob {
  int consumers = 1;
  int epochs = 1;
  int64_t samples = 96;
  int ring_slots = 4;
  std::string mode = "check";
  int buffer_depth = 2;  // each consumer's; must be below ring_slots (the leader refuses more)
};

struct GpuJobResult {
  Status leader;
  std::vector<int> exit_codes;
  std::vector<std::map<std::string, std::string>> results;
  cuda::DeviceRingStats ring;
  std::vector<uint8_t> slot_bytes;  // alias mode: the leader's view of the marked slot
};

GpuJobResult RunGpuJob(const GpuJob& job) {
  GpuJobResult r;
  Options o;
  o.batch_size = 8;
  o.producer_batch = 16;
  o.epochs = job.epochs;
  o.ring_slots = job.ring_slots;
  producer::ProducerConfig cfg;
  cfg.options = o;
  cfg.expected_consumers = job.consumers;
  cfg.max_consumer_batch = 8;
  cfg.socket_name = UniqueSocket("gpu");
  cfg.job = "gputest";
  cfg.join_timeout_ms = 30000;
  auto leader = producer::Producer::Create(cfg, std::make_unique<node::SyntheticSource>(job.samples, 16));
  if (!leader.ok()) {
    r.leader = leader.status();
    return r;
  }
  auto stager = gpu::GpuStager::Create((*leader)->staging_target(), {});
  if (!stager.ok()) {
    r.leader = stager.status();
    return r;
  }
  std::vector<pid_t> pids;
  std::vector<std::string> outs;
  for (int i = 0; i < job.consumers; ++i) {
    gputest::ChildJob cj;
    cj.address = (*leader)->address();
    cj.out = ::testing::TempDir() + cfg.socket_name + "-" + std::to_string(i) + ".txt";
    cj.mode = job.mode;
    cj.rank = i;
    cj.epochs = job.epochs;
    cj.buffer_depth = job.buffer_depth;
    outs.push_back(cj.out);
    pids.push_back(gputest::SpawnChild(cj));
  }
  r.leader = (*leader)->Run();
  for (size_t i = 0; i < pids.size(); ++i) {
    r.exit_codes.push_back(pids[i] > 0 ? gputest::WaitChild(pids[i]) : -1);
    r.results.push_back(gputest::ReadResult(outs[i]));
    std::remove(outs[i].c_str());
  }
  // A leader that failed (no consumer joined, say) is explained by what its consumers said.
  if (!r.leader.ok())
    for (size_t i = 0; i < r.results.size(); ++i)
      if (r.results[i].count("error"))
        r.leader = r.leader.WithContext("consumer " + std::to_string(i) + " said: " +
                                        r.results[i]["error"]);
  (void)(*stager)->ring().Synchronize();
  r.ring = (*stager)->ring().stats();
#if BATCHCAST_HAVE_CUDA
  if (job.mode == "alias" && !r.results.empty() && r.results[0].count("slot")) {
    uint32_t slot = std::stoul(r.results[0]["slot"]);
    uint64_t off = std::stoull(r.results[0]["offset"]);
    r.slot_bytes.resize(4);
    auto* dev = static_cast<uint8_t*>((*stager)->ring().device_slot(slot));
    if (cudaMemcpy(r.slot_bytes.data(), dev + off, 4, cudaMemcpyDeviceToHost) != cudaSuccess)
      r.slot_bytes.clear();
  }
#endif
  return r;
}

int64_t Get(const std::map<std::string, std::string>& kv, const char* key) {
  auto it = kv.find(key);
  return it == kv.end() ? -1 : std::stoll(it->second);
}

void ExpectExactlyOnce(const GpuJobResult& r, int epochs, int64_t samples) {
  ASSERT_TRUE(r.leader.ok()) << r.leader.ToString();
  for (size_t i = 0; i < r.results.size(); ++i) {
    SCOPED_TRACE("consumer " + std::to_string(i));
    EXPECT_EQ(r.exit_codes[i], 0);
    const auto& kv = r.results[i];
    ASSERT_EQ(kv.count("error"), 0u) << kv.at("error");
    EXPECT_EQ(Get(kv, "epochs"), epochs);
    EXPECT_EQ(Get(kv, "distinct"), epochs * samples);  // each sample once per epoch
    EXPECT_EQ(Get(kv, "missing"), 0);
    EXPECT_EQ(Get(kv, "bad_pixels"), 0);             // device bytes == the source's bytes
    EXPECT_EQ(Get(kv, "bad_labels"), 0);
    EXPECT_EQ(Get(kv, "peer"), 0);
  }
}

TEST(GpuDataPlaneTest, ExactlyOnceAndChecksumsOnDevice) {
  BC_REQUIRE_DEVICE();
  for (int k : {1, 3, 4}) {  // 3: the leader and three trainer processes of docs/gpu.md
    SCOPED_TRACE("consumers " + std::to_string(k));
    GpuJobResult r = RunGpuJob({k, 2, 96, 4, "check"});
    ExpectExactlyOnce(r, 2, 96);
    // One H2D copy per producer batch whatever K is: 96 / 16 per epoch.
    EXPECT_EQ(r.ring.h2d_copies, 2u * 6u);
  }
}

TEST(GpuDataPlaneTest, ConsumerPointerAliasesTheLeaderAllocation) {
  BC_REQUIRE_DEVICE();
  // 4 producer batches in 8 slots: no slot is reused, so the consumer's mark survives.
  GpuJobResult r = RunGpuJob({1, 1, 64, 8, "alias"});
  ASSERT_TRUE(r.leader.ok()) << r.leader.ToString();
  ASSERT_EQ(r.exit_codes[0], 0);
  ASSERT_EQ(r.slot_bytes.size(), 4u) << "could not read the leader's slot back";
  for (uint8_t b : r.slot_bytes) EXPECT_EQ(b, 0xAB);  // written by the consumer through IPC
  EXPECT_LE(Get(r.results[0], "handles"), 8);
}

TEST(GpuDataPlaneTest, ReleaseOrderingUnderConcurrentDeviceWork) {
  BC_REQUIRE_DEVICE();
  // "late": each consumer queues a large memset before reading the batch (into pinned host
  // memory, so the reads are asynchronous) and releases the batch before that work has run;
  // a 2-slot ring (buffer_depth 1) makes the leader want the slot at once.
  GpuJobResult r = RunGpuJob({2, 2, 96, 2, "late", 1});
  ExpectExactlyOnce(r, 2, 96);
}

TEST(GpuDataPlaneTest, NoDeviceMemoryGrowthOverManyEpochs) {
  BC_REQUIRE_DEVICE();
  GpuJobResult r = RunGpuJob({2, 20, 48, 4, "check"});
  ExpectExactlyOnce(r, 20, 48);
  for (const auto& kv : r.results) {
    EXPECT_LE(Get(kv, "handles"), 4);                // opened once per slot, cached
    EXPECT_LE(Get(kv, "growth_bytes"), 2 << 20);     // device free memory, epoch 2 vs last
  }
}

// Stream memory operations on an IPC-mapped address (docs/gpu.md, what a relay's consumer
// does): a receive-only ring with sequence words in this process, a child that maps slot 0
// by IPC and queues, on its stream, a wait for the slot's sequence word and then a read.
// The child reports that its stream is blocked before this process stages the slot; then
// the read must see the staged bytes.
#if BATCHCAST_HAVE_CUDA
TEST(GpuDataPlaneTest, StreamWaitsOnAnIpcMappedSequenceWord) {
  BC_REQUIRE_DEVICE();
  cuda::DeviceRingConfig rc;
  rc.num_slots = 1;
  rc.host_slot_bytes = 4096;
  rc.seq_words = true;  // host_slots null: receive-only, like an NCCL relay's ring
  auto ring = cuda::DeviceRing::Create(rc);
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  const std::string socket = UniqueSocket("seqword");
  auto server = cuda::HandleServer::Create(socket, (*ring)->table());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  gputest::ChildJob cj;
  cj.address = socket;
  cj.out = ::testing::TempDir() + socket + ".txt";
  cj.mode = "seqword";
  const std::string waiting = cj.out + ".waiting";
  std::remove(waiting.c_str());
  pid_t pid = gputest::SpawnChild(cj);
  ASSERT_GT(pid, 0);
  // The child says when its stream waits (or that it failed); 30 s bounds a broken child,
  // which is then killed (a child blocked in CUDA would outlive the test otherwise).
  bool ready = false;
  for (int i = 0; i < 3000 && !ready; ++i) {
    ready = std::ifstream(waiting).good() || std::ifstream(cj.out).good();
    if (!ready) usleep(10000);
  }
  if (!ready) {
    kill(pid, SIGKILL);
    gputest::WaitChild(pid);
  }
  ASSERT_TRUE(ready) << "the consumer process never reported within 30 s (killed)";
  Status st = (*ring)->Stage(0, 0, {}, nullptr, [](uint8_t* memory, void* stream) -> Status {
    if (cudaMemsetAsync(memory, 0x5C, 64, static_cast<cudaStream_t>(stream)) != cudaSuccess)
      return InternalError("memset");
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(gputest::WaitChild(pid), 0);
  auto kv = gputest::ReadResult(cj.out);
  std::remove(cj.out.c_str());
  std::remove(waiting.c_str());
  ASSERT_EQ(kv.count("error"), 0u) << kv["error"];
  EXPECT_EQ(kv["blocked"], "1");  // the wait held the read back until the word was written
  EXPECT_EQ(kv["value"], std::to_string(0x5C));
}
#else
TEST(GpuDataPlaneTest, StreamWaitsOnAnIpcMappedSequenceWord) { BC_REQUIRE_DEVICE(); }
#endif

// --- the consumer process (run by RunGpuJob through gpu_child.h) ----------------------

#if BATCHCAST_HAVE_CUDA
// StreamWaitsOnAnIpcMappedSequenceWord's consumer: maps slot 0 by IPC, its stream waits for
// the sequence word of position 0, then reads; reports whether the stream was blocked.
std::string RunSeqwordChild(const std::string& socket, const std::string& out) {
  auto map = cuda::DeviceMap::Open(socket, 0, 60000);
  if (!map.ok()) return "error=open:" + map.status().message();
  cudaStream_t stream;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return "error=stream";
  auto memory = (*map)->Acquire(0, 0, {}, stream);  // IPC open + StreamWaitValue(word >= 1)
  if (!memory.ok()) return "error=acquire:" + memory.status().message();
  // Pinned: a copy into pageable memory returns only when it has run, which here would be
  // never (the stream waits for the word the parent writes after it hears from us).
  void* pinned_byte = nullptr;
  if (cudaMallocHost(&pinned_byte, 1) != cudaSuccess) return "error=pinned";
  std::unique_ptr<void, cudaError_t (*)(void*)> pinned(pinned_byte, cudaFreeHost);
  auto* value_ptr = static_cast<uint8_t*>(pinned_byte);
  *value_ptr = 0;
  if (cudaMemcpyAsync(value_ptr, *memory, 1, cudaMemcpyDeviceToHost, stream) != cudaSuccess)
    return "error=read";
  const bool blocked = cudaStreamQuery(stream) == cudaErrorNotReady;
  std::ofstream(out + ".waiting") << "1\n";
  if (cudaStreamSynchronize(stream) != cudaSuccess) return "error=sync";
  const uint8_t value = *value_ptr;
  Status st = (*map)->Release(0, stream);
  if (!st.ok()) return "error=release:" + st.message();
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  return "blocked=" + std::to_string(int(blocked)) + " value=" + std::to_string(int(value));
}

// Consumes the stream on GPU 0 and checks every device byte against the source.
std::string RunChild(const std::string& mode, int epochs) {
  const std::string address = std::getenv("BC_GPU_CHILD_ADDRESS");
  if (mode == "seqword") return RunSeqwordChild(address, std::getenv("BC_GPU_CHILD_OUT"));
  Options o;
  o.batch_size = std::atoi(std::getenv("BC_GPU_CHILD_BATCH"));
  o.buffer_depth = std::atoi(std::getenv("BC_GPU_CHILD_DEPTH"));
  o.epochs = epochs;
  auto consumer = Consumer::Attach(address, o, std::atoi(std::getenv("BC_GPU_CHILD_RANK")));
  if (!consumer.ok()) return "error=" + consumer.status().message();
  auto gpu = GpuConsumer::Attach(**consumer, address, 0);
  if (!gpu.ok()) return "error=attach:" + gpu.status().message();
  cudaStream_t stream;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return "error=stream";
  void* scratch = nullptr;
  const size_t scratch_bytes = size_t(256) << 20;
  if (mode == "late" && cudaMalloc(&scratch, scratch_bytes) != cudaSuccess) return "error=scratch";
  const shm::SegmentView* seg = internal::ConsumerAccess::Segment(**consumer);
  std::map<uint64_t, std::set<int64_t>> seen;
  int64_t bad_pixels = 0, bad_labels = 0, epochs_seen = 0;
  size_t free_first = 0, free_last = 0, total = 0;
  uint64_t epoch = ~0ULL;
  std::string alias;
  // Pinned host buffers: copies into pageable memory would return only when they have run,
  // so the "late" release below would come after the reads instead of before them.
  using Pinned = std::unique_ptr<void, cudaError_t (*)(void*)>;
  Pinned pixel_buffer(nullptr, cudaFreeHost), label_buffer(nullptr, cudaFreeHost);
  size_t pixel_capacity = 0, label_capacity = 0;
  auto pinned = [](Pinned* p, size_t* capacity, size_t bytes) {
    if (bytes <= *capacity) return true;
    void* q = nullptr;
    if (cudaMallocHost(&q, bytes) != cudaSuccess) return false;
    p->reset(q);
    *capacity = bytes;
    return true;
  };
  DeviceBatch b;
  for (;;) {
    Status st = (*gpu)->Next(stream, &b);
    if (st.code() == StatusCode::kEndOfStream) break;
    if (!st.ok()) return "error=next:" + st.message();
    if (b.info().epoch != epoch) {
      // Device memory is counted for the whole device: measure from the third epoch on, when
      // every process of the job has its context (the ring's back-pressure holds this
      // consumer within ring_slots producer batches of the slowest one, less than an epoch).
      if (epochs_seen == 2) cudaMemGetInfo(&free_first, &total);
      epoch = b.info().epoch;
      ++epochs_seen;
    }
    const int64_t n = b.size();
    const size_t sb = b.images().nbytes / size_t(n);
    if (!pinned(&pixel_buffer, &pixel_capacity, b.images().nbytes) ||
        !pinned(&label_buffer, &label_capacity, size_t(n) * sizeof(int64_t)))
      return "error=pinned";
    auto* pixels = static_cast<uint8_t*>(pixel_buffer.get());
    auto* labels = static_cast<int64_t*>(label_buffer.get());
    std::vector<int64_t> ids(b.host().sample_ids(), b.host().sample_ids() + n);
    if (mode == "late")  // device work queued ahead of the reads, still pending at release
      for (int i = 0; i < 8; ++i) cudaMemsetAsync(scratch, i, scratch_bytes, stream);
    cudaMemcpyAsync(pixels, b.images().data, b.images().nbytes, cudaMemcpyDeviceToHost, stream);
    cudaMemcpyAsync(labels, b.labels().data, size_t(n) * sizeof(int64_t),
                    cudaMemcpyDeviceToHost, stream);
    if (mode == "alias" && alias.empty()) {
      cudaMemsetAsync(b.images().data, 0xAB, 4, stream);  // visible in the leader's allocation?
      const uint8_t* base0 = seg->data(0);
      const auto* host = static_cast<const uint8_t*>(b.host().images().data);
      const uint64_t slot = uint64_t(host - base0) / seg->geo.slot_bytes;
      alias = " slot=" + std::to_string(slot) +
              " offset=" + std::to_string(uint64_t(host - base0) - slot * seg->geo.slot_bytes);
    }
    b.Release();  // records the release event; the reads above may not have run yet
    if (cudaStreamSynchronize(stream) != cudaSuccess) return "error=sync";
    for (int64_t i = 0; i < n; ++i) {
      // alias mode marks the first 4 bytes of each batch's first image; skip those.
      for (size_t k = (mode == "alias" && i == 0) ? 4 : 0; k < sb; ++k)
        bad_pixels += pixels[size_t(i) * sb + k] != node::SyntheticPixel(ids[size_t(i)], k);
      bad_labels += labels[size_t(i)] != ids[size_t(i)] % 10;
      seen[epoch].insert(ids[size_t(i)]);
    }
  }
  cudaMemGetInfo(&free_last, &total);
  int64_t distinct = 0, missing = 0;
  const int64_t samples = int64_t(seg->stream->epoch_samples);
  for (auto& [e, ids] : seen) {
    distinct += int64_t(ids.size());
    missing += samples - int64_t(ids.size());
  }
  GpuConsumerStats gs = (*gpu)->stats();
  int64_t growth = free_first > free_last ? int64_t(free_first - free_last) : 0;
  if (scratch) cudaFree(scratch);
  cudaStreamDestroy(stream);
  return "epochs=" + std::to_string(epochs_seen) + " distinct=" + std::to_string(distinct) +
         " missing=" + std::to_string(missing) + " bad_pixels=" + std::to_string(bad_pixels) +
         " bad_labels=" + std::to_string(bad_labels) + " handles=" +
         std::to_string(gs.handles_opened) + " peer=" + std::to_string(int(gs.peer)) +
         " growth_bytes=" + std::to_string(free_first != 0 ? growth : 0) + alias;
}
#endif

TEST(GpuChild, DISABLED_Consumer) {
  const char* out = std::getenv("BC_GPU_CHILD_OUT");
  if (out == nullptr) GTEST_SKIP() << "runs only as a consumer process of the GPU tests";
#if BATCHCAST_HAVE_CUDA
  std::string line = RunChild(std::getenv("BC_GPU_CHILD_MODE"), std::atoi(std::getenv("BC_GPU_CHILD_EPOCHS")));
#else
  std::string line = "error=built without CUDA";
#endif
  std::ofstream(out) << line << "\n";
}

}  // namespace
}  // namespace batchcast
