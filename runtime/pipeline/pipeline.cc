// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Pipeline: per sample, read → header (pixel limit) → crop box → DCT-scaled decode →
// resize → final write into the batch buffer, on a pool of worker threads.
#include "pipeline/pipeline.h"

#include <opencv2/core.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <sstream>

#include "core/clock.h"
#include "core/errors.h"
#include "core/log.h"
#include "data/dataset_inspect.h"
#include "pipeline/crop_decode.h"
#include "pipeline/decode.h"
#include "pipeline/sample_rng.h"
#include "pipeline/transform.h"
#include "pipeline/worker_pool.h"

namespace batchcast::pipeline {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kUint8: return 1;
    case DType::kFloat32: return 4;
    case DType::kInt64: return 8;
  }
  return 0;
}

std::string_view BadSampleCause(std::string_view message) {
  // Most specific first: a read error may say "is empty", a decode error names its format.
  static constexpr std::pair<std::string_view, std::string_view> kCauses[] = {
      {"fails its checksum", "checksum"}, {"empty", "empty"},
      {"max_pixels", "pixel_limit"},    {"unknown image format", "format"},
      {"jpeg", "jpeg"},                 {"png", "png"},
      {"raw sample has", "raw_size"},   {"read failed", "read"},
  };
  for (const auto& [needle, cause] : kCauses)
    if (message.find(needle) != std::string_view::npos) return cause;
  return "other";
}

namespace {

enum class CropMode { kNone, kCenter, kRandom };

// "0.485,0.456,0.406" → values; 1 value is broadcast to every channel.
Result<std::vector<double>> ParseChannelValues(const std::string& key, const std::string& text,
                                               int channels) {
  std::vector<double> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0')
      return InvalidArgumentError("pipeline: option '{}' = '{}': '{}' is not a number", key, text, item);
    values.push_back(v);
  }
  if (values.size() == 1) values.assign(channels, values[0]);
  if (static_cast<int>(values.size()) != channels)
    return InvalidArgumentError("pipeline: option '{}' has {} values but the output has {} channels",
                                key, values.size(), channels);
  return values;
}

// Everything one worker thread owns; aligned so workers never share a cache line.
struct alignas(64) WorkerContext {
  ImageDecoder decoder;
  JpegCropDecoder crop_decoder;   // decodes only the crop box (options.crop_decode)
  std::vector<uint8_t> encoded;   // the stored bytes of the current sample
  DecodedImage decoded;           // decoded (or channel-converted raw) pixels
  std::vector<uint8_t> resized;   // the resized box, when it cannot go straight to the slot
  WorkerContext(ImageDecoder d, JpegCropDecoder c)
      : decoder(std::move(d)), crop_decoder(std::move(c)) {}
};

// One started producer batch: everything its samples need, so that the workers can run the
// samples of several batches at once (StartBatch).
struct BatchJob {
  BatchRequest req;               // req.samples points into `samples`
  std::vector<int64_t> samples;
  OutputSpec spec;                // layout of this batch + the value table
  int bucket_size = 0;            // offline bucket of the file this batch reads (0: none)
  int64_t cache_key_base = 0;     // DecodedSampleCache key of sample 0 of this batch's file
  Status check;                   // the request's own error: no sample runs
  std::vector<Status> statuses;   // per batch position
  std::atomic<int64_t> read_ns{0}, read_lock_ns{0}, decode_ns{0}, transform_ns{0};
  std::atomic<int64_t> cache_hits{0}, cache_misses{0};
  WorkerPool::Ticket ticket = 0;
};

// Stage times of one sample, added to its batch once.
struct SampleTimes {
  int64_t read_ns = 0, read_lock_ns = 0, decode_ns = 0, transform_ns = 0;
  int64_t cache_hits = 0, cache_misses = 0;
};

class PipelineImpl final : public Pipeline {
 public:
  PipelineImpl(const Options& options, std::shared_ptr<data::DatasetReader> reader,
               std::shared_ptr<DecodedSampleCache> cache)
      : options_(options), reader_(std::move(reader)), cache_(std::move(cache)) {}
  ~PipelineImpl() override;

  Status Init();
  SampleLayout OutputLayout(int image_size) const override;
  int threads() const override { return pool_->threads(); }
  const data::DatasetInfo& dataset() const override { return reader_->info(); }
  void StartBatch(const BatchRequest& req) override;
  Status FinishBatch(BatchResult* result) override;
  int batches_in_flight() const override { return static_cast<int>(jobs_.size()); }
  bool WaitOldest(int64_t timeout_ms) override {
    return jobs_.empty() || pool_->WaitFor(jobs_.front()->ticket, timeout_ms);
  }
  int64_t idle_ns() const override { return pool_->idle_ns(); }
  Result<size_t> DecodedBytes(int64_t index) override;

 private:
  Status InitVerify();
  Status CheckRequest(const BatchRequest& req) const;
  Status ProcessSample(WorkerContext& ctx, const BatchJob& job, int64_t index, void* dst,
                       SampleTimes* times);
  Status ReadSample(WorkerContext& ctx, int bucket_size, int64_t index, SampleTimes* times);
  Status RawPixels(WorkerContext& ctx, int64_t index, int out_channels, PixelView* view) const;
  Status LoadPixels(WorkerContext& ctx, const BatchJob& job, int64_t index, CropBox* box,
                    PixelView* view);
  Status LoadCached(WorkerContext& ctx, const BatchJob& job, int64_t index, CropBox* box,
                    PixelView* view, SampleTimes* times);
  Status DecodeWhole(WorkerContext& ctx, const BatchJob& job, int64_t index, DecodedSample* out);
  int CacheScale(const ImageHeader& header) const;
  CropBox ChooseBox(int width, int height, int64_t index, uint64_t epoch) const;
  Status Finish(BatchJob& job, BatchResult* result);

  Options options_;
  std::shared_ptr<data::DatasetReader> reader_;
  std::shared_ptr<DecodedSampleCache> cache_;  // null: cache=0
  std::unique_ptr<WorkerPool> pool_;
  std::vector<std::unique_ptr<WorkerContext>> workers_;
  CropMode crop_ = CropMode::kNone;
  bool verify_ = false;           // options.verify != off: check each sample's checksum
  OutputSpec spec_;               // layout at the options' size + the value table
  std::deque<std::unique_ptr<BatchJob>> jobs_;  // started, not finished, in order
  int64_t skipped_total_ = 0;
};

PipelineImpl::~PipelineImpl() {
  for (auto& job : jobs_) pool_->Wait(job->ticket);  // nobody writes a buffer after this
  // The producer reports skips per cause and epoch (producer/skip_account.h); this is the
  // pipeline's own total, for direct users of the pipeline.
  if (skipped_total_ > 0)
    BC_LOG(Info, Pipe, "pipeline: skipped {} bad samples of {} in total (on_bad_sample=skip)",
           skipped_total_, reader_->info().path);
}

Status PipelineImpl::Init() {
  BC_RETURN_IF_ERROR(ValidateOptions(options_).WithContext("pipeline"));
  const data::DatasetInfo& info = reader_->info();
  const bool raw = info.kind == data::SampleKind::kRaw;
  if (!raw && options_.image_size == 0)
    return InvalidArgumentError("pipeline: {} stores {} of varying size; set option 'image_size'",
                                info.path,
                                info.kind == data::SampleKind::kPixels ? "pixels" : "encoded images");
  if (raw && (info.raw_height <= 0 || info.raw_width <= 0 ||
              (info.raw_channels != 1 && info.raw_channels != 3 && info.raw_channels != 4)))
    return InvalidArgumentError("pipeline: {} has raw samples of shape {}x{}x{}, expected HxWx1|3|4",
                                info.path, info.raw_height, info.raw_width, info.raw_channels);
  crop_ = options_.crop == "center" ? CropMode::kCenter
          : options_.crop == "random" ? CropMode::kRandom : CropMode::kNone;
  spec_.layout = OutputLayout(0);
  if (spec_.layout.dtype == DType::kFloat32) {
    std::vector<double> mean, std;
    if (options_.normalize) {
      BC_ASSIGN_OR_RETURN(mean, ParseChannelValues("mean", options_.mean, spec_.layout.channels));
      BC_ASSIGN_OR_RETURN(std, ParseChannelValues("std", options_.std, spec_.layout.channels));
      for (double s : std)
        if (s == 0) return InvalidArgumentError("pipeline: option 'std' = '{}' has a zero", options_.std);
    }
    BuildOutputLut(mean, std, &spec_);
  }
  BC_RETURN_IF_ERROR(InitVerify());
  cv::setNumThreads(0);  // OpenCV must not start threads of its own inside our workers
  const int threads = options_.threads > 0 ? options_.threads : AvailableCores();
  for (int w = 0; w < threads; ++w) {
    BC_ASSIGN_OR_RETURN(ImageDecoder decoder, ImageDecoder::Create());
    BC_ASSIGN_OR_RETURN(JpegCropDecoder crop_decoder, JpegCropDecoder::Create());
    workers_.push_back(
        std::make_unique<WorkerContext>(std::move(decoder), std::move(crop_decoder)));
  }
  pool_ = std::make_unique<WorkerPool>(threads, "bc-decode");
  BC_LOG(Info, Pipe, "pipeline: {} threads, output {}x{}x{} {} {} for {}", threads,
         spec_.layout.channels, spec_.layout.height, spec_.layout.width,
         spec_.layout.dtype == DType::kUint8 ? "uint8" : "float32",
         spec_.layout.layout == Layout::kCHW ? "chw" : "hwc", info.path);
  return Status::Ok();
}

// verify=sample checks each sample as it is read (ProcessSample); verify=full also reads
// and checks the whole file once now, so that a damaged file is known before training.
// Either way a sample that fails is a bad sample under on_bad_sample.
Status PipelineImpl::InitVerify() {
  const data::DatasetInfo& info = reader_->info();
  verify_ = options_.verify != "off";
  if (!verify_) return Status::Ok();
  if (!info.has_checksums) {
    BC_LOG(Info, Pipe, "pipeline: {} stores no sample checksums (written before Batchcast stored "
           "them): verify={} checks nothing; re-create it with `batchcast convert` to have them",
           info.path, options_.verify);
    return Status::Ok();
  }
  if (options_.verify != "full") return Status::Ok();
  std::vector<data::BadSample> bad;
  BC_ASSIGN_OR_RETURN(uint64_t checksum, data::DatasetChecksum(*reader_, nullptr, &bad));
  if (bad.empty()) {
    BC_LOG(Info, Pipe, "pipeline: verify=full: all {} samples of {} match their checksums "
           "(content checksum {})", info.num_samples, info.path, data::FormatChecksum(checksum));
    return Status::Ok();
  }
  const std::string what =
      fmt::format("pipeline: verify=full: {} of {} samples of {} are bad, the first: sample {}: "
                  "{}; list them all with `batchcast inspect --verify {}`", bad.size(),
                  info.num_samples, info.path, bad[0].index, bad[0].cause, info.path);
  if (options_.on_bad_sample != "skip")
    return CorruptDataError("{}; or set on_bad_sample=skip to train without them", what);
  BC_LOG(Warn, Pipe, "{}; they are skipped (on_bad_sample=skip)", what);
  return Status::Ok();
}

SampleLayout PipelineImpl::OutputLayout(int image_size) const {
  const data::DatasetInfo& info = reader_->info();
  const bool raw = info.kind == data::SampleKind::kRaw;
  SampleLayout l;
  int size = image_size > 0 ? image_size : options_.image_size;
  l.height = size > 0 ? size : info.raw_height;
  l.width = size > 0 ? size : info.raw_width;
  if (options_.channels != 0) l.channels = options_.channels;
  else l.channels = raw && info.raw_channels == 1 ? 1 : 3;
  l.dtype = options_.normalize || options_.dtype == "float32" ? DType::kFloat32 : DType::kUint8;
  l.layout = options_.layout == "hwc" ? Layout::kHWC : Layout::kCHW;
  return l;
}

CropBox PipelineImpl::ChooseBox(int width, int height, int64_t index, uint64_t epoch) const {
  switch (crop_) {
    case CropMode::kCenter: return CenterCropBox(width, height);
    case CropMode::kRandom: {
      SampleRng rng(options_.seed, epoch, static_cast<uint64_t>(index), RngStream::kCrop);
      return RandomResizedCropBox(width, height, options_.crop_scale_min, options_.crop_scale_max,
                                  &rng);
    }
    case CropMode::kNone: break;
  }
  return FullBox(width, height);
}

}  // namespace

namespace {

// The raw sample (or stored pixels, `convert --store`) just read, checked and converted to
// the output's channels.
Status PipelineImpl::RawPixels(WorkerContext& ctx, int64_t index, int out_channels,
                               PixelView* view) const {
  const data::StoredShape shape = reader_->SampleShape(index);
  const int w = shape.width, h = shape.height, c = shape.channels;
  const size_t expect = size_t(w) * h * c;
  if (ctx.encoded.size() != expect)
    return CorruptDataError("raw sample has {} bytes, expected {}x{}x{} = {}", ctx.encoded.size(),
                            h, w, c, expect);
  if (int64_t(w) * h > options_.max_pixels)
    return OutOfRangeError("raw image is {}x{} = {} pixels, over the limit max_pixels={}", w, h,
                           int64_t(w) * h, options_.max_pixels);
  const int want = (out_channels == 1 || c == 1) ? 1 : 3;
  *view = PixelView{ctx.encoded.data(), size_t(w) * c, w, h, c};
  if (want != c) {
    ConvertChannels(ctx.encoded.data(), w, h, c, want, &ctx.decoded);
    *view = PixelView{ctx.decoded.data(), ctx.decoded.stride(), w, h, want};
  }
  return Status::Ok();
}

Status PipelineImpl::LoadPixels(WorkerContext& ctx, const BatchJob& job, int64_t index,
                                CropBox* box, PixelView* view) {
  const data::DatasetInfo& info = reader_->info();
  const SampleLayout& l = job.spec.layout;
  const uint64_t epoch = job.req.epoch;
  const int out_c = l.channels;
  if (info.kind != data::SampleKind::kEncoded && job.bucket_size == 0) {
    BC_RETURN_IF_ERROR(RawPixels(ctx, index, out_c, view));
    *box = ChooseBox(view->width, view->height, index, epoch);
    return Status::Ok();
  }
  BC_ASSIGN_OR_RETURN(ImageHeader header, ctx.decoder.ReadHeader(ctx.encoded, options_.max_pixels));
  const CropBox full_box = ChooseBox(header.width, header.height, index, epoch);
  int scale = kScaleDenom;
  if (options_.dct_scaling && header.format == ImageFormat::kJpeg)
    scale = ChooseScaleNum(full_box.width, full_box.height, l.width, l.height);
  const int want = (out_c == 1 || header.channels == 1) ? 1 : 3;
  const int scaled_w = ScaledDim(header.width, scale), scaled_h = ScaledDim(header.height, scale);
  if (options_.crop_decode && crop_ != CropMode::kNone && header.format == ImageFormat::kJpeg &&
      !(full_box == FullBox(header.width, header.height))) {
    // Only the box's rows and columns (docs/pipeline.md, crop decoding): same pixels.
    const CropBox scaled = ScaleBox(full_box, scale, scaled_w, scaled_h);
    BC_RETURN_IF_ERROR(
        ctx.crop_decoder.Decode(ctx.encoded, header, scale, want, scaled, &ctx.decoded, box));
  } else {
    BC_RETURN_IF_ERROR(ctx.decoder.Decode(ctx.encoded, header, scale, want, &ctx.decoded));
    *box = ScaleBox(full_box, scale, ctx.decoded.width, ctx.decoded.height);
  }
  *view = PixelView{ctx.decoded.data(), ctx.decoded.stride(), ctx.decoded.width,
                    ctx.decoded.height, ctx.decoded.channels};
  return Status::Ok();
}

// Read time and lock-wait time apart: the reader's lock waits (this thread's, around the
// read) are read_lock_ns, the rest of the read (and the checksum) read_ns.
Status PipelineImpl::ReadSample(WorkerContext& ctx, int bucket_size, int64_t index,
                                SampleTimes* times) {
  const int64_t t0 = core::SteadyNowNs();
  const int64_t wait0 = data::ThisThreadReaderLockWaitNs();
  Status s = bucket_size > 0 ? reader_->ReadBucketSample(bucket_size, index, &ctx.encoded)
                             : reader_->ReadSample(index, &ctx.encoded);
  const int64_t waited = data::ThisThreadReaderLockWaitNs() - wait0;
  times->read_lock_ns += waited;
  if (!s.ok()) return s.WithContext("read failed");
  if (verify_ && bucket_size == 0) BC_RETURN_IF_ERROR(reader_->VerifySample(index, ctx.encoded));
  times->read_ns += core::SteadyNowNs() - t0 - waited;
  return Status::Ok();
}

// The scale a cached sample is decoded at: the one the crop mode's smallest box needs at the
// options' output size, so every epoch's box has at least the pixels an online decode would
// give it. For crop=none|center (fixed boxes) it is the online decode's own scale.
int PipelineImpl::CacheScale(const ImageHeader& header) const {
  if (!options_.dct_scaling || header.format != ImageFormat::kJpeg) return kScaleDenom;
  const int w = header.width, h = header.height;
  CropBox smallest = FullBox(w, h);
  if (crop_ == CropMode::kCenter) smallest = CenterCropBox(w, h);
  if (crop_ == CropMode::kRandom) {
    // RandomResizedCropBox: area >= scale_min of the image, aspect ratio in [3/4, 4/3], so
    // no side is under sqrt(scale_min * area * 3/4) (less one for rounding).
    const double side = std::sqrt(options_.crop_scale_min * double(w) * h * 0.75);
    const int s = std::max(1, static_cast<int>(side) - 1);
    smallest = CropBox{0, 0, std::min(s, w), std::min(s, h)};
  }
  return ChooseScaleNum(smallest.width, smallest.height, spec_.layout.width,
                        spec_.layout.height);
}

// The sample just read as the deterministic part of the pipeline leaves it: the whole image
// at CacheScale (a raw sample: converted to the output's channels).
Status PipelineImpl::DecodeWhole(WorkerContext& ctx, const BatchJob& job, int64_t index,
                                 DecodedSample* out) {
  const int out_c = spec_.layout.channels;
  if (reader_->info().kind != data::SampleKind::kEncoded && job.bucket_size == 0) {
    PixelView v;
    BC_RETURN_IF_ERROR(RawPixels(ctx, index, out_c, &v));
    *out = DecodedSample{v.width, v.height, kScaleDenom, v.width, v.height, v.channels, v.data,
                         v.stride};
    return Status::Ok();
  }
  BC_ASSIGN_OR_RETURN(ImageHeader header, ctx.decoder.ReadHeader(ctx.encoded, options_.max_pixels));
  const int scale = CacheScale(header);
  const int want = (out_c == 1 || header.channels == 1) ? 1 : 3;
  BC_RETURN_IF_ERROR(ctx.decoder.Decode(ctx.encoded, header, scale, want, &ctx.decoded));
  const DecodedImage& d = ctx.decoded;
  *out = DecodedSample{header.width, header.height, scale,      d.width,
                       d.height,     d.channels,    d.data(), d.stride()};
  return Status::Ok();
}

// With a cache: the sample's DecodedSample from the cache, or read, decoded whole and
// offered to it; the epoch's crop box is then taken from it (the same for a hit and a miss).
Status PipelineImpl::LoadCached(WorkerContext& ctx, const BatchJob& job, int64_t index,
                                CropBox* box, PixelView* view, SampleTimes* times) {
  const int64_t key = job.cache_key_base + index;
  DecodedSample s;
  if (cache_->Find(key, &s)) {
    ++times->cache_hits;
  } else {
    ++times->cache_misses;
    BC_RETURN_IF_ERROR(ReadSample(ctx, job.bucket_size, index, times));
    const int64_t t0 = core::SteadyNowNs();
    BC_RETURN_IF_ERROR(DecodeWhole(ctx, job, index, &s));
    times->decode_ns += core::SteadyNowNs() - t0;
    cache_->Offer(key, s);  // only a sample decoded without error is offered
  }
  const CropBox full_box = ChooseBox(s.stored_width, s.stored_height, index, job.req.epoch);
  *box = ScaleBox(full_box, s.scale_num, s.width, s.height);
  *view = PixelView{s.pixels, s.stride, s.width, s.height, s.channels};
  return Status::Ok();
}

Result<size_t> PipelineImpl::DecodedBytes(int64_t index) {
  if (index < 0 || index >= reader_->info().num_samples)
    return OutOfRangeError("pipeline: sample {} is out of range for {}", index,
                           reader_->info().path);
  WorkerContext& ctx = *workers_[0];
  SampleTimes times;
  BC_RETURN_IF_ERROR(ReadSample(ctx, 0, index, &times));
  const int out_c = spec_.layout.channels;
  if (reader_->info().kind != data::SampleKind::kEncoded) {
    PixelView v;
    BC_RETURN_IF_ERROR(RawPixels(ctx, index, out_c, &v));
    return size_t(v.width) * v.height * v.channels;
  }
  BC_ASSIGN_OR_RETURN(ImageHeader header, ctx.decoder.ReadHeader(ctx.encoded, options_.max_pixels));
  const int scale = CacheScale(header);
  const int want = (out_c == 1 || header.channels == 1) ? 1 : 3;
  return size_t(ScaledDim(header.width, scale)) * ScaledDim(header.height, scale) * want;
}

Status PipelineImpl::ProcessSample(WorkerContext& ctx, const BatchJob& job, int64_t index,
                                   void* dst, SampleTimes* times) {
  const uint64_t epoch = job.req.epoch;
  CropBox box;
  PixelView view;
  if (cache_ != nullptr) {
    BC_RETURN_IF_ERROR(LoadCached(ctx, job, index, &box, &view, times));
  } else {
    BC_RETURN_IF_ERROR(ReadSample(ctx, job.bucket_size, index, times));
    const int64_t t1 = core::SteadyNowNs();
    BC_RETURN_IF_ERROR(LoadPixels(ctx, job, index, &box, &view));
    times->decode_ns += core::SteadyNowNs() - t1;
  }
  const int64_t t2 = core::SteadyNowNs();
  const SampleLayout& l = job.spec.layout;
  const bool flip =
      options_.flip && SampleRng(options_.seed, epoch, static_cast<uint64_t>(index), RngStream::kFlip)
                           .Bernoulli(0.5);
  if (box.width == l.width && box.height == l.height) {
    // The box is the output size: no resampling, the final pass reads the box directly.
    view.data += size_t(box.y) * view.stride + size_t(box.x) * view.channels;
    view.width = box.width;
    view.height = box.height;
  } else if (l.dtype == DType::kUint8 && l.layout == Layout::kHWC && !flip &&
             view.channels == l.channels) {
    // The resize is the final pass: it writes the slot itself.
    ResizeBox(view, box, l.width, l.height, static_cast<uint8_t*>(dst), size_t(l.width) * l.channels);
    times->transform_ns += core::SteadyNowNs() - t2;
    return Status::Ok();
  } else {
    const size_t stride = size_t(l.width) * view.channels;
    ctx.resized.resize(stride * l.height);
    ResizeBox(view, box, l.width, l.height, ctx.resized.data(), stride);
    view = PixelView{ctx.resized.data(), stride, l.width, l.height, view.channels};
  }
  WriteOutput(view, flip, job.spec, dst);
  times->transform_ns += core::SteadyNowNs() - t2;
  return Status::Ok();
}

Status PipelineImpl::CheckRequest(const BatchRequest& req) const {
  const data::DatasetInfo& info = reader_->info();
  if (req.image_size < 0 || req.image_size > 16384)
    return InvalidArgumentError("pipeline: batch image_size must be in [0, 16384], got {}",
                                req.image_size);
  if (!req.samples.empty() && req.images == nullptr)
    return InvalidArgumentError("pipeline: batch of {} samples has no image buffer", req.samples.size());
  for (int64_t index : req.samples) {
    if (index < 0 || index >= info.num_samples)
      return OutOfRangeError("pipeline: sample {} is out of range for {} with {} samples", index,
                             info.path, info.num_samples);
  }
  return Status::Ok();
}

void PipelineImpl::StartBatch(const BatchRequest& req) {
  auto job = std::make_unique<BatchJob>();
  job->req = req;
  job->samples.assign(req.samples.begin(), req.samples.end());  // the caller's may go first
  job->req.samples = job->samples;
  job->check = CheckRequest(req);
  job->spec.layout = OutputLayout(req.image_size);
  job->spec.lut = spec_.lut;
  const auto& buckets = reader_->info().bucket_sizes;  // offline buckets (progressive resizing)
  const SampleLayout& l = job->spec.layout;
  job->bucket_size = l.width == l.height &&
                             std::find(buckets.begin(), buckets.end(), l.width) != buckets.end()
                         ? l.width
                         : 0;
  if (job->bucket_size > 0) {
    const int64_t pos = std::find(buckets.begin(), buckets.end(), job->bucket_size) - buckets.begin();
    job->cache_key_base = (pos + 1) * reader_->info().num_samples;
  }
  const int64_t n = job->check.ok() ? static_cast<int64_t>(req.samples.size()) : 0;
  job->statuses.assign(n, Status::Ok());
  BatchJob* j = job.get();
  job->ticket = pool_->Submit(n, [this, j](int worker, int64_t pos) {
    const BatchRequest& r = j->req;
    const int64_t index = r.samples[pos];
    auto* images = static_cast<uint8_t*>(r.images);
    SampleTimes times;
    Status s = ProcessSample(*workers_[worker], *j, index,
                             images + size_t(pos) * j->spec.layout.bytes(), &times);
    if (!s.ok()) {
      j->statuses[pos] =
          s.WithContext(fmt::format("pipeline: sample {} of {}", index, reader_->info().path));
    } else if (r.labels != nullptr) {
      r.labels[pos] = reader_->Label(index);
    }
    j->read_ns.fetch_add(times.read_ns, std::memory_order_relaxed);
    j->read_lock_ns.fetch_add(times.read_lock_ns, std::memory_order_relaxed);
    j->decode_ns.fetch_add(times.decode_ns, std::memory_order_relaxed);
    j->transform_ns.fetch_add(times.transform_ns, std::memory_order_relaxed);
    j->cache_hits.fetch_add(times.cache_hits, std::memory_order_relaxed);
    j->cache_misses.fetch_add(times.cache_misses, std::memory_order_relaxed);
  });
  jobs_.push_back(std::move(job));
}

Status PipelineImpl::FinishBatch(BatchResult* result) {
  if (jobs_.empty())
    return FailedPreconditionError("pipeline: FinishBatch without a started batch");
  std::unique_ptr<BatchJob> job = std::move(jobs_.front());
  jobs_.pop_front();
  pool_->Wait(job->ticket);
  if (!job->check.ok()) {
    *result = BatchResult();
    return job->check;
  }
  return Finish(*job, result);
}

// Applies the bad-sample policy: the first bad sample (in batch order) fails the batch, or
// bad samples are dropped and the rest compacted to the front of the buffers.
Status PipelineImpl::Finish(BatchJob& job, BatchResult* result) {
  const BatchRequest& req = job.req;
  *result = BatchResult();
  result->read_ns = job.read_ns.load();
  result->read_lock_ns = job.read_lock_ns.load();
  result->decode_ns = job.decode_ns.load();
  result->transform_ns = job.transform_ns.load();
  result->cache_hits = job.cache_hits.load();
  result->cache_misses = job.cache_misses.load();
  result->cache_bytes = cache_ != nullptr ? cache_->bytes() : 0;
  const bool skip = options_.on_bad_sample == "skip";
  const size_t bytes = job.spec.layout.bytes();
  auto* images = static_cast<uint8_t*>(req.images);
  int64_t written = 0;
  for (size_t pos = 0; pos < req.samples.size(); ++pos) {
    const Status& s = job.statuses[pos];
    if (!s.ok() && !skip) {  // returned, not logged: the front door reports it once
      BC_LOG(Debug, Pipe, "failing the batch: {}", s.message());
      return s;
    }
    if (!s.ok()) {
      BC_LOG(Debug, Pipe, "skipping {}", s.message());
      result->skipped.push_back(req.samples[pos]);
      result->skip_reasons.push_back(s.message());
      continue;
    }
    if (written != static_cast<int64_t>(pos)) {
      std::memmove(images + written * bytes, images + pos * bytes, bytes);
      if (req.labels != nullptr) req.labels[written] = req.labels[pos];
    }
    result->kept.push_back(req.samples[pos]);
    ++written;
  }
  result->written = written;
  skipped_total_ += static_cast<int64_t>(result->skipped.size());
  return Status::Ok();
}

}  // namespace

Status Pipeline::RunBatch(const BatchRequest& req, BatchResult* result) {
  StartBatch(req);
  return FinishBatch(result);
}

int64_t DecodedCacheKeys(const data::DatasetInfo& dataset) {
  return dataset.num_samples * (1 + static_cast<int64_t>(dataset.bucket_sizes.size()));
}

Result<std::unique_ptr<Pipeline>> Pipeline::Create(const Options& options,
                                                   std::shared_ptr<data::DatasetReader> reader,
                                                   std::shared_ptr<DecodedSampleCache> cache) {
  if (reader == nullptr) return InvalidArgumentError("pipeline: no dataset reader given");
  auto pipeline = std::make_unique<PipelineImpl>(options, std::move(reader), std::move(cache));
  BC_RETURN_IF_ERROR(pipeline->Init());
  return std::unique_ptr<Pipeline>(std::move(pipeline));
}

}  // namespace batchcast::pipeline
