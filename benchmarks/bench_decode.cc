// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// bench_decode: the leader's decode pipeline on a real-photo JPEG set, through the real
// Pipeline::RunBatch. Side by side in one run, repetitions interleaved so machine noise
// hits every configuration alike:
//   rate_1 / rate_T  decode + RandomResizedCrop(224) + flip + normalize, 1 and T threads
//   cost at 112      the same chain at 112 (DCT-scaled decode + resize), 1 thread
//   naive            the same chains with DCT scaling off (full-size decode, then resize)
//   full decode      the 224 chain with crop decoding off (every pixel decoded, then the crop
//                    cut out): roi_decode_ratio = cost with crop decoding / cost without
//   decode only      TurboJPEG alone at scale 1, 1/2 and 1/8, no transform, 1 thread: the
//                    1/8 decode still Huffman-decodes every coefficient, so its cost over the
//                    224 chain (entropy_floor_ratio) bounds half_res_cost_ratio from below
//   crop floor       the 224 chain's boxes crop-decoded at 1/8 (CropFloor): the entropy
//                    floor of the crop-decoding chains (entropy_floor_crop_ratio_cpu)
//   restart markers  the same set re-coded losslessly with a restart marker at every MCU row
//                    (as some cameras write files; tests/unit/pipeline/jpeg_rewrite.h),
//                    which the crop decoder enters at the box's interval: the 224 and 112
//                    chains, the 224 full decode and the 1/8 decode on it (the *restart* keys)
// The CPU-time rows (roi_decode_ratio, the half-size ratios, floors and gaps) are measured in
// pairs: every 1-thread chain runs a slice of --slice samples before the next slice (PairedCpu).
// The image set (about 500x375, quality 90) is made from photos Debian packages ship
// (python3-skimage), by random crops, scales and mirrors; it is cached in --cache.
#include <turbojpeg.h>

#include <opencv2/imgproc.hpp>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "harness.h"
#include "pipeline/crop_decode.h"
#include "pipeline/decode.h"
#include "pipeline/pipeline.h"
#include "pipeline/sample_rng.h"
#include "pipeline/worker_pool.h"
#include "tests/unit/pipeline/memory_reader.h"
#include "tests/unit/pipeline/jpeg_rewrite.h"

namespace batchcast::bench {
namespace {

namespace fs = std::filesystem;
using pipeline::SampleRng;

struct Args {
  int images = 300, reps = 5, threads = 0, batch = 64, width = 500, height = 375, quality = 90;
  std::string cache = "decode_set";
  int slice = 8;    // --slice N: samples per turn of the paired CPU-time measurement (PairedCpu)
  int profile = 0;  // --profile SIZE: only the 1-thread SIZE chain, `reps` epochs (for perf)
  bool profile_restart = false;  // --profile-restart: profile on the set with restart markers
  bool make_set = false;  // --make-set: build (or find) the cached set and exit (bench_views)
  std::vector<std::string> photos = {
      "/usr/lib/python3/dist-packages/skimage/data/astronaut.png",
      "/usr/lib/python3/dist-packages/skimage/data/chelsea.png",
      "/usr/lib/python3/dist-packages/skimage/data/coffee.png",
      "/usr/lib/python3/dist-packages/skimage/data/motorcycle_left.png",
      "/usr/lib/python3/dist-packages/skimage/data/motorcycle_right.png",
      "/usr/lib/python3/dist-packages/skimage/data/ihc.png",
      "/usr/lib/python3/dist-packages/skimage/data/rocket.jpg",
      "/usr/lib/python3/dist-packages/skimage/data/retina.jpg",
      "/usr/lib/python3/dist-packages/skimage/data/hubble_deep_field.jpg",
  };
};

std::vector<uint8_t> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

bool WriteFile(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

// Source photos decoded to RGB, via the pipeline's own decoder.
std::vector<pipeline::DecodedImage> LoadPhotos(const Args& a) {
  std::vector<pipeline::DecodedImage> photos;
  auto decoder = pipeline::ImageDecoder::Create();
  for (const auto& path : a.photos) {
    auto bytes = ReadFile(path);
    if (bytes.empty()) continue;
    auto header = decoder->ReadHeader(bytes, int64_t(1) << 30);
    pipeline::DecodedImage img;
    if (!header.ok() || header->channels == 1 || !decoder->Decode(bytes, *header, 8, 3, &img).ok())
      continue;
    photos.push_back(std::move(img));
  }
  return photos;
}

std::vector<uint8_t> EncodeJpeg(const cv::Mat& rgb, int quality) {
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  std::vector<uint8_t> out;
  if (tjCompress2(tj, rgb.data, rgb.cols, static_cast<int>(rgb.step), rgb.rows, TJPF_RGB, &buf,
                  &size, TJSAMP_420, quality, 0) == 0)
    out.assign(buf, buf + size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

// Image i: a random 4:3 crop (50-100% of the photo's largest such box) of photo i % P,
// mirrored at random, scaled to width x height.
std::vector<uint8_t> MakeImage(const pipeline::DecodedImage& photo, int i, const Args& a) {
  SampleRng rng(2024, 0, static_cast<uint64_t>(i), pipeline::RngStream::kCrop);
  double aspect = double(a.width) / a.height;
  int max_w = std::min(photo.width, static_cast<int>(photo.height * aspect));
  int w = static_cast<int>(max_w * rng.Uniform(0.5, 1.0));
  int h = std::max(1, static_cast<int>(w / aspect));
  int x = static_cast<int>(rng.UniformInt(0, photo.width - w));
  int y = static_cast<int>(rng.UniformInt(0, photo.height - h));
  cv::Mat src(photo.height, photo.width, CV_8UC3, const_cast<uint8_t*>(photo.data()), photo.stride());
  cv::Mat out;
  cv::resize(src(cv::Rect(x, y, w, h)), out, cv::Size(a.width, a.height), 0, 0,
             w >= a.width ? cv::INTER_AREA : cv::INTER_CUBIC);
  if (rng.Bernoulli(0.5)) cv::flip(out, out, 1);
  return EncodeJpeg(out, a.quality);
}

// The cached set, or a new one written to the cache.
std::vector<std::vector<uint8_t>> ImageSet(const Args& a) {
  fs::path dir = fs::path(a.cache) / fmt::format("{}x{}_q{}_n{}", a.width, a.height, a.quality, a.images);
  std::vector<std::vector<uint8_t>> set;
  if (fs::exists(dir / "complete")) {
    for (int i = 0; i < a.images; ++i) set.push_back(ReadFile(dir / fmt::format("{:05d}.jpg", i)));
    return set;
  }
  auto photos = LoadPhotos(a);
  if (photos.size() < 3) {
    std::fprintf(stderr, "bench_decode: found %zu source photos, need 3 (install python3-skimage: make deps)\n",
                 photos.size());
    std::exit(1);
  }
  fs::create_directories(dir);
  for (int i = 0; i < a.images; ++i) {
    set.push_back(MakeImage(photos[i % photos.size()], i, a));
    WriteFile(dir / fmt::format("{:05d}.jpg", i), set.back());
  }
  WriteFile(dir / "complete", {});
  std::printf("bench_decode: built %d JPEGs from %zu photos in %s\n", a.images, photos.size(),
              dir.c_str());
  return set;
}

// One pipeline configuration; each Epoch() runs the whole set once through RunBatch.
class Config {
 public:
  Config(std::string name, int threads, int size, bool dct,
         std::shared_ptr<data::DatasetReader> reader, int batch, const char* verify = "sample",
         bool crop_decode = true)
      : name_(std::move(name)), reader_(std::move(reader)), batch_(batch) {
    Options o;
    o.verify = verify;
    o.threads = threads;
    o.image_size = size;
    o.crop = "random";
    o.flip = true;
    o.normalize = true;
    o.dct_scaling = dct;
    o.crop_decode = crop_decode;
    auto p = pipeline::Pipeline::Create(o, reader_);
    if (!p.ok()) {
      std::fprintf(stderr, "bench_decode: %s\n", p.status().ToString().c_str());
      std::exit(1);
    }
    pipeline_ = std::move(*p);
    images_.resize(pipeline_->OutputLayout().bytes() * batch);
    labels_.resize(batch);
  }

  // Samples per second over one epoch.
  double Epoch(uint64_t epoch) {
    const int64_t n = reader_->info().num_samples;
    std::vector<int64_t> idx;
    double t0 = NowSeconds(), c0 = ProcessCpuSeconds();
    for (int64_t first = 0; first < n; first += batch_) {
      idx.clear();
      for (int64_t i = first; i < std::min<int64_t>(n, first + batch_); ++i) idx.push_back(i);
      pipeline::BatchResult r;
      Status s = pipeline_->RunBatch(
          pipeline::BatchRequest{epoch, idx, 0, images_.data(), labels_.data()}, &r);
      if (!s.ok()) {
        std::fprintf(stderr, "bench_decode: %s\n", s.ToString().c_str());
        std::exit(1);
      }
      decode_ns_ += r.decode_ns;
      transform_ns_ += r.transform_ns;
    }
    double rate = n / (NowSeconds() - t0);
    rates_.push_back(rate);
    cpu_rates_.push_back(n / (ProcessCpuSeconds() - c0));
    return rate;
  }

  // Samples [first, first + count) of `epoch` through RunBatch; returns the process CPU
  // seconds they took (PairedCpu).
  double Slice(uint64_t epoch, int64_t first, int64_t count) {
    std::vector<int64_t> idx;
    for (int64_t i = first; i < first + count; ++i) idx.push_back(i);
    const double c0 = ProcessCpuSeconds();
    pipeline::BatchResult r;
    Status s = pipeline_->RunBatch(pipeline::BatchRequest{epoch, idx, 0, images_.data(), labels_.data()}, &r);
    if (!s.ok()) {
      std::fprintf(stderr, "bench_decode: %s\n", s.ToString().c_str());
      std::exit(1);
    }
    return ProcessCpuSeconds() - c0;
  }

  const std::string& name() const { return name_; }
  const std::vector<double>& rates() const { return rates_; }
  // Samples per CPU-second of the whole process (1-thread chains: the chain's own cost).
  const std::vector<double>& cpu_rates() const { return cpu_rates_; }
  void ResetRates() { rates_.clear(); cpu_rates_.clear(); decode_ns_ = transform_ns_ = 0; }
  int threads() const { return pipeline_->threads(); }
  // Share of worker time spent decoding (vs. resize/flip/normalize/write).
  double DecodeShare() const { return double(decode_ns_) / std::max<int64_t>(1, decode_ns_ + transform_ns_); }

 private:
  std::string name_;
  std::shared_ptr<data::DatasetReader> reader_;
  int batch_;
  std::unique_ptr<pipeline::Pipeline> pipeline_;
  std::vector<uint8_t> images_;
  std::vector<int64_t> labels_;
  std::vector<double> rates_, cpu_rates_;
  int64_t decode_ns_ = 0, transform_ns_ = 0;
};

pipeline::ImageDecoder CreateDecoder() {
  auto d = pipeline::ImageDecoder::Create();
  if (!d.ok()) {
    std::fprintf(stderr, "bench_decode: %s\n", d.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(d).value();
}

// Decode only (no transform): every image of the set at scale_num/8, RGB, 1 thread.
class DecodeOnly {
 public:
  DecodeOnly(int scale_num, const std::vector<std::vector<uint8_t>>* set)
      : scale_num_(scale_num), set_(set), decoder_(CreateDecoder()) {}
  void Epoch() {
    double t0 = NowSeconds(), c0 = ProcessCpuSeconds();
    Run(0, static_cast<int64_t>(set_->size()));
    rates_.push_back(double(set_->size()) / (NowSeconds() - t0));
    cpu_rates_.push_back(double(set_->size()) / (ProcessCpuSeconds() - c0));
  }
  // Images [first, first + count); returns the process CPU seconds they took (PairedCpu).
  double Slice(int64_t first, int64_t count) {
    const double c0 = ProcessCpuSeconds();
    Run(first, count);
    return ProcessCpuSeconds() - c0;
  }
  const std::vector<double>& rates() const { return rates_; }
  const std::vector<double>& cpu_rates() const { return cpu_rates_; }
  void ResetRates() { rates_.clear(); cpu_rates_.clear(); }
  int scale_num() const { return scale_num_; }

 private:
  void Run(int64_t first, int64_t count) {
    for (int64_t i = first; i < first + count; ++i) {
      const auto& bytes = (*set_)[static_cast<size_t>(i)];
      auto header = decoder_.ReadHeader(bytes, int64_t(1) << 30);
      Status s = header.ok() ? decoder_.Decode(bytes, *header, scale_num_, 3, &image_) : header.status();
      if (!s.ok()) {
        std::fprintf(stderr, "bench_decode: %s\n", s.ToString().c_str());
        std::exit(1);
      }
    }
  }

  int scale_num_;
  const std::vector<std::vector<uint8_t>>* set_;
  pipeline::ImageDecoder decoder_;
  pipeline::DecodedImage image_;
  std::vector<double> rates_, cpu_rates_;
};

// The entropy floor of the crop-decoding chains: each image's 224 RandomResizedCrop box (the
// boxes the 224 chain draws in that epoch) crop-decoded at 1/8 scale, no transform, 1 thread.
// Crop decoding stops at the box's last row, so this reads the same part of the bit stream
// as the 224 and 112 chains while the inverse DCT, colour conversion and everything after
// shrink to almost nothing: what is left is entropy decoding (and the per-image setup).
// The whole-image 1/8 decode (DecodeOnly) also entropy-decodes the rows below the box.
class CropFloor {
 public:
  explicit CropFloor(const std::vector<std::vector<uint8_t>>* set)
      : set_(set), decoder_(CreateDecoder()) {
    auto c = pipeline::JpegCropDecoder::Create();
    if (!c.ok()) {
      std::fprintf(stderr, "bench_decode: %s\n", c.status().ToString().c_str());
      std::exit(1);
    }
    crop_.emplace(std::move(c).value());
  }
  void Epoch(uint64_t epoch) {
    const double c0 = ProcessCpuSeconds();
    Run(epoch, 0, static_cast<int64_t>(set_->size()));
    cpu_rates_.push_back(double(set_->size()) / (ProcessCpuSeconds() - c0));
  }
  // Images [first, first + count) of `epoch`; returns the process CPU seconds (PairedCpu).
  double Slice(uint64_t epoch, int64_t first, int64_t count) {
    const double c0 = ProcessCpuSeconds();
    Run(epoch, first, count);
    return ProcessCpuSeconds() - c0;
  }
  void Run(uint64_t epoch, int64_t first, int64_t count) {
    const Options o;  // the chains' seed and crop scale range
    for (int64_t j = first; j < first + count; ++j) {
      const size_t i = static_cast<size_t>(j);
      const auto& bytes = (*set_)[i];
      auto header = decoder_.ReadHeader(bytes, int64_t(1) << 30);
      Status s = header.status();
      if (s.ok()) {
        SampleRng rng(o.seed, epoch, i, pipeline::RngStream::kCrop);
        const pipeline::CropBox box = pipeline::RandomResizedCropBox(
            header->width, header->height, o.crop_scale_min, o.crop_scale_max, &rng);
        const int w = pipeline::ScaledDim(header->width, 1), h = pipeline::ScaledDim(header->height, 1);
        pipeline::CropBox in;
        s = crop_->Decode(bytes, *header, 1, 3, pipeline::ScaleBox(box, 1, w, h), &image_, &in);
      }
      if (!s.ok()) {
        std::fprintf(stderr, "bench_decode: %s\n", s.ToString().c_str());
        std::exit(1);
      }
    }
  }
  const std::vector<double>& cpu_rates() const { return cpu_rates_; }
  void ResetRates() { cpu_rates_.clear(); }

 private:
  const std::vector<std::vector<uint8_t>>* set_;
  pipeline::ImageDecoder decoder_;
  std::optional<pipeline::JpegCropDecoder> crop_;
  pipeline::DecodedImage image_;
  std::vector<double> cpu_rates_;
};

// What verify=sample adds per sample, alone: the checksum of its stored bytes. Runs the
// set `rounds` times per epoch so that the time is well above the clock's resolution.
class ChecksumOnly {
 public:
  explicit ChecksumOnly(const std::vector<std::vector<uint8_t>>* set) : set_(set) {}
  void Epoch(int rounds = 20) {
    double t0 = NowSeconds();
    for (int r = 0; r < rounds; ++r)
      for (size_t i = 0; i < set_->size(); ++i) sink_ ^= data::SampleChecksum((*set_)[i], int64_t(i));
    rates_.push_back(double(set_->size()) * rounds / (NowSeconds() - t0));
  }
  const std::vector<double>& rates() const { return rates_; }
  void ResetRates() { rates_.clear(); }
  uint64_t sink() const { return sink_; }

 private:
  const std::vector<std::vector<uint8_t>>* set_;
  std::vector<double> rates_;
  uint64_t sink_ = 0;
};

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_decode: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--images") a.images = std::stoi(next());
    else if (k == "--reps") a.reps = std::stoi(next());
    else if (k == "--threads") a.threads = std::stoi(next());
    else if (k == "--batch") a.batch = std::stoi(next());
    else if (k == "--cache") a.cache = next();
    else if (k == "--profile") a.profile = std::stoi(next());
    else if (k == "--slice") a.slice = std::max(1, std::stoi(next()));
    else if (k == "--profile-restart") a.profile_restart = true;
    else if (k == "--make-set") a.make_set = true;
    else {
      std::fprintf(stderr,
                   "usage: bench_decode [--images N] [--reps R] [--threads T] [--batch B] [--cache DIR]"
                   " [--profile SIZE] [--profile-restart] [--slice N] [--make-set]\n");
      std::exit(2);
    }
  }
  if (a.profile_restart && a.profile == 0) {
    std::fprintf(stderr, "bench_decode: --profile-restart picks the set --profile SIZE runs on; "
                         "give --profile SIZE too (a whole run measures both sets)\n");
    std::exit(2);
  }
  return a;
}

std::vector<double> Ratios(const std::vector<double>& num, const std::vector<double>& den, double k) {
  std::vector<double> r;
  for (size_t i = 0; i < num.size() && i < den.size(); ++i) r.push_back(num[i] / (k * den[i]));
  return r;
}

std::vector<double> Gaps(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> g;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) g.push_back(a[i] - b[i]);
  return g;
}

// --profile SIZE: the 1-thread RandomResizedCrop SIZE chain alone, for `perf record`; prints
// its CPU-ms per sample.
int Profile(const Args& a, std::shared_ptr<data::DatasetReader> reader) {
  Config c(fmt::format("rrc{} dct 1 thread", a.profile), 1, a.profile, true, reader, a.batch);
  for (int rep = 0; rep <= a.reps; ++rep) c.Epoch(rep);
  const Stats s = Summarize(Ratios(std::vector<double>(a.reps + 1, 1000.0), c.cpu_rates(), 1));
  std::printf("%s: CPU-ms per sample min %.4g median %.4g max %.4g\n", c.name().c_str(), s.min,
              s.median, s.max);
  return 0;
}

int Main(int argc, char** argv) {
  Args a = ParseArgs(argc, argv);
  const int T = a.threads > 0 ? a.threads : pipeline::AvailableCores();
  const std::vector<std::vector<uint8_t>> set = ImageSet(a);
  if (a.make_set) return 0;
  auto reader = testing::MemoryReader::Encoded(set, "decode_set");
  reader->StoreChecksums();  // as converted files have them: verify=sample (default) checks
  if (a.profile > 0 && !a.profile_restart) return Profile(a, reader);
  // The set with a restart marker at every MCU row (the same pixels).
  std::vector<std::vector<uint8_t>> restart_set;
  size_t plain_bytes = 0, restart_bytes = 0;
  for (const auto& jpeg : set) {
    std::string why;
    restart_set.push_back(testing::AddRestartMarkers(jpeg, &why));
    if (restart_set.back().empty()) {
      std::fprintf(stderr, "bench_decode: cannot add restart markers: %s\n", why.c_str());
      std::exit(1);
    }
    plain_bytes += jpeg.size();
    restart_bytes += restart_set.back().size();
  }
  auto restart_reader = testing::MemoryReader::Encoded(restart_set, "decode_set_restart");
  restart_reader->StoreChecksums();
  if (a.profile > 0) return Profile(a, restart_reader);
  std::vector<Config> configs;
  configs.emplace_back("rrc224 dct 1 thread", 1, 224, true, reader, a.batch);
  configs.emplace_back(fmt::format("rrc224 dct {} threads", T), T, 224, true, reader, a.batch);
  configs.emplace_back("rrc112 dct 1 thread", 1, 112, true, reader, a.batch);
  configs.emplace_back("rrc224 naive 1 thread", 1, 224, false, reader, a.batch);
  configs.emplace_back("rrc112 naive 1 thread", 1, 112, false, reader, a.batch);
  configs.emplace_back("rrc224 dct 1 thread verify=off", 1, 224, true, reader, a.batch, "off");
  configs.emplace_back("rrc224 full decode 1 thread", 1, 224, true, reader, a.batch, "sample", false);
  configs.emplace_back("rrc112 full decode 1 thread", 1, 112, true, reader, a.batch, "sample", false);
  configs.emplace_back("rrc224 restart markers 1 thread", 1, 224, true, restart_reader, a.batch);
  configs.emplace_back("rrc112 restart markers 1 thread", 1, 112, true, restart_reader, a.batch);
  configs.emplace_back("rrc224 restart markers full decode 1 thread", 1, 224, true, restart_reader,
                       a.batch, "sample", false);
  std::vector<DecodeOnly> decode_only;
  for (int num : {8, 4, 1}) decode_only.emplace_back(num, &set);
  decode_only.emplace_back(1, &restart_set);
  ChecksumOnly checksum(&set);
  CropFloor crop_floor(&set);
  for (auto& c : configs) c.Epoch(0);  // warm-up: caches, allocations, page faults
  for (auto& d : decode_only) d.Epoch();
  crop_floor.Epoch(0);
  for (auto& c : configs) c.ResetRates();
  for (auto& d : decode_only) d.ResetRates();
  crop_floor.ResetRates();
  // The chains the CPU-time rows compare, in PairedCpu turns: 0 rrc224, 1 rrc112, 2 rrc224
  // full decode, 3 rrc112 full decode, 4 decode only at 1/8, 5 the crop floor; on the set
  // with restart markers: 6 rrc224, 7 rrc112, 8 rrc224 full decode, 9 decode only at 1/8.
  PairedCpu paired;
  for (int c : {0, 2, 6, 7})
    paired.Add([&configs, c](uint64_t e, int64_t f, int64_t n) { return configs[c].Slice(e, f, n); });
  paired.Add([&decode_only](uint64_t, int64_t f, int64_t n) { return decode_only[2].Slice(f, n); });
  paired.Add([&crop_floor](uint64_t e, int64_t f, int64_t n) { return crop_floor.Slice(e, f, n); });
  for (int c : {8, 9, 10})
    paired.Add([&configs, c](uint64_t e, int64_t f, int64_t n) { return configs[c].Slice(e, f, n); });
  paired.Add([&decode_only](uint64_t, int64_t f, int64_t n) { return decode_only[3].Slice(f, n); });
  const int64_t n_images = static_cast<int64_t>(set.size());
  for (int rep = 0; rep < a.reps; ++rep) {
    for (auto& c : configs) c.Epoch(1 + rep);
    for (auto& d : decode_only) d.Epoch();
    paired.Epoch(1 + rep, n_images, a.slice);
    checksum.Epoch();
  }

  const auto& r1 = configs[0].rates();
  const auto& rT = configs[1].rates();
  const auto& r112 = configs[2].rates();
  Table table(fmt::format("decode: {} JPEGs {}x{} q{}, {} reps, batch {}, T = {}", a.images, a.width,
                          a.height, a.quality, a.reps, a.batch, T));
  for (const auto& c : configs) table.Add(c.name() + " rate", Summarize(c.rates()), "samples/s");
  table.Add("scaling_efficiency rate_T/(T*rate_1)", Summarize(Ratios(rT, r1, T)), "target >= 0.9");
  table.Add("half_res_cost_ratio cost112/cost224", Summarize(Ratios(r1, r112, 1)), "target <= 0.4");
  for (size_t d = 0; d < 3; ++d)
    table.Add(fmt::format("decode only at {}/8, cost / cost224", decode_only[d].scale_num()),
              Summarize(Ratios(r1, decode_only[d].rates(), 1)),
              decode_only[d].scale_num() == 1 ? "entropy floor" : "");
  table.Add("naive half_res_cost_ratio", Summarize(Ratios(configs[3].rates(), configs[4].rates(), 1)), "");
  // Cost ratios of 1-thread chains in CPU time, measured in pairs (PairedCpu).
  const auto& c224 = paired.cpu_rates(0);
  const auto& c112 = paired.cpu_rates(1);
  const auto& f224 = paired.cpu_rates(2);
  const auto& f112 = paired.cpu_rates(3);
  const auto& floor8 = paired.cpu_rates(4);
  const auto& crop8 = paired.cpu_rates(5);
  // The rows both sets have: crop over full decode, half size, the 1/8 entropy floor, the gap
  // and the cost per sample.
  auto chain_rows = [&table](const std::string& p, const std::vector<double>& crop224,
                             const std::vector<double>& crop112, const std::vector<double>& full224,
                             const std::vector<double>& floor) {
    table.Add(p + "roi_decode_ratio cost224 / cost224 full decode", Summarize(Ratios(full224, crop224, 1)), "target <= 0.80");
    table.Add(p + "half_res_cost_ratio cost112/cost224", Summarize(Ratios(crop224, crop112, 1)), "crop decoding");
    table.Add(p + "decode only at 1/8, cost / cost224", Summarize(Ratios(crop224, floor, 1)), "entropy floor");
    table.Add(p + "gap half_res_cost_ratio - entropy floor", Summarize(Gaps(Ratios(crop224, crop112, 1), Ratios(crop224, floor, 1))), "target <= 0.15");
    table.Add(p + "decode_ms_per_sample (rrc224 chain)", Summarize(Ratios(std::vector<double>(crop224.size(), 1000.0), crop224, 1)), "ms");
  };
  chain_rows("CPU: ", c224, c112, f224, floor8);
  table.Add("CPU: half_res_cost_ratio, full decode", Summarize(Ratios(f224, f112, 1)), "before crop decoding");
  table.Add("CPU: decode only at 1/8, cost / cost224 full decode", Summarize(Ratios(f224, floor8, 1)), "entropy floor before");
  table.Add("CPU: crop decode of the 224 box at 1/8, cost / cost224", Summarize(Ratios(c224, crop8, 1)), "crop entropy floor");
  table.Add("CPU: gap half_res_cost_ratio - crop entropy floor", Summarize(Gaps(Ratios(c224, c112, 1), Ratios(c224, crop8, 1))), "");
  // The set with a restart marker at every MCU row, entered at the box's interval.
  const auto& rs224 = paired.cpu_rates(6);
  const auto& rs112 = paired.cpu_rates(7);
  const auto& rsf224 = paired.cpu_rates(8);
  const auto& rsfloor8 = paired.cpu_rates(9);
  chain_rows("CPU restart: ", rs224, rs112, rsf224, rsfloor8);
  table.Add("CPU restart: cost224 / cost224 crop decoding of the plain set", Summarize(Ratios(c224, rs224, 1)), "");
  table.Add("CPU restart: cost224 full decode / the plain set's", Summarize(Ratios(f224, rsf224, 1)), "what the markers cost a full decode");
  table.Add("dct speedup at 224 (rate/naive rate)", Summarize(Ratios(r1, configs[3].rates(), 1)), "x");
  table.Add("verify cost (rate verify=off / rate verify=sample)",
            Summarize(Ratios(configs[5].rates(), r1, 1)), "target <= 1.02");
  table.Add("checksum share (rrc224 rate / checksum-only rate)",
            Summarize(Ratios(r1, checksum.rates(), 1)), "of a sample's time");
  table.Add("dct speedup at 112 (rate/naive rate)", Summarize(Ratios(r112, configs[4].rates(), 1)), "x");
  for (const auto& c : configs)
    table.Add(c.name() + " decode share", Stats{c.DecodeShare(), c.DecodeShare(), c.DecodeShare()}, "of worker time");
  table.Print();

  const double rate_1 = Summarize(r1).median, rate_T = Summarize(rT).median;
  const double rate_112 = Summarize(r112).median;
  JsonLine json;
  json.Add("benchmark", std::string("decode"));
  json.Add("threads", T);
  json.Add("images", a.images);
  json.Add("reps", a.reps);
  json.Add("rate_1", rate_1);
  json.Add("rate_T", rate_T);
  json.Add("scaling_efficiency", rate_T / (T * rate_1));
  json.Add("half_res_cost_ratio", rate_1 / rate_112);
  json.Add("naive_rate_1", Summarize(configs[3].rates()).median);
  json.Add("rate_112_1", rate_112);
  json.Add("verify_cost_ratio", Summarize(Ratios(configs[5].rates(), r1, 1)).median);
  json.Add("checksum_share", Summarize(Ratios(r1, checksum.rates(), 1)).median);
  if (checksum.sink() == 42) std::printf(" \n");  // keeps the checksums from being optimised away
  // Lower bound of half_res_cost_ratio for any DCT-scaled decode of these baseline JPEGs.
  json.Add("entropy_floor_ratio", rate_1 / Summarize(decode_only[2].rates()).median);
  // CPU-time cost ratios of the 1-thread chains (see the table's "CPU:" rows).
  auto median = [](const std::vector<double>& v) { return Summarize(v).median; };
  json.Add("roi_decode_ratio", median(Ratios(f224, c224, 1)));
  json.Add("decode_ms_per_sample", 1000.0 / median(c224));
  json.Add("half_res_cost_ratio_cpu", median(Ratios(c224, c112, 1)));
  json.Add("entropy_floor_ratio_cpu", median(Ratios(c224, floor8, 1)));
  json.Add("half_res_cost_ratio_full_decode_cpu", median(Ratios(f224, f112, 1)));
  json.Add("entropy_floor_ratio_full_decode_cpu", median(Ratios(f224, floor8, 1)));
  // The entropy floor of the crop-decoding chains (CropFloor), and the gaps, repetition by
  // repetition.
  json.Add("entropy_floor_crop_ratio_cpu", median(Ratios(c224, crop8, 1)));
  json.Add("half_res_gap_cpu", median(Gaps(Ratios(c224, c112, 1), Ratios(c224, floor8, 1))));
  json.Add("cpu_pair_slice", a.slice);
  json.Add("half_res_gap_crop_floor_cpu", median(Gaps(Ratios(c224, c112, 1), Ratios(c224, crop8, 1))));
  // The set with a restart marker at every MCU row: crop decoding over the full decode on
  // it, against the plain set's crop chain, what the markers cost a full decode, the
  // half-size ratio and its gap to the set's own entropy floor.
  json.Add("roi_decode_ratio_restart", median(Ratios(rsf224, rs224, 1)));
  json.Add("restart_over_plain_crop_cpu", median(Ratios(c224, rs224, 1)));
  json.Add("restart_full_decode_cost_ratio", median(Ratios(f224, rsf224, 1)));
  json.Add("half_res_cost_ratio_restart_cpu", median(Ratios(rs224, rs112, 1)));
  json.Add("entropy_floor_ratio_restart_cpu", median(Ratios(rs224, rsfloor8, 1)));
  json.Add("half_res_gap_restart_cpu", median(Gaps(Ratios(rs224, rs112, 1), Ratios(rs224, rsfloor8, 1))));
  json.Add("decode_ms_per_sample_restart", 1000.0 / median(rs224));
  json.Add("restart_bytes_ratio", double(restart_bytes) / double(plain_bytes));
  json.Print();
  return 0;
}

}  // namespace
}  // namespace batchcast::bench

int main(int argc, char** argv) { return batchcast::bench::Main(argc, argv); }
