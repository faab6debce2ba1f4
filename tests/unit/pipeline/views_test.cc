// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// One decode, many views (docs/pipeline.md, "Views"): every group of a multi-view batch is
// byte for byte what a pipeline of that view alone writes (real-photo JPEGs of every kind and
// several sizes and DCT scales, Fashion-MNIST-like PNG and raw samples; crops, flips, sizes,
// dtypes, layouts, per-batch sizes, offline buckets, the decoded-sample cache, bad samples),
// whatever other groups are attached; draws are shared on request; a sample is decoded once
// per distinct DCT scale; bad requests and views are refused with messages.
#include "pipeline/views.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <random>

#include "core/sanitizers.h"
#include "pipeline/decode.h"
#include "pipeline/pipeline.h"
#include "tests/unit/pipeline/memory_reader.h"
#include "tests/unit/pipeline/test_images.h"

namespace batchcast::pipeline {
namespace {

using testing::MemoryReader;

// --- data sets ---------------------------------------------------------------------------

testing::Image Gray(const testing::Image& rgb) {
  testing::Image g{rgb.width, rgb.height, 1, std::vector<uint8_t>(size_t(rgb.width) * rgb.height)};
  for (size_t i = 0; i < g.pixels.size(); ++i)
    g.pixels[i] = static_cast<uint8_t>((rgb.pixels[i * 3] * 3 + rgb.pixels[i * 3 + 1] * 5 +
                                        rgb.pixels[i * 3 + 2] * 2) / 10);
  return g;
}

// Real-photo JPEGs of the kinds and sizes a photo dataset has (4:2:0, 4:2:2, 4:4:4, gray,
// progressive, odd sizes, a large one that small views decode at 1/4 and 1/8) and a PNG.
std::vector<std::vector<uint8_t>> PhotoSet() {
  struct Shape { int w, h, subsamp; bool progressive, gray, png; };
  const Shape shapes[] = {{500, 375, TJSAMP_420, false, false, false},
                          {640, 480, TJSAMP_444, false, false, false},
                          {333, 251, TJSAMP_422, false, false, false},
                          {1000, 750, TJSAMP_420, false, false, false},
                          {257, 193, TJSAMP_GRAY, false, true, false},
                          {400, 300, TJSAMP_420, true, false, false},
                          {375, 500, TJSAMP_420, false, false, false},
                          {360, 270, 0, false, false, true}};
  std::vector<std::vector<uint8_t>> out;
  for (const Shape& s : shapes) {
    testing::Image img = testing::Photo(s.w, s.h);
    if (s.png) out.push_back(testing::EncodePng(s.w, s.h, 2, 8, img.pixels));
    else out.push_back(testing::EncodeJpeg(s.gray ? Gray(img) : img, 90, s.subsamp, s.progressive));
  }
  return out;
}

// 28x28 gray images, as Fashion-MNIST is stored: PNGs, or raw 28x28x1 pixels.
std::vector<std::vector<uint8_t>> FashionLike(int n, bool png) {
  const testing::Image photo = Gray(testing::Photo(280, 280));
  std::vector<std::vector<uint8_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<uint8_t> px(28 * 28);
    for (int y = 0; y < 28; ++y)
      for (int x = 0; x < 28; ++x)
        px[size_t(y) * 28 + x] = photo.at((y * 10 + i * 7) % 280, (x * 10 + i * 13) % 280, 0);
    out.push_back(png ? testing::EncodePng(28, 28, 0, 8, px) : px);
  }
  return out;
}

std::vector<int64_t> FirstSamples(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

core::View Spec(const std::string& text) {
  auto v = core::ParseView(text, core::View{});
  EXPECT_TRUE(v.ok()) << text << ": " << v.status().ToString();
  return v.ok() ? *v : core::View{};
}

// --- running views -----------------------------------------------------------------------

// The options of a pipeline without views that draws and writes what `v` does: the
// reference each group is compared with.
Options OptionsFor(Options o, const core::View& v) {
  o.image_size = v.image_size;
  o.crop = core::ViewCropName(v.crop);
  if (v.crop == core::ViewCrop::kRandom) {
    o.crop_scale_min = v.crop_scale_min;
    o.crop_scale_max = v.crop_scale_max;
  }
  o.flip = v.flip;
  o.normalize = v.normalize;
  auto join = [](const std::array<double, 3>& a, int n) {
    std::string s = fmt::format("{}", a[0]);
    for (int c = 1; c < n; ++c) s += fmt::format(",{}", a[c]);
    return s;
  };
  if (v.normalize) {
    o.mean = join(v.mean, v.mean_count);
    o.std = join(v.std, v.std_count);
  }
  o.dtype = v.dtype == core::ViewDType::kFloat32 ? "float32" : "uint8";
  o.layout = v.layout == core::ViewLayout::kHWC ? "hwc" : "chw";
  o.seed = core::ViewDrawSeed(o.seed, v);
  return o;
}

// A test cache (the producer's DecodedCache is tested in tests/unit/producer): every
// (key, scale) offered is kept.
class MapCache final : public DecodedSampleCache {
 public:
  bool Find(int64_t key, int scale, DecodedSample* out) const override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = kept_.lower_bound({key, 0}); it != kept_.end() && it->first.first == key; ++it) {
      if (scale != 0 && it->first.second != scale) continue;
      *out = it->second.sample;
      return true;
    }
    return false;
  }
  void Offer(int64_t key, const DecodedSample& s) override {
    std::lock_guard<std::mutex> lock(mu_);
    Kept& k = kept_[{key, s.scale_num}];
    if (k.pixels) return;
    const size_t row = size_t(s.width) * s.channels;
    k.pixels = std::make_unique<uint8_t[]>(std::max<size_t>(1, row * s.height));
    for (int y = 0; y < s.height; ++y)
      std::copy_n(s.pixels + size_t(y) * s.stride, row, k.pixels.get() + size_t(y) * row);
    k.sample = s;
    k.sample.pixels = k.pixels.get();
    k.sample.stride = row;
    bytes_ += int64_t(row) * s.height;
  }
  int64_t bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_;
  }
  size_t entries() const {
    std::lock_guard<std::mutex> lock(mu_);
    return kept_.size();
  }

 private:
  struct Kept {
    DecodedSample sample;
    std::unique_ptr<uint8_t[]> pixels;
  };
  mutable std::mutex mu_;
  std::map<std::pair<int64_t, int>, Kept> kept_;
  int64_t bytes_ = 0;
};

struct Group {
  core::View view;
  int image_size = 0;  // per-batch size (0: the view's)
};

struct Outputs {
  Status status;
  std::vector<std::vector<uint8_t>> images;  // per group
  std::vector<int64_t> labels;
  BatchResult result;
};

// `groups` of one batch per epoch through one pipeline (views added in order), or through a
// pipeline per group (`separate`: the reference, each a pipeline without views).
std::vector<Outputs> RunGroups(const Options& base, std::shared_ptr<data::DatasetReader> reader,
                         const std::vector<Group>& groups, const std::vector<int64_t>& samples,
                         int epochs, bool separate, bool cache) {
  std::vector<Outputs> out(static_cast<size_t>(epochs));
  if (separate) {
    for (const Group& g : groups) {
      auto p = Pipeline::Create(OptionsFor(base, g.view), reader,
                                cache ? std::make_shared<MapCache>() : nullptr);
      EXPECT_TRUE(p.ok()) << p.status().ToString();
      if (!p.ok()) return {};
      for (int e = 0; e < epochs; ++e) {
        std::vector<uint8_t> images((*p)->OutputLayout(g.image_size).bytes() * samples.size());
        out[e].labels.assign(samples.size(), -1);
        BatchResult r;
        Status s = (*p)->RunBatch({uint64_t(e), samples, g.image_size, images.data(),
                                   out[e].labels.data()}, &r);
        if (!s.ok()) out[e].status = s;
        out[e].images.push_back(std::move(images));
        out[e].result = r;
      }
    }
    return out;
  }
  auto p = Pipeline::Create(base, reader, cache ? std::make_shared<MapCache>() : nullptr);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return {};
  std::vector<GroupTarget> targets;
  for (const Group& g : groups) {
    auto id = (*p)->AddView(g.view);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    targets.push_back(GroupTarget{id.ok() ? *id : 0, g.image_size, nullptr});
  }
  for (int e = 0; e < epochs; ++e) {
    for (GroupTarget& t : targets) {
      out[e].images.emplace_back((*p)->GroupLayout(t.view, t.image_size).bytes() * samples.size());
      t.images = out[e].images.back().data();
    }
    out[e].labels.assign(samples.size(), -1);
    BatchRequest req{uint64_t(e), samples, 0, nullptr, out[e].labels.data()};
    req.groups = targets;
    out[e].status = (*p)->RunBatch(req, &out[e].result);
  }
  return out;
}

// Every group of one multi-view run against its own pipeline, epoch by epoch.
void ExpectEachGroupIsItsOwnPipeline(const Options& base,
                                     std::shared_ptr<data::DatasetReader> reader,
                                     const std::vector<Group>& groups, int epochs, bool cache,
                                     const std::string& what) {
  const auto samples = FirstSamples(reader->info().num_samples);
  const auto multi = RunGroups(base, reader, groups, samples, epochs, false, cache);
  const auto own = RunGroups(base, reader, groups, samples, epochs, true, cache);
  ASSERT_EQ(multi.size(), size_t(epochs));
  ASSERT_EQ(own.size(), size_t(epochs));
  for (int e = 0; e < epochs; ++e) {
    ASSERT_TRUE(multi[e].status.ok()) << what << ": " << multi[e].status.ToString();
    ASSERT_TRUE(own[e].status.ok()) << what << ": " << own[e].status.ToString();
    EXPECT_EQ(multi[e].labels, own[e].labels) << what;
    ASSERT_EQ(multi[e].result.group_transform_ns.size(), groups.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      EXPECT_TRUE(multi[e].images[g] == own[e].images[g])
          << what << ": group " << g << " " << core::ViewToString(groups[g].view) << " at "
          << groups[g].image_size << ", epoch " << e;
      EXPECT_GT(multi[e].result.group_transform_ns[g], 0) << what;
    }
  }
}

// --- byte identity -----------------------------------------------------------------------

// Views a sweep of image models asks for: sizes 48..224 (DCT scales 1/8..1 on these photos),
// RandomResizedCrop with and without flip, centre crops, whole images, uint8 and float32,
// CHW and HWC, the leader's own draw and view, named shared draws (one of the same box and
// size, whose resize is shared), a per-batch size.
std::vector<Group> PhotoGroups() {
  return {{Spec("view(size=224,crop=random,flip=1,normalize=1)")},
          {Spec("view(size=160,crop=random,flip=1,normalize=1)")},
          {Spec("view(size=192,crop=random,flip=1,normalize=1,draw=leader)")},
          {Spec("view(size=96,crop=center,dtype=uint8,layout=hwc)")},
          // The same size as the one before but another box: nothing to reuse.
          {Spec("view(size=96,crop=random,flip=1,normalize=1,draw=11)")},
          {Spec("view(size=64,crop=none,dtype=float32)")},
          {Spec("view(size=112,crop=random,scale=0.35:1,flip=1,draw=7)")},
          // The same draw, box and size as the one before: its resize is reused.
          {Spec("view(size=112,crop=random,scale=0.35:1,flip=0,normalize=1,draw=7)")},
          {Spec("view(size=48,crop=random,flip=1,normalize=1,mean=0.5,std=0.25,layout=hwc,draw=7)")},
          {Spec("view(size=160,crop=random,flip=1,normalize=1)"), 128}};
}

TEST(ViewsTest, EachGroupOfRealPhotosIsByteIdenticalToItsOwnPipeline) {
  auto reader = MemoryReader::Encoded(PhotoSet(), "photos");
  Options o;
  o.threads = 2;
  o.image_size = 224;
  o.crop = "random";
  o.flip = true;
  o.seed = 5;
  ExpectEachGroupIsItsOwnPipeline(o, reader, PhotoGroups(), 2, false, "photos");
  o.crop_decode = false;  // every decode whole
  ExpectEachGroupIsItsOwnPipeline(o, reader, PhotoGroups(), 1, false, "photos, crop_decode=0");
  o.crop_decode = true;
  o.dct_scaling = false;  // every decode at full size
  ExpectEachGroupIsItsOwnPipeline(o, reader, PhotoGroups(), 1, false, "photos, dct_scaling=0");
}

TEST(ViewsTest, EachGroupOfFashionMnistLikeSamplesIsByteIdenticalToItsOwnPipeline) {
  const std::vector<Group> groups = {{Spec("view(size=28,crop=none)")},
                                     {Spec("view(size=32,crop=random,flip=1)")},
                                     {Spec("view(size=56,crop=random,scale=0.6:1,normalize=1,mean=0.286,std=0.353)")},
                                     {Spec("view(size=20,crop=center,dtype=float32,layout=hwc)")},
                                     {Spec("view(size=64,crop=none,layout=hwc,draw=3)")},
                                     // Reuses the resize the group before wrote into its slot.
                                     {Spec("view(size=64,crop=none,flip=1,dtype=float32)")},
                                     {Spec("view(size=64,crop=random,flip=1,draw=3)"), 48}};
  Options o;
  o.threads = 3;
  o.image_size = 28;
  for (bool png : {true, false}) {
    auto reader = png ? MemoryReader::Encoded(FashionLike(24, true), "fmnist.png")
                      : MemoryReader::Raw(28, 28, 1, FashionLike(24, false), "fmnist.raw");
    ExpectEachGroupIsItsOwnPipeline(o, reader, groups, 2, false, png ? "png" : "raw");
    ExpectEachGroupIsItsOwnPipeline(o, reader, groups, 2, true, png ? "png, cache" : "raw, cache");
  }
  // The raw samples as the leader's own 28x28 view (size 0: the dataset's own).
  auto raw = MemoryReader::Raw(28, 28, 1, FashionLike(8, false), "fmnist.raw");
  Options r;
  r.threads = 1;
  ExpectEachGroupIsItsOwnPipeline(r, raw, {{Spec("view(size=0,crop=none)")},
                                           {Spec("view(size=32,crop=random,flip=1)")}},
                                  1, false, "raw, size 0");
}

TEST(ViewsTest, WithTheCacheEachGroupIsItsOwnCachedPipelineAndLaterEpochsDecodeNothing) {
  auto reader = MemoryReader::Encoded(PhotoSet(), "photos");
  Options o;
  o.threads = 2;
  o.image_size = 224;
  // Centre crops at 224 and 112 keep the photos at two scales; random crops at full size.
  std::vector<Group> groups = {{Spec("view(size=224,crop=center)")},
                               {Spec("view(size=112,crop=center,normalize=1)")},
                               {Spec("view(size=160,crop=random,flip=1)")},
                               {Spec("view(size=128,crop=random,scale=0.5:1,flip=1,draw=2)")}};
  ExpectEachGroupIsItsOwnPipeline(o, reader, groups, 3, true, "photos, cache");
  const auto runs = RunGroups(o, reader, groups, FirstSamples(8), 2, false, true);
  ASSERT_EQ(runs.size(), 2u);
  const BatchResult& first = runs[0].result;
  const BatchResult& second = runs[1].result;
  // One decode per (sample, scale kept), shared by every group: the first epoch decodes, the
  // second only looks up.
  EXPECT_GE(first.decodes, 8);
  EXPECT_LT(first.decodes, 8 * 4);
  EXPECT_EQ(first.cache_misses, first.decodes);
  EXPECT_EQ(second.decodes, 0);
  EXPECT_EQ(second.cache_hits, first.decodes);
  EXPECT_EQ(second.cache_misses, 0);
}

TEST(ViewsTest, OfflineBucketsAreReadByTheGroupsWhoseSizeTheyAre) {
  // Samples stored at 64 and 96 too (as `batchcast convert --buckets` does): a group at a
  // bucket's size reads that image, the others the original, as their own pipelines do.
  auto photos = PhotoSet();
  auto reader = MemoryReader::Encoded(photos, "photos");
  std::vector<std::vector<std::vector<uint8_t>>> buckets(2);
  for (size_t i = 0; i < photos.size(); ++i) {
    buckets[0].push_back(testing::EncodeJpeg(testing::Photo(85, 64), 90, TJSAMP_420));
    buckets[1].push_back(testing::EncodeJpeg(testing::Photo(128 + int(i), 96), 90, TJSAMP_444));
  }
  reader->SetBuckets({64, 96}, buckets);
  Options o;
  o.threads = 2;
  o.image_size = 224;
  const std::vector<Group> groups = {{Spec("view(size=224,crop=random,flip=1)")},
                                     {Spec("view(size=96,crop=random,flip=1)")},
                                     {Spec("view(size=64,crop=center)")},
                                     {Spec("view(size=224,crop=random,flip=1,draw=1)"), 96},
                                     {Spec("view(size=80,crop=none)")}};
  ExpectEachGroupIsItsOwnPipeline(o, reader, groups, 2, false, "buckets");
  ExpectEachGroupIsItsOwnPipeline(o, reader, groups, 2, true, "buckets, cache");
}

TEST(ViewsTest, RandomViewSetsAreEachByteIdenticalToTheirOwnPipelines) {
  // Model-style: random sets of 2-6 views (any size, crop, scale range, flip, normalisation,
  // dtype, layout, draw, per-batch size) on the photos, each group against its own pipeline.
  auto reader = MemoryReader::Encoded(PhotoSet(), "photos");
  // Three sets under a sanitizer (the same paths; 16 s of the two sanitizer trees' CPU for 8).
  const uint64_t sets = BC_SANITIZED ? 3 : 8;
  for (uint64_t seed = 1; seed <= sets; ++seed) {
    std::mt19937_64 rng(seed);
    auto pick = [&](int n) { return int(rng() % uint64_t(n)); };
    std::vector<Group> groups;
    const int n = 2 + pick(5);
    for (int g = 0; g < n; ++g) {
      core::View v;
      v.image_size = 16 + pick(240);
      v.crop = static_cast<core::ViewCrop>(pick(3));
      v.crop_scale_min = 0.05 + 0.5 * pick(100) / 100.0;
      v.crop_scale_max = std::min(1.0, v.crop_scale_min + pick(100) / 100.0);
      v.flip = pick(2);
      v.normalize = pick(2);
      v.mean = {0.1 * pick(10), 0.5, 0.4};
      v.std = {0.2, 0.1 + 0.1 * pick(5), 0.3};
      v.dtype = static_cast<core::ViewDType>(pick(2));
      v.layout = static_cast<core::ViewLayout>(pick(2));
      v.draw = pick(3) == 0 ? core::kAutoDraw : pick(2) ? core::kLeaderDraw : 1 + pick(2);
      groups.push_back({core::CanonicalView(v), pick(4) == 0 ? 16 + pick(200) : 0});
    }
    Options o;
    o.threads = 1 + int(seed % 3);
    o.image_size = 100;
    o.seed = seed;
    ExpectEachGroupIsItsOwnPipeline(o, reader, groups, 1, seed % 2 == 0,
                                    fmt::format("seed {}", seed));
    if (::testing::Test::HasFailure()) break;
  }
}

// --- decode once, draws, overlap, telemetry ----------------------------------------------

TEST(ViewsTest, GroupsThatNeedOneScaleShareOneDecodePerSample) {
  auto reader = MemoryReader::Encoded(PhotoSet(), "photos");
  Options o;
  o.threads = 2;
  o.image_size = 224;
  // Photos with a side under 448 px: any box at 224 needs the full scale (half of it is under
  // 224), so three views at 224 share one decode per sample (the PNG's included).
  const std::vector<Group> same_scale = {{Spec("view(size=224,crop=random,flip=1)")},
                                         {Spec("view(size=224,crop=center,normalize=1)")},
                                         {Spec("view(size=224,crop=random,draw=9,layout=hwc)")}};
  auto runs = RunGroups(o, reader, same_scale, {0, 2, 4, 5, 6, 7}, 1, false, false);
  ASSERT_TRUE(runs[0].status.ok());
  EXPECT_EQ(runs[0].result.decodes, 6);
  // Without DCT scaling every view of every photo takes the full scale.
  o.dct_scaling = false;
  runs = RunGroups(o, reader, PhotoGroups(), FirstSamples(8), 1, false, false);
  ASSERT_TRUE(runs[0].status.ok());
  EXPECT_EQ(runs[0].result.decodes, 8);
  // With DCT scaling, small views use smaller scales: at most one decode per distinct scale.
  o.dct_scaling = true;
  runs = RunGroups(o, reader, PhotoGroups(), FirstSamples(8), 1, false, false);
  ASSERT_TRUE(runs[0].status.ok());
  EXPECT_GT(runs[0].result.decodes, 8);
  EXPECT_LE(runs[0].result.decodes, 8 * 4);
}

TEST(ViewsTest, ViewsNamingOneDrawShareTheirBoxesAndFlips) {
  auto reader = MemoryReader::Encoded(PhotoSet(), "photos");
  Options o;
  o.threads = 2;
  o.image_size = 96;
  // uint8 HWC and float32 HWC (x / 255) of one draw: the float output is the uint8 one / 255.
  const std::vector<Group> groups = {
      {Spec("view(size=96,crop=random,flip=1,dtype=uint8,layout=hwc,draw=5)")},
      {Spec("view(size=96,crop=random,flip=1,dtype=float32,layout=hwc,draw=5)")},
      {Spec("view(size=96,crop=random,flip=1,dtype=uint8,layout=hwc)")}};
  const auto runs = RunGroups(o, reader, groups, FirstSamples(8), 1, false, false);
  ASSERT_TRUE(runs[0].status.ok()) << runs[0].status.ToString();
  const auto& u8 = runs[0].images[0];
  const auto* f32 = reinterpret_cast<const float*>(runs[0].images[1].data());
  for (size_t i = 0; i < u8.size(); ++i)
    ASSERT_EQ(f32[i], static_cast<float>(u8[i] / 255.0)) << "element " << i;
  EXPECT_NE(runs[0].images[2], u8);  // its own draw: other boxes
}

TEST(ViewsTest, GroupsOfManyBatchesInFlightDoNotDependOnThreadsOrOrder) {
  auto reader = MemoryReader::Encoded(PhotoSet(), "photos");
  const auto groups = PhotoGroups();
  Options o;
  o.image_size = 224;
  o.threads = 1;
  const auto serial = RunGroups(o, reader, groups, {5, 3, 0, 7}, 1, false, false);
  ASSERT_TRUE(serial[0].status.ok());
  // Three threads, two batches started before either is finished, the views added in
  // reverse order (other ids) and one more view that no batch uses.
  o.threads = 3;
  auto p = Pipeline::Create(o, reader);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->AddView(Spec("view(size=33)")).ok());
  std::vector<int> ids(groups.size());
  for (size_t g = groups.size(); g-- > 0;) ids[g] = *(*p)->AddView(groups[g].view);
  std::vector<int64_t> a = {5, 3}, b = {0, 7};
  std::vector<std::vector<uint8_t>> images(2 * groups.size());
  std::vector<GroupTarget> ta, tb;
  for (size_t g = 0; g < groups.size(); ++g) {
    const size_t bytes = (*p)->GroupLayout(ids[g], groups[g].image_size).bytes();
    images[g].resize(2 * bytes);
    images[groups.size() + g].resize(2 * bytes);
    ta.push_back({ids[g], groups[g].image_size, images[g].data()});
    tb.push_back({ids[g], groups[g].image_size, images[groups.size() + g].data()});
  }
  BatchRequest ra{0, a, 0, nullptr, nullptr}, rb{0, b, 0, nullptr, nullptr};
  ra.groups = ta;
  rb.groups = tb;
  (*p)->StartBatch(ra);
  (*p)->StartBatch(rb);
  BatchResult r1, r2;
  ASSERT_TRUE((*p)->FinishBatch(&r1).ok());
  ASSERT_TRUE((*p)->FinishBatch(&r2).ok());
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<uint8_t> joined = images[g];
    joined.insert(joined.end(), images[groups.size() + g].begin(), images[groups.size() + g].end());
    EXPECT_EQ(joined, serial[0].images[g]) << "group " << g;
  }
}

TEST(ViewsTest, StageTimesAreRecordedPerGroup) {
  auto reader = MemoryReader::Encoded(PhotoSet(), "photos");
  Options o;
  o.threads = 1;
  o.image_size = 224;
  const auto runs = RunGroups(o, reader, PhotoGroups(), FirstSamples(8), 1, false, false);
  const BatchResult& r = runs[0].result;
  ASSERT_EQ(r.group_transform_ns.size(), PhotoGroups().size());
  int64_t sum = 0;
  for (int64_t ns : r.group_transform_ns) {
    EXPECT_GT(ns, 0);
    sum += ns;
  }
  EXPECT_EQ(r.transform_ns, sum);
  EXPECT_GT(r.decode_ns, 0);
  EXPECT_GT(r.read_ns, 0);
}

// --- bad samples and bad requests --------------------------------------------------------

TEST(ViewsTest, ABadSampleIsSkippedInEveryGroupAndEachGroupIsCompactedAsItsOwn) {
  auto photos = PhotoSet();
  photos[2].clear();  // an empty sample: bad for every group
  auto reader = MemoryReader::Encoded(photos, "photos");
  Options o;
  o.threads = 2;
  o.image_size = 224;
  o.on_bad_sample = "skip";
  ExpectEachGroupIsItsOwnPipeline(o, reader, PhotoGroups(), 1, false, "skip");
  const auto runs = RunGroups(o, reader, PhotoGroups(), FirstSamples(8), 1, false, false);
  EXPECT_EQ(runs[0].result.skipped, std::vector<int64_t>{2});
  EXPECT_EQ(runs[0].result.written, 7);
  o.on_bad_sample = "error";
  const auto failed = RunGroups(o, reader, PhotoGroups(), FirstSamples(8), 1, false, false);
  EXPECT_NE(failed[0].status.message().find("pipeline: sample 2 of photos: empty image"),
            std::string::npos) << failed[0].status.ToString();
}

TEST(ViewsTest, BadViewsAndRequestsAreRefusedWithWhatToDo) {
  auto reader = MemoryReader::Encoded(PhotoSet(), "photos");
  Options o;
  o.threads = 1;
  o.image_size = 64;
  o.channels = 1;
  auto p = Pipeline::Create(o, reader);
  ASSERT_TRUE(p.ok());
  Pipeline& pl = **p;
  auto sized = pl.AddView(Spec("view(size=0,crop=none)"));
  ASSERT_FALSE(sized.ok());
  EXPECT_EQ(sized.status().message(),
            "pipeline: view(size=0,crop=none,flip=0,normalize=0,dtype=uint8,layout=chw,draw=auto)"
            ": photos stores encoded images of varying size; give the view a size");
  auto mean = pl.AddView(Spec("view(size=32,normalize=1,mean=0.4:0.5:0.6,std=0.2)"));
  ASSERT_FALSE(mean.ok());
  EXPECT_NE(mean.status().message().find("mean has 3 values but the output has 1 channel; give 1 "
                                         "value (every channel)"), std::string::npos)
      << mean.status().message();
  // An equal view is the same view; the options' own view is view 0.
  auto a = pl.AddView(Spec("view(size=32)")), b = pl.AddView(Spec("view(size=32,flip=0)"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  auto own = core::ViewFromOptions(o);
  EXPECT_EQ(*pl.AddView(*own), 0);
  for (int i = pl.views(); i < kMaxViews; ++i)
    ASSERT_TRUE(pl.AddView(Spec(fmt::format("view(size={})", 100 + i))).ok());
  auto full = pl.AddView(Spec("view(size=99)"));
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find("a pipeline holds at most 64 views"), std::string::npos);

  std::vector<int64_t> idx = {0, 1};
  std::vector<uint8_t> x(1 << 20), y(1 << 20);
  auto refuse = [&](std::vector<GroupTarget> groups, void* images, const char* fragment) {
    BatchRequest req{0, idx, 0, images, nullptr};
    req.groups = groups;
    BatchResult r;
    Status s = pl.RunBatch(req, &r);
    ASSERT_FALSE(s.ok()) << fragment;
    EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
  };
  refuse({{0, 0, x.data()}}, y.data(), "takes its images from the groups");
  refuse({{0, 0, x.data()}, {pl.views(), 0, y.data()}}, nullptr, "group 1 of the batch names view 64");
  refuse({{0, 0, nullptr}}, nullptr, "group 0 of the batch has no image buffer");
  refuse({{0, 0, x.data()}, {*a, 0, x.data() + 100}}, nullptr,
         "the image buffers of groups 0 and 1 of the batch overlap");
  refuse({{0, -1, x.data()}}, nullptr, "image_size must be in [0, 16384]");
  refuse(std::vector<GroupTarget>(kMaxBatchGroups + 1, GroupTarget{0, 0, x.data()}), nullptr,
         "at most 32 groups");
  // Regions side by side are fine.
  BatchRequest req{0, idx, 0, nullptr, nullptr};
  const size_t bytes = pl.GroupLayout(0, 0).bytes() * idx.size();
  std::vector<GroupTarget> ok = {{0, 0, x.data()}, {*a, 0, x.data() + bytes}};
  req.groups = ok;
  BatchResult r;
  EXPECT_TRUE(pl.RunBatch(req, &r).ok());
}

TEST(ViewsTest, PlanDecodesGroupsByScaleAndUnitesTheBoxes) {
  const GroupDraw draws[] = {{{0, 0, 100, 100}, 8, false},
                             {{200, 100, 50, 80}, 8, true},
                             {{40, 40, 400, 300}, 4, false},
                             {{10, 300, 30, 20}, 8, false},
                             {{0, 0, 500, 375}, 4, false}};
  DecodeStep steps[5];
  ASSERT_EQ(PlanDecodes(draws, 500, 375, steps), 2);
  EXPECT_EQ(steps[0].scale_num, 8);
  EXPECT_EQ(steps[0].groups, 0b01011u);
  EXPECT_EQ(steps[0].region, (CropBox{0, 0, 250, 320}));
  EXPECT_EQ(steps[1].scale_num, 4);
  EXPECT_EQ(steps[1].groups, 0b10100u);
  EXPECT_EQ(steps[1].region, (CropBox{0, 0, 250, 188}));  // the whole image at 1/2
  EXPECT_EQ(UnionBox({5, 6, 1, 1}, {5, 6, 1, 1}), (CropBox{5, 6, 1, 1}));
}

}  // namespace
}  // namespace batchcast::pipeline
