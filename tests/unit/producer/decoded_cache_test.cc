// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The decoded-sample cache (producer/decoded_cache.h, option `cache`): batches bit-identical
// with and without it over several epochs (random crop + flip, crop decoding on, several
// batches in flight on several workers), the same bytes whatever part of the dataset it
// holds, bad samples never kept, hit counts per batch, admission until full, and the budget
// refusal and warning through the producer core's MakePipelineSource.
#include "producer/decoded_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "producer/batch_source.h"
#include "tests/unit/pipeline/memory_reader.h"
#include "tests/unit/producer/photo_dataset.h"

namespace batchcast::producer {
namespace {

using pipeline::BatchResult;
using pipeline::Pipeline;

std::vector<std::vector<uint8_t>> Images(int n) { return testing::PhotoSamples(n); }

Options RandomCropFlip() {
  Options o;
  o.threads = 3;
  o.image_size = 48;
  o.crop = "random";
  o.flip = true;
  o.crop_decode = true;
  o.dct_scaling = false;  // see WithDctScalingRandomCropsStayWithinTolerance
  return o;
}

struct EpochRun {
  std::vector<std::vector<uint8_t>> epochs;  // output bytes of every epoch, batches in order
  std::vector<int64_t> hits, misses;         // per epoch
};

// `epochs` epochs of a shuffled order in batches of 8, four batches in flight (the leader's
// look-ahead: the next epoch's first batches overlap the last ones of this epoch).
EpochRun RunEpochs(const Options& o, std::shared_ptr<data::DatasetReader> reader,
              std::shared_ptr<pipeline::DecodedSampleCache> cache, int epochs) {
  auto created = Pipeline::Create(o, reader, cache);
  EXPECT_TRUE(created.ok()) << created.status().ToString();
  EpochRun run;
  if (!created.ok()) return run;
  Pipeline& p = **created;
  const int64_t n = reader->info().num_samples, batch = 8;
  const size_t bytes = p.OutputLayout().bytes();
  struct Batch {
    uint64_t epoch;
    std::vector<int64_t> samples;
    std::vector<uint8_t> images;
    std::vector<int64_t> labels;
  };
  std::vector<std::unique_ptr<Batch>> batches;
  for (int e = 0; e < epochs; ++e) {
    std::vector<int64_t> order(n);
    for (int64_t i = 0; i < n; ++i) order[i] = (i * 7 + e * 3) % n;  // n is prime to 7
    for (int64_t s = 0; s < n; s += batch) {
      auto b = std::make_unique<Batch>();
      b->epoch = e;
      b->samples.assign(order.begin() + s, order.begin() + std::min(n, s + batch));
      b->images.resize(bytes * b->samples.size());
      b->labels.resize(b->samples.size());
      batches.push_back(std::move(b));
    }
  }
  run.epochs.resize(epochs);
  run.hits.assign(epochs, 0);
  run.misses.assign(epochs, 0);
  size_t finished = 0;
  auto finish = [&] {
    BatchResult r;
    const Batch& b = *batches[finished++];
    Status st = p.FinishBatch(&r);
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(r.written, int64_t(b.samples.size()));
    run.epochs[b.epoch].insert(run.epochs[b.epoch].end(), b.images.begin(), b.images.end());
    run.hits[b.epoch] += r.cache_hits;
    run.misses[b.epoch] += r.cache_misses;
  };
  for (auto& b : batches) {
    if (p.batches_in_flight() == 4) finish();
    p.StartBatch({b->epoch, b->samples, 0, b->images.data(), b->labels.data()});
  }
  while (finished < batches.size()) finish();
  return run;
}

std::shared_ptr<DecodedCache> Cache(int64_t budget, const data::DatasetReader& reader) {
  return std::make_shared<DecodedCache>(budget, pipeline::DecodedCacheKeys(reader.info()),
                                        reader.info().path);
}

TEST(DecodedCacheTest, BatchesAreBitIdenticalWithAndWithoutTheCache) {
  auto reader = testing::MemoryReader::Encoded(Images(41));
  for (const char* crop : {"random", "center", "none"}) {
    Options o = RandomCropFlip();
    o.crop = crop;
    o.dct_scaling = std::string(crop) != "random";  // fixed boxes: the online decode's scale
    const EpochRun off = RunEpochs(o, reader, nullptr, 3);
    auto cache = Cache(1LL << 30, *reader);
    const EpochRun on = RunEpochs(o, reader, cache, 3);
    for (int e = 0; e < 3; ++e) {
      ASSERT_FALSE(off.epochs[e].empty());
      EXPECT_TRUE(on.epochs[e] == off.epochs[e]) << "crop=" << crop << " epoch " << e;
    }
    EXPECT_NE(off.epochs[0], off.epochs[1]) << "the random steps must stay online";
    // Epoch 1 starts while epoch 0's last batches are in flight, so a sample in both may be
    // decoded twice, or first for epoch 1: those two epochs' counts depend on scheduling
    // (BadSamplesAreSkippedEveryEpochAndNeverKept checks exact counts without overlap).
    // Epoch 2 starts after all of epoch 0 was finished: every sample is a hit.
    EXPECT_EQ(on.hits[0] + on.misses[0], 41);
    EXPECT_EQ(on.hits[1] + on.misses[1], 41);
    EXPECT_EQ(on.hits[2], 41);
    EXPECT_EQ(off.hits[1] + off.misses[1], 0);
    EXPECT_EQ(cache->entries(), 41);
  }
}

TEST(DecodedCacheTest, OutputDoesNotDependOnWhatTheCacheHolds) {
  auto reader = testing::MemoryReader::Encoded(Images(41));
  Options o = RandomCropFlip();
  o.dct_scaling = true;  // the cache decodes at the scale of the smallest random box
  o.threads = 4;
  auto full = Cache(1LL << 30, *reader);
  const EpochRun all = RunEpochs(o, reader, full, 3);
  const int64_t half = full->bytes() / 2;
  auto part = Cache(half, *reader);
  const EpochRun some = RunEpochs(o, reader, part, 3);
  for (int e = 0; e < 3; ++e) EXPECT_TRUE(some.epochs[e] == all.epochs[e]) << "epoch " << e;
  EXPECT_GT(part->entries(), 0);
  EXPECT_LT(part->entries(), 41);
  EXPECT_LE(part->bytes(), half);  // admitted until full, never over the budget
  EXPECT_GT(part->declined(), 0);
  EXPECT_GT(some.hits[2], 0);  // what it kept serves the later epochs
  EXPECT_LE(some.hits[2], part->entries());
  EXPECT_EQ(some.hits[2] + some.misses[2], 41);
  o.threads = 1;  // nor on the number of workers
  const EpochRun serial = RunEpochs(o, reader, Cache(half, *reader), 2);
  for (int e = 0; e < 2; ++e) EXPECT_TRUE(serial.epochs[e] == all.epochs[e]) << "epoch " << e;
}

// crop=random with dct_scaling: an online decode uses the scale of each epoch's box, the cache
// the scale of the smallest possible box (more pixels), so the resampled crop differs by
// rounding: docs/pipeline.md gives the tolerance this checks.
TEST(DecodedCacheTest, WithDctScalingRandomCropsStayWithinTolerance) {
  std::vector<std::vector<uint8_t>> images;
  for (int i = 0; i < 16; ++i)
    images.push_back(testing::EncodeJpeg(testing::Photo(400 + 8 * i, 320), 90, TJSAMP_420));
  auto reader = testing::MemoryReader::Encoded(images);
  Options o = RandomCropFlip();
  o.dct_scaling = true;
  o.image_size = 32;
  o.crop_scale_min = 0.35;  // boxes of 190+ pixels: online decodes at 1/2 or 1/4 scale
  const EpochRun off = RunEpochs(o, reader, nullptr, 2);
  const EpochRun on = RunEpochs(o, reader, Cache(1LL << 30, *reader), 2);
  for (int e = 0; e < 2; ++e) {
    ASSERT_EQ(on.epochs[e].size(), off.epochs[e].size());
    double sum = 0;
    int worst = 0;
    for (size_t i = 0; i < on.epochs[e].size(); ++i) {
      const int d = std::abs(int(on.epochs[e][i]) - int(off.epochs[e][i]));
      sum += d;
      worst = std::max(worst, d);
    }
    const double mean = sum / double(on.epochs[e].size());
    EXPECT_LT(mean, 4.0) << "epoch " << e;
    EXPECT_GT(mean, 0.0) << "the scales differ: if this is 0 the test no longer tests that";
    RecordProperty("mean_abs_diff_epoch" + std::to_string(e), std::to_string(mean));
    RecordProperty("max_abs_diff_epoch" + std::to_string(e), std::to_string(worst));
  }
}

TEST(DecodedCacheTest, BadSamplesAreSkippedEveryEpochAndNeverKept) {
  auto images = Images(24);
  images[5] = {0xff, 0xd8, 0xff, 0x00, 0x01};  // a broken JPEG
  images[17].resize(images[17].size() / 3);    // truncated
  auto reader = testing::MemoryReader::Encoded(images);
  Options o = RandomCropFlip();
  o.on_bad_sample = "skip";
  auto cache = Cache(1LL << 30, *reader);
  auto created = Pipeline::Create(o, reader, cache);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::vector<int64_t> samples(24);
  for (int64_t i = 0; i < 24; ++i) samples[i] = i;
  std::vector<uint8_t> out((*created)->OutputLayout().bytes() * 24);
  std::vector<int64_t> labels(24);
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    BatchResult r;
    ASSERT_TRUE((*created)->RunBatch({epoch, samples, 0, out.data(), labels.data()}, &r).ok());
    EXPECT_EQ(r.skipped, (std::vector<int64_t>{5, 17})) << "epoch " << epoch;
    EXPECT_EQ(r.written, 22);
    EXPECT_EQ(r.cache_hits, epoch == 0 ? 0 : 22);
    EXPECT_EQ(r.cache_misses, epoch == 0 ? 24 : 2);
  }
  EXPECT_EQ(cache->entries(), 22);
  pipeline::DecodedSample s;
  EXPECT_FALSE(cache->Find(5, &s));
  EXPECT_FALSE(cache->Find(17, &s));
}

TEST(DecodedCacheTest, ConcurrentOffersOfOneKeyKeepOneEntryAndCountItsBytesOnce) {
  DecodedCache cache(1 << 20, 4, "mem://x");
  std::vector<uint8_t> pixels(30 * 20 * 3, 7);
  pipeline::DecodedSample s{30, 20, 8, 30, 20, 3, pixels.data(), 30 * 3};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int k = 0; k < 4; ++k) cache.Offer(k, s);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(cache.entries(), 4);
  EXPECT_EQ(cache.bytes(), 4 * DecodedCache::EntryBytes(pixels.size()));
  pipeline::DecodedSample got;
  ASSERT_TRUE(cache.Find(3, &got));
  EXPECT_EQ(got.stride, size_t(90));
  EXPECT_EQ(got.pixels[0], 7);
  EXPECT_FALSE(cache.Find(4, &got));  // out of range
  EXPECT_FALSE(cache.Find(-1, &got));
}

TEST(DecodedCacheTest, AKeyKeepsOneDecodePerScaleOfferedConcurrently) {
  // Views of different sizes can need a sample at two scales (docs/pipeline.md, "Views"):
  // each (key, scale) is kept once, whatever the order and concurrency of the offers.
  DecodedCache cache(1 << 20, 4, "mem://x");
  std::vector<std::vector<uint8_t>> pixels;
  for (int scale : {8, 4, 2}) pixels.emplace_back(size_t(4 * scale) * 3 * scale * 3, uint8_t(scale));
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < 4; ++k)
        for (int i = 0; i < 3; ++i) {
          const int j = (i + t) % 3, scale = 8 >> j;
          pipeline::DecodedSample s{32, 24, scale, 4 * scale, 3 * scale, 3,
                                    pixels[size_t(j)].data(), size_t(4 * scale) * 3};
          cache.Offer(k, s);
        }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(cache.entries(), 12);
  int64_t bytes = 0;
  for (const auto& p : pixels) bytes += 4 * DecodedCache::EntryBytes(p.size());
  EXPECT_EQ(cache.bytes(), bytes);
  for (int k = 0; k < 4; ++k) {
    for (int scale : {8, 4, 2}) {
      pipeline::DecodedSample got;
      ASSERT_TRUE(cache.Find(k, scale, &got));
      EXPECT_EQ(got.scale_num, scale);
      EXPECT_EQ(got.width, 4 * scale);
      EXPECT_EQ(got.pixels[0], scale);
    }
    pipeline::DecodedSample got;
    EXPECT_FALSE(cache.Find(k, 1, &got));
    EXPECT_TRUE(cache.Find(k, 0, &got));  // any scale
  }
}

// MakePipelineSource: the one place every front door (leader, service, multi-node, Python,
// batchcast-run, C API) gets its source, so the cache and its checks are the same in all.
class CacheSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(testing::TempDir()) / ("cache_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "photos.h5").string();
    Status st = testing::WritePhotoDataset(path_, 40);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(CacheSourceTest, ABudgetUnderOneProducerBatchIsRefusedNamingWhatToSet) {
  Options o = RandomCropFlip();
  o.dataset = path_;
  o.batch_size = 8;
  o.cache = 64 << 10;  // 64 KB: not even 16 decoded samples of about 40 KB
  auto s = MakePipelineSource(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = s.status().message();
  for (const char* part : {"cache=65536 bytes holds less than one producer batch", path_.c_str(),
                           "16 samples", "set cache=0 (off), or cache="})
    EXPECT_NE(m.find(part), std::string::npos) << part << " in: " << m;
  o.cache = 8 << 20;
  auto ok = MakePipelineSource(o);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  o.batch_size = 1;   // producer batch 2: about 160 KB
  o.cache = 400 << 10;  // over one producer batch, about an eighth of the dataset: a WARN only
  auto small = MakePipelineSource(o);
  ASSERT_TRUE(small.ok()) << small.status().ToString();
}

TEST(DecodedCacheTest, TheOptionIsASizeOffByDefault) {
  EXPECT_EQ(Options().cache, 0);
  auto r = ResolveOptions({"--cache=8g"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->cache, 8LL << 30);
  auto bad = ResolveOptions({"--cache=8x"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cache"), std::string::npos) << bad.status().message();
  Options o;
  o.cache = -1;
  Status st = ValidateOptions(o);
  EXPECT_NE(st.message().find("option 'cache' must be a size >= 0"), std::string::npos)
      << st.ToString();
}

TEST_F(CacheSourceTest, TheSourceGivesTheSameBatchesWithTheCacheAndCountsHits) {
  std::vector<std::vector<uint8_t>> outputs;
  for (int64_t budget : {int64_t(0), int64_t(64) << 20}) {
    Options o = RandomCropFlip();
    o.dataset = path_;
    o.cache = budget;
    auto s = MakePipelineSource(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    std::vector<int64_t> samples(40);
    for (int64_t i = 0; i < 40; ++i) samples[i] = (i * 3) % 40;  // 3 is prime to 40: a permutation
    std::vector<uint8_t> out((*s)->MaxLayout().bytes() * 40);
    std::vector<int64_t> labels(40);
    for (uint64_t epoch = 0; epoch < 2; ++epoch) {
      BatchResult r;
      ASSERT_TRUE((*s)->Fill({epoch, samples, 0, out.data(), labels.data()}, &r).ok());
      outputs.push_back(out);
      EXPECT_EQ(r.cache_hits, budget > 0 && epoch > 0 ? 40 : 0);
      EXPECT_EQ(r.cache_bytes > 0, budget > 0);
    }
  }
  EXPECT_TRUE(outputs[0] == outputs[2]);
  EXPECT_TRUE(outputs[1] == outputs[3]);
}

}  // namespace
}  // namespace batchcast::producer
