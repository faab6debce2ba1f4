// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Device-only checks (label gpu; each skips with "no CUDA device: <cause>" without one):
//   - NCCL on a 1-rank communicator: unique id, init, broadcast, fan-out header + ranges,
//     end of stream, destroy (the multi-GPU broadcast itself needs two GPUs);
//   - the finishing kernel against the CPU pipeline's normalize + HWC->CHW pass;
//   - a stream waiting on a slot's sequence word (the relay's ordering).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "pipeline/transform.h"
#include "tests/unit/gpu/require_device.h"
#include "transport/cuda/device_probe.h"
#include "transport/cuda/device_ring.h"
#include "transport/cuda/nccl_broadcast.h"
#include "transport/cuda/nccl_fanout.h"
#include "transport/cuda/stream_value.h"

#if BATCHCAST_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace batchcast::cuda {
namespace {

#if BATCHCAST_HAVE_CUDA

// Device buffer owned for one test.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t n) { EXPECT_EQ(cudaMalloc(&p, n), cudaSuccess); }
  ~DeviceBuffer() { (void)cudaFree(p); }
};

TEST(NcclOneRankTest, InitBroadcastDestroy) {
  BC_REQUIRE_DEVICE();
  auto id = NcclBroadcast::NewUniqueId();
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id.value().size(), kNcclIdBytes);
  auto comm = NcclBroadcast::Create(id.value(), 1, 0, 0);
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  EXPECT_EQ((*comm)->size(), 1);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  std::vector<uint8_t> host(1 << 20);
  for (size_t i = 0; i < host.size(); ++i) host[i] = uint8_t(i * 7);
  DeviceBuffer buf(host.size());
  ASSERT_EQ(cudaMemcpy(buf.p, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE((*comm)->Broadcast(buf.p, host.size(), 0, s).ok());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::vector<uint8_t> back(host.size());
  ASSERT_EQ(cudaMemcpy(back.data(), buf.p, back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);  // a root's broadcast leaves its buffer intact
  EXPECT_EQ((*comm)->bytes(), host.size());
  comm.value().reset();  // ncclCommDestroy
  (void)cudaStreamDestroy(s);
  EXPECT_FALSE(NcclBroadcast::Create("short", 1, 0, 0).ok());
}

TEST(NcclOneRankTest, FanoutRootSendsBatchesAndEnd) {
  BC_REQUIRE_DEVICE();
  auto id = NcclBroadcast::NewUniqueId();
  ASSERT_TRUE(id.ok());
  auto comm = NcclBroadcast::Create(id.value(), 1, 0, 0);
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  auto fanout = NcclFanout::CreateRoot(std::move(comm).value(), 0);
  ASSERT_TRUE(fanout.ok()) << fanout.status().ToString();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  DeviceBuffer slot(1 << 16);
  const SlotRange ranges[3] = {{0, 4096}, {8192, 128}, {12288, 128}};
  for (uint64_t seq = 0; seq < 40; ++seq)  // more than kMaxDeviceSlots headers in flight
    ASSERT_TRUE((*fanout)->Send(uint32_t(seq % 4), seq, ranges, nullptr,
                                static_cast<uint8_t*>(slot.p), s).ok());
  ASSERT_TRUE((*fanout)->SendEnd(s).ok());
  EXPECT_EQ((*fanout)->bytes(), 40u * (4096 + 128 + 128));
  (void)cudaStreamDestroy(s);
}

TEST(FinishKernelTest, MatchesTheCpuNormalizePass) {
  BC_REQUIRE_DEVICE();
  const int n = 3, c = 3, h = 17, w = 23;  // odd sizes: no lucky alignment
  const std::vector<double> mean = {0.485, 0.456, 0.406}, stdv = {0.229, 0.224, 0.225};
  std::vector<uint8_t> hwc(size_t(n) * h * w * c);
  for (size_t i = 0; i < hwc.size(); ++i) hwc[i] = uint8_t((i * 131 + 7) % 256);
  // CPU: the pipeline's final pass, float32 CHW with normalize, no flip.
  pipeline::OutputSpec spec;
  spec.layout.channels = c;
  spec.layout.height = h;
  spec.layout.width = w;
  spec.layout.dtype = pipeline::DType::kFloat32;
  spec.layout.layout = pipeline::Layout::kCHW;
  pipeline::BuildOutputLut(mean, stdv, &spec);
  std::vector<float> cpu(size_t(n) * c * h * w);
  for (int i = 0; i < n; ++i) {
    pipeline::PixelView v{hwc.data() + size_t(i) * h * w * c, size_t(w) * c, w, h, c};
    pipeline::WriteOutput(v, false, spec, cpu.data() + size_t(i) * c * h * w);
  }
  // GPU: the finishing kernel on the same uint8 HWC bytes.
  DeviceBuffer in(hwc.size()), out(cpu.size() * sizeof(float));
  ASSERT_EQ(cudaMemcpy(in.p, hwc.data(), hwc.size(), cudaMemcpyHostToDevice), cudaSuccess);
  FinishSpec f;
  f.samples = n;
  f.channels = c;
  f.height = h;
  f.width = w;
  f.channels_last = true;
  for (int k = 0; k < 3; ++k) {
    f.mean[k] = float(mean[k]);
    f.inv_std[k] = float(1.0 / stdv[k]);
  }
  ASSERT_TRUE(LaunchFinish(static_cast<uint8_t*>(in.p), static_cast<float*>(out.p), f, nullptr).ok());
  std::vector<float> gpu(cpu.size());
  ASSERT_EQ(cudaMemcpy(gpu.data(), out.p, gpu.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  int64_t bad = 0;
  for (size_t i = 0; i < cpu.size(); ++i) bad += std::fabs(cpu[i] - gpu[i]) > 1e-5f;
  EXPECT_EQ(bad, 0) << "of " << cpu.size() << " values";
}

TEST(StreamValueTest, StreamWaitsForTheSequenceWord) {
  BC_REQUIRE_DEVICE();
  DeviceBuffer word(sizeof(uint64_t)), data(4);
  ASSERT_EQ(cudaMemset(word.p, 0, sizeof(uint64_t)), cudaSuccess);
  ASSERT_EQ(cudaMemset(data.p, 0, 4), cudaSuccess);
  cudaStream_t waiter, writer;
  ASSERT_EQ(cudaStreamCreateWithFlags(&waiter, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&writer, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_TRUE(StreamWaitValue(waiter, word.p, 5).ok());
  ASSERT_EQ(cudaMemsetAsync(data.p, 0x5A, 4, waiter), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(waiter), cudaErrorNotReady);  // blocked on the word
  ASSERT_TRUE(StreamWriteValue(writer, word.p, 5).ok());
  ASSERT_EQ(cudaStreamSynchronize(waiter), cudaSuccess);
  uint8_t back[4] = {};
  ASSERT_EQ(cudaMemcpy(back, data.p, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back[0], 0x5A);
  (void)cudaStreamDestroy(waiter);
  (void)cudaStreamDestroy(writer);
}

#else  // CPU-only build: the same tests, skipped with the reason.

TEST(NcclOneRankTest, InitBroadcastDestroy) { BC_REQUIRE_DEVICE(); }
TEST(NcclOneRankTest, FanoutRootSendsBatchesAndEnd) { BC_REQUIRE_DEVICE(); }
TEST(FinishKernelTest, MatchesTheCpuNormalizePass) { BC_REQUIRE_DEVICE(); }
TEST(StreamValueTest, StreamWaitsForTheSequenceWord) { BC_REQUIRE_DEVICE(); }

#endif

}  // namespace
}  // namespace batchcast::cuda
