// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The leader's stream over every layout of the same samples is byte-identical: real JPEGs
// (and offline buckets) in layout version 1 (vlen, HDF5 per sample under the lock), version
// 2 (bytes + index, pread, no lock) and a version 1 file upgraded by ConvertUpgrade; raw
// pixels uncompressed (pread), gzip and lz4 (HDF5 once per chunk). Then the read timer:
// the time a worker waits for the HDF5 lock is BatchResult::read_lock_ns, never read_ns.
#include <gtest/gtest.h>
#include <pthread.h>

#include <filesystem>
#include <mutex>
#include <thread>

#include "core/clock.h"
#include "core/hdf5_lock.h"
#include "data/convert.h"
#include "data/dataset_writer.h"
#include "pipeline/pipeline.h"
#include "tests/unit/pipeline/test_images.h"

namespace batchcast::pipeline::read_layout_test {  // named: the unit build merges test files
namespace {

std::string Dir() {
  const std::string d = testing::TempDir() + "/read_layout_" + std::to_string(::getpid());
  std::filesystem::create_directories(d);
  return d;
}

// Real JPEGs of assorted sizes (crops of a photo), and 24x24 bucket images.
struct Set {
  std::vector<std::vector<uint8_t>> images, bucket;
  std::vector<int> widths, heights;
};

Set MakeSet(int n) {
  Set s;
  const testing::Image photo = testing::Photo(400, 300);
  for (int i = 0; i < n; ++i) {
    const int w = 40 + 13 * (i % 7), h = 30 + 11 * (i % 5);
    testing::Image img{w, h, 3, std::vector<uint8_t>(size_t(w) * h * 3)};
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int c = 0; c < 3; ++c)
          img.pixels[(size_t(y) * w + x) * 3 + c] = photo.at(y + i % 9, x + 3 * i % 17, c);
    s.images.push_back(testing::EncodeJpeg(img, 85, i % 2 ? TJSAMP_420 : TJSAMP_444));
    testing::Image small{24, 24, 3, std::vector<uint8_t>(24 * 24 * 3)};
    for (size_t k = 0; k < small.pixels.size(); ++k) small.pixels[k] = img.pixels[k % img.pixels.size()];
    s.bucket.push_back(testing::EncodeJpeg(small, 90, TJSAMP_420));
    s.widths.push_back(w);
    s.heights.push_back(h);
  }
  return s;
}

void WriteEncoded(const std::string& path, const Set& s, int layout_version) {
  data::DatasetSpec spec;
  spec.class_names = {"a", "b", "c"};
  spec.overwrite = true;
  spec.layout_version = layout_version;
  spec.bucket_sizes = {24};
  auto w = data::DatasetWriter::Create(path, spec);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (size_t i = 0; i < s.images.size(); ++i)
    ASSERT_TRUE((*w)->Append(s.images[i], int64_t(i % 3), s.widths[i], s.heights[i],
                             data::ImageEncoding::kJpeg,
                             std::vector<std::vector<uint8_t>>{s.bucket[i]})
                    .ok());
  ASSERT_TRUE((*w)->Finish().ok());
}

void WriteRaw(const std::string& path, int n, const std::string& compression) {
  data::DatasetSpec spec;
  spec.kind = data::SampleKind::kRaw;
  spec.raw_height = 20;
  spec.raw_width = 28;
  spec.raw_channels = 3;
  spec.compression = compression;
  spec.class_names = {"a", "b"};
  spec.overwrite = true;
  auto w = data::DatasetWriter::Create(path, spec);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const testing::Image photo = testing::Photo(200, 150);
  for (int i = 0; i < n; ++i) {
    std::vector<uint8_t> px(20 * 28 * 3);
    for (size_t k = 0; k < px.size(); ++k) px[k] = photo.pixels[(k + size_t(i) * 977) % photo.pixels.size()];
    ASSERT_TRUE((*w)->Append(px, i % 2, 28, 20).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
}

// Two shuffled epochs in batches of 16 on 2 threads: every output byte and label.
std::vector<uint8_t> Stream(const std::string& path, int image_size) {
  auto reader = data::DatasetReader::Open(path);
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  if (!reader.ok()) return {};
  Options o;
  o.threads = 2;
  o.image_size = image_size;
  o.crop = "random";
  o.flip = true;
  auto p = Pipeline::Create(o, *reader);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return {};
  const int64_t n = (*reader)->info().num_samples;
  const size_t sample = (*p)->OutputLayout(image_size).bytes();
  std::vector<uint8_t> out;
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[size_t(i)] = (i * 37 + int64_t(epoch) * 11) % n;
    for (int64_t first = 0; first < n; first += 16) {
      std::vector<int64_t> batch(order.begin() + first, order.begin() + std::min(n, first + 16));
      std::vector<uint8_t> images(sample * batch.size());
      std::vector<int64_t> labels(batch.size());
      BatchResult r;
      Status st = (*p)->RunBatch({epoch, batch, image_size, images.data(), labels.data()}, &r);
      EXPECT_TRUE(st.ok()) << st.ToString();
      out.insert(out.end(), images.begin(), images.end());
      for (int64_t l : labels) out.push_back(uint8_t(l));
    }
  }
  return out;
}

TEST(ReadLayoutStreamTest, OldAndNewEncodedLayoutsGiveByteIdenticalStreams) {
  const std::string dir = Dir();
  const Set s = MakeSet(61);  // not a multiple of the batch
  WriteEncoded(dir + "/v1.h5", s, 1);
  WriteEncoded(dir + "/v2.h5", s, 2);
  auto up = data::ConvertUpgrade({dir + "/v1.h5", dir + "/upgraded.h5", true}, nullptr);
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  for (int size : {32, 24}) {  // 24: the offline bucket is read instead of the original
    SCOPED_TRACE(size);
    const auto v1 = Stream(dir + "/v1.h5", size);
    ASSERT_FALSE(v1.empty());
    EXPECT_EQ(Stream(dir + "/v2.h5", size), v1);
    EXPECT_EQ(Stream(dir + "/upgraded.h5", size), v1);
  }
  std::filesystem::remove_all(dir);
}

TEST(ReadLayoutStreamTest, RawPixelsGiveTheSameStreamWithAnyCompression) {
  const std::string dir = Dir();
  WriteRaw(dir + "/none.h5", 300, "none");
  WriteRaw(dir + "/gzip.h5", 300, "gzip:1");
  WriteRaw(dir + "/lz4.h5", 300, "lz4");
  const auto none = Stream(dir + "/none.h5", 16);
  ASSERT_FALSE(none.empty());
  EXPECT_EQ(Stream(dir + "/gzip.h5", 16), none);
  EXPECT_EQ(Stream(dir + "/lz4.h5", 16), none);
  std::filesystem::remove_all(dir);
}

// glibc's mutex word is 2 while a thread sleeps in lock() waiting for it.
bool SomeoneWaitsForTheHdf5Lock() {
  return __atomic_load_n(&Hdf5Lock().native_handle()->__data.__lock, __ATOMIC_ACQUIRE) == 2;
}

TEST(ReadLockTimerTest, LockWaitsAreTheirOwnTimerNeverPartOfRead) {
  const std::string dir = Dir();
  const Set s = MakeSet(4);
  WriteEncoded(dir + "/v1.h5", s, 1);
  WriteEncoded(dir + "/v2.h5", s, 2);
  Options o;
  o.threads = 1;
  o.image_size = 32;
  for (const char* name : {"v1.h5", "v2.h5"}) {
    SCOPED_TRACE(name);
    auto reader = data::DatasetReader::Open(dir + "/" + name);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    const bool v1 = std::string(name) == "v1.h5";
    auto p = Pipeline::Create(o, *reader);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    std::vector<uint8_t> images((*p)->OutputLayout().bytes());
    std::vector<int64_t> labels(1), sample = {2};
    constexpr int64_t kHeldNs = 2'000'000;
    {
      // The test holds the process-wide lock while the worker reads sample 2: a version 1
      // read waits for it (seen on the mutex word), then at least kHeldNs more.
      std::unique_lock hold(Hdf5Lock());
      (*p)->StartBatch({0, sample, 0, images.data(), labels.data()});
      if (v1)
        while (!SomeoneWaitsForTheHdf5Lock()) std::this_thread::yield();
      else
        ASSERT_TRUE((*p)->WaitOldest(60000)) << "a version 2 read must not need the lock";
      const int64_t t0 = core::SteadyNowNs();
      while (core::SteadyNowNs() - t0 < kHeldNs) {
      }
    }
    BatchResult r;
    ASSERT_TRUE((*p)->FinishBatch(&r).ok());
    EXPECT_EQ(r.written, 1);
    EXPECT_GT(r.read_ns, 0);
    if (v1) {
      EXPECT_GE(r.read_lock_ns, kHeldNs);
    } else {
      EXPECT_EQ(r.read_lock_ns, 0);
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace batchcast::pipeline::read_layout_test
