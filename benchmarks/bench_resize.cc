// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// bench_resize: what progressive resizing costs the leader per bucket size, through the
// real Pipeline::RunBatch with a per-batch image_size (as the leader issues it), on the
// real-photo JPEG set (500x375, q90), one worker thread, CPU time of the process:
//   online dct    decode at the DCT scale nearest above the target, then resize
//   online naive  full-size decode, then resize (dct_scaling=false)
//   offline       the file's pre-resized bucket image (`batchcast convert --buckets`)
//   decode only   TurboJPEG alone at scale 1/8 and 1/1, no transform: the 1/8 decode still
//                 Huffman-decodes every coefficient of the image, so its cost over the
//                 full-size online chain (entropy_floor_ratio) bounds any online DCT-scaled
//                 ratio from below, whatever the target size
// and the encoded bytes read per sample. Each configuration runs RandomResizedCrop +
// flip + normalize to float32 (the training chain of bench_decode). The two HDF5 files
// are made by the real CLI (`batchcast convert imagefolder [--buckets ...]`) and cached.
// Repetitions are interleaved so machine noise hits every configuration alike.
#include <time.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "harness.h"
#include "pipeline/decode.h"
#include "pipeline/pipeline.h"
#include "tests/mpi/photo_set.h"

namespace batchcast::bench {
namespace {

namespace fs = std::filesystem;

struct Args {
  int images = 200, reps = 3, batch = 64;
  std::vector<int> sizes = {96, 112, 128, 160, 192, 224};
  std::string cache = "resize_set";
  std::string cli = "batchcast";
};

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "bench_resize: %s\n", why.c_str());
  std::exit(1);
}

std::string Join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{}", i ? "," : "", v[i]);
  return s;
}

// The photo set as an ImageFolder, converted by the CLI with and without buckets.
void BuildSet(const Args& a, std::string* plain, std::string* bucketed) {
  const fs::path dir = fs::path(a.cache) / fmt::format("photos_n{}", a.images);
  *plain = (dir / "plain.h5").string();
  *bucketed = (dir / fmt::format("buckets_{}.h5", Join(a.sizes))).string();
  if (!fs::exists(dir / "folder_complete")) {
    auto photos = mpitest::LoadPhotos();
    if (!photos.ok()) Die(photos.status().message());
    mpitest::PhotoSetSpec spec;
    spec.width = 500;
    spec.height = 375;
    for (int i = 0; i < a.images; ++i) {
      auto jpeg = mpitest::MakePhotoJpeg((*photos)[i % photos->size()], i, spec);
      if (!jpeg.ok()) Die(jpeg.status().message());
      fs::path cls = dir / "folder" / fmt::format("class{}", i % 10);
      fs::create_directories(cls);
      std::ofstream(cls / fmt::format("{:05d}.jpg", i), std::ios::binary)
          .write(reinterpret_cast<const char*>(jpeg->data()), std::streamsize(jpeg->size()));
    }
    std::ofstream(dir / "folder_complete").put('\n');
  }
  auto convert = [&](const std::string& out, const std::string& extra) {
    if (fs::exists(out)) return;
    std::string cmd = fmt::format("'{}' convert imagefolder '{}' --out '{}' --force {}", a.cli,
                                  (dir / "folder").string(), out, extra);
    std::printf("bench_resize: %s\n", cmd.c_str());
    std::fflush(stdout);
    if (std::system(cmd.c_str()) != 0) Die("conversion failed: " + cmd);
  };
  convert(*plain, "");
  convert(*bucketed, "--buckets " + Join(a.sizes));
}

// One (mode, size) configuration through the real pipeline.
class Config {
 public:
  Config(std::string mode, int size, int full, bool dct,
         std::shared_ptr<data::DatasetReader> reader, int batch)
      : mode_(std::move(mode)), size_(size), reader_(std::move(reader)), batch_(batch) {
    Options o;
    o.threads = 1;
    o.image_size = full;
    o.crop = "random";
    o.flip = true;
    o.normalize = true;
    o.dct_scaling = dct;
    auto p = pipeline::Pipeline::Create(o, reader_);
    if (!p.ok()) Die(p.status().ToString());
    pipeline_ = std::move(*p);
    images_.resize(pipeline_->OutputLayout(size).bytes() * size_t(batch));
    labels_.resize(size_t(batch));
  }

  // One epoch; records CPU microseconds per sample.
  void Epoch(uint64_t epoch) {
    const int64_t n = reader_->info().num_samples;
    std::vector<int64_t> idx;
    const double c0 = CpuSeconds();
    for (int64_t first = 0; first < n; first += batch_) {
      idx.clear();
      for (int64_t i = first; i < std::min<int64_t>(n, first + batch_); ++i) idx.push_back(i);
      pipeline::BatchResult r;
      Status s = pipeline_->RunBatch(
          pipeline::BatchRequest{epoch, idx, size_, images_.data(), labels_.data()}, &r);
      if (!s.ok()) Die(s.ToString());
    }
    us_.push_back(1e6 * (CpuSeconds() - c0) / double(n));
  }
  const std::string& mode() const { return mode_; }
  int size() const { return size_; }
  const std::vector<double>& us() const { return us_; }
  void Reset() { us_.clear(); }

 private:
  std::string mode_;
  int size_;
  std::shared_ptr<data::DatasetReader> reader_;
  int batch_;
  std::unique_ptr<pipeline::Pipeline> pipeline_;
  std::vector<uint8_t> images_;
  std::vector<int64_t> labels_;
  std::vector<double> us_;
};

// TurboJPEG alone, at scale_num/8, RGB, no transform, over the encoded set (read once).
class DecodeOnly {
 public:
  DecodeOnly(int scale_num, const data::DatasetReader& reader) : scale_num_(scale_num) {
    auto d = pipeline::ImageDecoder::Create();
    if (!d.ok()) Die(d.status().ToString());
    decoder_ = std::make_unique<pipeline::ImageDecoder>(std::move(*d));
    for (int64_t i = 0; i < reader.info().num_samples; ++i) {
      set_.emplace_back();
      Status s = reader.ReadSample(i, &set_.back());
      if (!s.ok()) Die(s.ToString());
    }
  }
  void Epoch() {
    const double c0 = CpuSeconds();
    for (const auto& bytes : set_) {
      auto header = decoder_->ReadHeader(bytes, int64_t(1) << 30);
      Status s = header.ok() ? decoder_->Decode(bytes, *header, scale_num_, 3, &image_)
                             : header.status();
      if (!s.ok()) Die(s.ToString());
    }
    us_.push_back(1e6 * (CpuSeconds() - c0) / double(set_.size()));
  }
  int scale_num() const { return scale_num_; }
  const std::vector<double>& us() const { return us_; }
  void Reset() { us_.clear(); }

 private:
  int scale_num_;
  std::unique_ptr<pipeline::ImageDecoder> decoder_;
  std::vector<std::vector<uint8_t>> set_;
  pipeline::DecodedImage image_;
  std::vector<double> us_;
};

// Mean encoded bytes read per sample at `size` (0: the original images).
double BytesPerSample(const data::DatasetReader& r, int size) {
  std::vector<uint8_t> buf;
  double total = 0;
  for (int64_t i = 0; i < r.info().num_samples; ++i) {
    Status s = size > 0 ? r.ReadBucketSample(size, i, &buf) : r.ReadSample(i, &buf);
    if (!s.ok()) Die(s.ToString());
    total += double(buf.size());
  }
  return total / double(r.info().num_samples);
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--images") a.images = std::atoi(v.c_str());
    else if (k == "--reps") a.reps = std::atoi(v.c_str());
    else if (k == "--batch") a.batch = std::atoi(v.c_str());
    else if (k == "--cache") a.cache = v;
    else if (k == "--cli") a.cli = v;
    else if (k == "--sizes") {
      a.sizes.clear();
      for (size_t p = 0; p <= v.size();) {
        size_t e = v.find(',', p);
        if (e == std::string::npos) e = v.size();
        a.sizes.push_back(std::atoi(v.substr(p, e - p).c_str()));
        p = e + 1;
      }
    } else {
      Die(fmt::format("unknown option {} (known: --images --reps --batch --sizes --cache --cli)", k));
    }
  }
  if (a.images <= 0 || a.reps <= 0 || a.batch <= 0 || a.sizes.empty()) Die("bad arguments");
  return a;
}

std::string JsonArray(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{:.4g}", i ? ", " : "", v[i]);
  return s + "]";
}

int Main(int argc, char** argv) {
  Args a = ParseArgs(argc, argv);
  std::string plain_path, bucket_path;
  BuildSet(a, &plain_path, &bucket_path);
  auto plain = data::DatasetReader::Open(plain_path);
  auto bucketed = data::DatasetReader::Open(bucket_path);
  if (!plain.ok()) Die(plain.status().ToString());
  if (!bucketed.ok()) Die(bucketed.status().ToString());
  if ((*bucketed)->info().bucket_sizes != a.sizes) Die("the bucketed file lacks the buckets");
  const int full = a.sizes.back();
  std::vector<Config> configs;  // per size: dct, naive, offline
  for (int s : a.sizes) {
    configs.emplace_back("online dct", s, full, true, *plain, a.batch);
    configs.emplace_back("online naive", s, full, false, *plain, a.batch);
    configs.emplace_back("offline", s, full, true, *bucketed, a.batch);
  }
  std::vector<DecodeOnly> decode_only;  // 1/8 (the entropy floor) and 1/1
  for (int num : {1, 8}) decode_only.emplace_back(num, **plain);
  for (auto& c : configs) c.Epoch(0);  // warm-up
  for (auto& d : decode_only) d.Epoch();
  for (auto& c : configs) c.Reset();
  for (auto& d : decode_only) d.Reset();
  for (int rep = 0; rep < a.reps; ++rep) {
    for (auto& c : configs) c.Epoch(uint64_t(1 + rep));
    for (auto& d : decode_only) d.Epoch();
  }

  const double online_bytes = BytesPerSample(**plain, 0);
  const size_t nb = a.sizes.size();
  auto median = [&](size_t bucket, int mode) { return Summarize(configs[bucket * 3 + mode].us()).median; };
  const double full_dct = median(nb - 1, 0);
  Table table(fmt::format("resize: {} real-photo JPEGs 500x375 q90, RandomResizedCrop + flip + "
                          "normalize, 1 thread, {} reps; CPU per sample", a.images, a.reps));
  std::vector<double> ratio_dct, ratio_naive, ratio_offline, us_dct, us_naive, us_off, bytes_off;
  for (size_t b = 0; b < nb; ++b) {
    for (int m = 0; m < 3; ++m) {
      const Config& c = configs[b * 3 + m];
      table.Add(fmt::format("{} @{} cpu/sample", c.mode(), c.size()), Summarize(c.us()), "us");
    }
    us_dct.push_back(median(b, 0));
    us_naive.push_back(median(b, 1));
    us_off.push_back(median(b, 2));
    ratio_dct.push_back(median(b, 0) / full_dct);
    ratio_naive.push_back(median(b, 1) / full_dct);
    ratio_offline.push_back(median(b, 2) / full_dct);
    bytes_off.push_back(BytesPerSample(**bucketed, a.sizes[b]));
    for (int m = 0; m < 3; ++m) {  // per repetition: cost at this size / online dct at full
      const Config& c = configs[b * 3 + m];
      std::vector<double> r;
      for (size_t i = 0; i < c.us().size(); ++i) r.push_back(c.us()[i] / configs[(nb - 1) * 3].us()[i]);
      table.Add(fmt::format("{} @{} / online dct @{}", c.mode(), c.size(), full), Summarize(r), "x");
    }
    const double off = bytes_off.back();
    table.Add(fmt::format("bytes read @{} offline (online: all sizes)", a.sizes[b]),
              Stats{off, off, off}, fmt::format("B/sample (online {:.0f})", online_bytes));
  }
  std::vector<double> decode_only_ratio;  // per repetition over online dct at full size
  for (const DecodeOnly& d : decode_only) {
    std::vector<double> r;
    for (size_t i = 0; i < d.us().size(); ++i) r.push_back(d.us()[i] / configs[(nb - 1) * 3].us()[i]);
    table.Add(fmt::format("decode only at {}/8 cpu/sample", d.scale_num()), Summarize(d.us()), "us");
    table.Add(fmt::format("decode only at {}/8 / online dct @{}", d.scale_num(), full),
              Summarize(r), d.scale_num() == 1 ? "x (entropy floor)" : "x");
    decode_only_ratio.push_back(Summarize(d.us()).median / full_dct);
  }
  const double entropy_floor = decode_only_ratio[0];
  double bucket_bytes = 0;
  for (double v : bytes_off) bucket_bytes += v;
  const double storage_ratio = (online_bytes + bucket_bytes) / online_bytes;
  table.Add("offline storage (images + buckets) / images", Stats{storage_ratio, storage_ratio, storage_ratio}, "x");
  table.Print();

  // Half of full size (the target point), if it is a bucket.
  double half_ratio = -1;
  for (size_t b = 0; b < nb; ++b)
    if (a.sizes[b] * 2 == full) half_ratio = ratio_dct[b];
  std::vector<double> sizes(a.sizes.begin(), a.sizes.end());
  std::printf(
      "{\"benchmark\": \"resize\", \"images\": %d, \"reps\": %d, \"threads\": 1, "
      "\"bucket_sizes\": %s, \"cpu_per_sample_ratio_vs_full\": %s, "
      "\"naive_cpu_per_sample_ratio_vs_full\": %s, \"offline_cpu_per_sample_ratio_vs_full\": %s, "
      "\"cpu_us_per_sample_dct\": %s, \"cpu_us_per_sample_naive\": %s, "
      "\"cpu_us_per_sample_offline\": %s, \"bytes_read_per_sample_online\": %.6g, "
      "\"bytes_read_per_sample_offline\": %s, \"half_size_cpu_ratio\": %.4g, "
      "\"entropy_floor_ratio\": %.4g, \"full_decode_only_ratio\": %.4g, "
      "\"offline_storage_ratio\": %.4g}\n",
      a.images, a.reps, JsonArray(sizes).c_str(), JsonArray(ratio_dct).c_str(),
      JsonArray(ratio_naive).c_str(), JsonArray(ratio_offline).c_str(), JsonArray(us_dct).c_str(),
      JsonArray(us_naive).c_str(), JsonArray(us_off).c_str(), online_bytes,
      JsonArray(bytes_off).c_str(), half_ratio, entropy_floor, decode_only_ratio[1],
      storage_ratio);
  return 0;
}

}  // namespace
}  // namespace batchcast::bench

int main(int argc, char** argv) { return batchcast::bench::Main(argc, argv); }
