// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Pipeline: per sample, read → header (pixel limit) → each group's crop box → DCT-scaled
// decode (one per distinct scale, of the union of the groups' boxes) → per group: resize →
// final write into the group's batch buffer, on a pool of worker threads.
#include "pipeline/pipeline.h"

#include <opencv2/core.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>

#include "core/clock.h"
#include "core/errors.h"
#include "core/log.h"
#include "data/dataset_inspect.h"
#include "pipeline/crop_decode.h"
#include "pipeline/decode.h"
#include "pipeline/sample_rng.h"
#include "pipeline/transform.h"
#include "pipeline/views.h"
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

// Everything one worker thread owns; aligned so workers never share a cache line.
struct alignas(64) WorkerContext {
  ImageDecoder decoder;
  JpegCropDecoder crop_decoder;   // decodes only the crop box (options.crop_decode)
  std::vector<uint8_t> encoded;   // the stored bytes of the current sample
  DecodedImage decoded;           // decoded (or channel-converted raw) pixels
  std::vector<uint8_t> resized;   // the resized box, when it cannot go straight to the slot
  // The last resize of this sample's decode: a group of the same box and size (a shared draw,
  // another dtype, normalisation or flip) reuses its pixels instead of resizing again.
  struct ResizeMemo {
    const uint8_t* source = nullptr;  // the decoded pixels it was resized from (null: none)
    CropBox box;
    int width = 0, height = 0;
    PixelView resized;  // in `resized` or in the slot of the group that made it
  } memo;
  WorkerContext(ImageDecoder d, JpegCropDecoder c)
      : decoder(std::move(d)), crop_decoder(std::move(c)) {}
};

// One group of a started batch.
struct JobGroup {
  const PreparedView* view = nullptr;
  OutputSpec spec;                // layout at this batch's size + the value table
  uint8_t* images = nullptr;
  int bucket_size = 0;            // offline bucket of the file this group reads (0: none)
  int64_t cache_key_base = 0;     // DecodedSampleCache key of sample 0 of that file
};

// One started producer batch: everything its samples need, so that the workers can run the
// samples of several batches at once (StartBatch).
struct BatchJob {
  BatchRequest req;               // req.samples points into `samples`
  std::vector<int64_t> samples;
  std::vector<JobGroup> groups;   // at least one
  Status check;                   // the request's own error: no sample runs
  std::vector<Status> statuses;   // per batch position
  std::atomic<int64_t> read_ns{0}, read_lock_ns{0}, decode_ns{0}, decodes{0};
  std::atomic<int64_t> cache_hits{0}, cache_misses{0};
  std::atomic<int64_t> group_ns[kMaxBatchGroups] = {};
  WorkerPool::Ticket ticket = 0;
};

// Stage times of one sample, added to its batch once.
struct SampleTimes {
  int64_t read_ns = 0, read_lock_ns = 0, decode_ns = 0, decodes = 0;
  int64_t cache_hits = 0, cache_misses = 0;
  int64_t group_ns[kMaxBatchGroups] = {};
};

// The groups in bit mask `mask`, lowest first.
template <typename Fn>
void ForEachGroup(uint32_t mask, Fn fn) {
  for (; mask != 0; mask &= mask - 1) fn(static_cast<size_t>(__builtin_ctz(mask)));
}

class PipelineImpl final : public Pipeline {
 public:
  PipelineImpl(const Options& options, std::shared_ptr<data::DatasetReader> reader,
               std::shared_ptr<DecodedSampleCache> cache)
      : options_(options), reader_(std::move(reader)), cache_(std::move(cache)) {}
  ~PipelineImpl() override;

  Status Init();
  SampleLayout GroupLayout(int view, int image_size) const override;
  Result<int> AddView(const core::View& view) override;
  Result<SampleLayout> CheckView(const core::View& view) const override;
  const core::View& view(int id) const override { return views_[size_t(id)]->view; }
  int views() const override { return static_cast<int>(views_.size()); }
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
  void AddGroup(BatchJob& job, const GroupTarget& target) const;
  Status ProcessSample(WorkerContext& ctx, const BatchJob& job, size_t pos, int64_t index,
                       SampleTimes* times);
  Status ReadSample(WorkerContext& ctx, int bucket_size, int64_t index, SampleTimes* times);
  Status RawPixels(WorkerContext& ctx, int64_t index, int out_channels, PixelView* view) const;
  Status ProcessStored(WorkerContext& ctx, const BatchJob& job, uint32_t mask, size_t pos,
                       int64_t index, SampleTimes* times);
  Status DecodeStepPixels(WorkerContext& ctx, const ImageHeader& header, const DecodeStep& step,
                          PixelView* view, int* dx, int* dy);
  Status ProcessCached(WorkerContext& ctx, const BatchJob& job, uint32_t mask, size_t pos,
                       int64_t index, SampleTimes* times);
  Status DecodeWhole(WorkerContext& ctx, bool stored_pixels, int64_t index,
                     const ImageHeader& header, int scale, DecodedSample* out);
  int CacheScale(const JobGroup& group, const DecodedSample& sample) const;
  void WriteGroup(WorkerContext& ctx, const BatchJob& job, size_t g, PixelView view,
                  CropBox box, bool flip, size_t pos, SampleTimes* times) const;
  Status Finish(BatchJob& job, BatchResult* result);

  Options options_;
  std::shared_ptr<data::DatasetReader> reader_;
  std::shared_ptr<DecodedSampleCache> cache_;  // null: cache=0
  std::unique_ptr<WorkerPool> pool_;
  std::vector<std::unique_ptr<WorkerContext>> workers_;
  bool verify_ = false;           // options.verify != off: check each sample's checksum
  int channels_ = 3;              // of every view's output (one decode serves them all)
  std::vector<std::unique_ptr<PreparedView>> views_;  // [0]: the options' view; never removed
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
  channels_ = options_.channels != 0 ? options_.channels
                                     : (raw && info.raw_channels == 1 ? 1 : 3);
  auto own = core::ViewFromOptions(options_);
  if (!own.ok()) return own.status().WithContext("pipeline");
  auto prepared = PrepareView(*own, info, channels_, options_.seed);
  if (!prepared.ok()) return prepared.status().WithContext("pipeline: option");
  views_.push_back(std::make_unique<PreparedView>(std::move(prepared).value()));
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
  const SampleLayout& l = views_[0]->spec.layout;
  BC_LOG(Info, Pipe, "pipeline: {} threads, output {}x{}x{} {} {} for {}", threads, l.channels,
         l.height, l.width, l.dtype == DType::kUint8 ? "uint8" : "float32",
         l.layout == Layout::kCHW ? "chw" : "hwc", info.path);
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

SampleLayout PipelineImpl::GroupLayout(int view, int image_size) const {
  return ViewSampleLayout(views_[size_t(view)]->view, reader_->info(), channels_, image_size);
}

Result<int> PipelineImpl::AddView(const core::View& view) {
  const core::View canonical = core::CanonicalView(view);
  for (size_t id = 0; id < views_.size(); ++id)
    if (views_[id]->view == canonical) return static_cast<int>(id);
  const std::string what = fmt::format("pipeline: {}", core::ViewToString(canonical));
  if (views_.size() >= size_t(kMaxViews))
    return ResourceExhaustedError("{}: a pipeline holds at most {} views and has them all; views "
                                  "are never removed, so use fewer distinct views", what,
                                  kMaxViews);
  auto prepared = PrepareView(canonical, reader_->info(), channels_, options_.seed);
  if (!prepared.ok()) return prepared.status().WithContext(what);
  views_.push_back(std::make_unique<PreparedView>(std::move(prepared).value()));
  BC_LOG(Info, Pipe, "pipeline: view {} is {}", views_.size() - 1, core::ViewToString(canonical));
  return static_cast<int>(views_.size() - 1);
}

Result<SampleLayout> PipelineImpl::CheckView(const core::View& view) const {
  const core::View canonical = core::CanonicalView(view);
  auto prepared = PrepareView(canonical, reader_->info(), channels_, options_.seed);
  if (!prepared.ok())
    return prepared.status().WithContext(fmt::format("pipeline: {}",
                                                     core::ViewToString(canonical)));
  return ViewSampleLayout(canonical, reader_->info(), channels_, 0);
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

// The groups in `mask` read the same stored image (the original, or one offline bucket): it
// is read once, each group draws its box and the scale its own decode would use, and the
// image is decoded once per distinct scale (PlanDecodes) before each group's output is made.
Status PipelineImpl::ProcessStored(WorkerContext& ctx, const BatchJob& job, uint32_t mask,
                                   size_t pos, int64_t index, SampleTimes* times) {
  const uint64_t epoch = job.req.epoch;
  const int bucket = job.groups[static_cast<size_t>(__builtin_ctz(mask))].bucket_size;
  BC_RETURN_IF_ERROR(ReadSample(ctx, bucket, index, times));
  ctx.memo.source = nullptr;  // the buffers it points into change with every read and decode
  int64_t t = core::SteadyNowNs();
  if (reader_->info().kind != data::SampleKind::kEncoded && bucket == 0) {
    PixelView view;
    BC_RETURN_IF_ERROR(RawPixels(ctx, index, channels_, &view));
    times->decode_ns += core::SteadyNowNs() - t;
    ForEachGroup(mask, [&](size_t g) {
      const PreparedView& v = *job.groups[g].view;
      WriteGroup(ctx, job, g, view, ViewCropBox(v, view.width, view.height, index, epoch),
                 ViewFlip(v, index, epoch), pos, times);
    });
    return Status::Ok();
  }
  BC_ASSIGN_OR_RETURN(ImageHeader header, ctx.decoder.ReadHeader(ctx.encoded, options_.max_pixels));
  const bool scalable = options_.dct_scaling && header.format == ImageFormat::kJpeg;
  GroupDraw draws[kMaxBatchGroups];  // draws[k]: of group members[k]
  size_t members[kMaxBatchGroups];
  size_t m = 0;
  ForEachGroup(mask, [&](size_t g) {
    const PreparedView& v = *job.groups[g].view;
    const SampleLayout& l = job.groups[g].spec.layout;
    GroupDraw& d = draws[m];
    members[m++] = g;
    d.box = ViewCropBox(v, header.width, header.height, index, epoch);
    d.scale_num = scalable ? ChooseScaleNum(d.box.width, d.box.height, l.width, l.height)
                           : kScaleDenom;
    d.flip = ViewFlip(v, index, epoch);
  });
  DecodeStep steps[kMaxBatchGroups];
  const int nsteps = PlanDecodes(std::span(draws, m), header.width, header.height, steps);
  for (int k = 0; k < nsteps; ++k) {
    const DecodeStep& step = steps[k];
    PixelView view;
    int dx = 0, dy = 0;  // the step's region, scaled-image pixel (x, y) is at (x - dx, y - dy)
    t = core::SteadyNowNs();
    BC_RETURN_IF_ERROR(DecodeStepPixels(ctx, header, step, &view, &dx, &dy));
    ctx.memo.source = nullptr;
    times->decode_ns += core::SteadyNowNs() - t;
    ++times->decodes;
    const int sw = ScaledDim(header.width, step.scale_num);
    const int sh = ScaledDim(header.height, step.scale_num);
    ForEachGroup(step.groups, [&](size_t k) {
      CropBox box = ScaleBox(draws[k].box, step.scale_num, sw, sh);
      box.x -= dx;
      box.y -= dy;
      WriteGroup(ctx, job, members[k], view, box, draws[k].flip, pos, times);
    });
  }
  return Status::Ok();
}

// Decodes `step`'s region: a JPEG crop decode when the region is not the whole image
// (docs/pipeline.md, crop decoding: bit-exact with a full decode inside it), else the whole
// image. *dx, *dy: where the region's pixels start in the image at the step's scale.
Status PipelineImpl::DecodeStepPixels(WorkerContext& ctx, const ImageHeader& header,
                                      const DecodeStep& step, PixelView* view, int* dx, int* dy) {
  const int want = (channels_ == 1 || header.channels == 1) ? 1 : 3;
  const int scale = step.scale_num;
  const CropBox whole = FullBox(ScaledDim(header.width, scale), ScaledDim(header.height, scale));
  if (options_.crop_decode && header.format == ImageFormat::kJpeg && !(step.region == whole)) {
    CropBox in;
    BC_RETURN_IF_ERROR(
        ctx.crop_decoder.Decode(ctx.encoded, header, scale, want, step.region, &ctx.decoded, &in));
    *dx = step.region.x - in.x;
    *dy = step.region.y - in.y;
  } else {
    BC_RETURN_IF_ERROR(ctx.decoder.Decode(ctx.encoded, header, scale, want, &ctx.decoded));
    *dx = *dy = 0;
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

// The scale a cached sample is kept at for `group`: the one its view's smallest box needs at
// the view's own size (docs/pipeline.md, "Decoded-sample cache"), so every epoch's box has at
// least the pixels an online decode would give it. For crop=none|center (fixed boxes) it is
// the online decode's own scale. `sample` gives the stored size and whether it is a JPEG.
int PipelineImpl::CacheScale(const JobGroup& group, const DecodedSample& sample) const {
  if (!options_.dct_scaling || !sample.dct_scalable) return kScaleDenom;
  return ViewCacheScale(group.view->view, group.view->spec.layout, sample.stored_width,
                        sample.stored_height);
}

// The sample just read as the deterministic part of the pipeline leaves it: the whole image
// at `scale` (stored pixels or a raw sample: converted to the output's channels).
Status PipelineImpl::DecodeWhole(WorkerContext& ctx, bool stored_pixels, int64_t index,
                                 const ImageHeader& header, int scale, DecodedSample* out) {
  if (stored_pixels) {
    PixelView v;
    BC_RETURN_IF_ERROR(RawPixels(ctx, index, channels_, &v));
    *out = DecodedSample{v.width, v.height, kScaleDenom, v.width, v.height, v.channels, v.data,
                         v.stride, false};
    return Status::Ok();
  }
  const int want = (channels_ == 1 || header.channels == 1) ? 1 : 3;
  BC_RETURN_IF_ERROR(ctx.decoder.Decode(ctx.encoded, header, scale, want, &ctx.decoded));
  const DecodedImage& d = ctx.decoded;
  *out = DecodedSample{header.width, header.height, scale,      d.width,
                       d.height,     d.channels,    d.data(), d.stride(),
                       header.format == ImageFormat::kJpeg};
  return Status::Ok();
}

// With a cache, for the groups in `mask` (one stored image): each group needs the whole image
// at its CacheScale; each distinct scale is taken from the cache, or read (once), decoded
// whole and offered to it. The epoch's crop boxes are then taken from it (the same for a hit
// and a miss).
Status PipelineImpl::ProcessCached(WorkerContext& ctx, const BatchJob& job, uint32_t mask,
                                   size_t pos, int64_t index, SampleTimes* times) {
  const JobGroup& first = job.groups[static_cast<size_t>(__builtin_ctz(mask))];
  const int64_t key = first.cache_key_base + index;
  ctx.memo.source = nullptr;
  const bool stored_pixels =
      reader_->info().kind != data::SampleKind::kEncoded && first.bucket_size == 0;
  DecodedSample kept;  // what the cache holds under `key` (the first scale kept), if anything
  const bool any = cache_->Find(key, 0, &kept);
  bool missed = !any;  // a miss counted now (a read error still counts it) for the first decode
  if (missed) ++times->cache_misses;
  DecodedSample frame = kept;  // the stored size and kind, from the cache or the header
  ImageHeader header;
  bool read = false;
  auto read_once = [&]() -> Status {
    if (read) return Status::Ok();
    read = true;
    BC_RETURN_IF_ERROR(ReadSample(ctx, first.bucket_size, index, times));
    if (stored_pixels) return Status::Ok();
    BC_ASSIGN_OR_RETURN(header, ctx.decoder.ReadHeader(ctx.encoded, options_.max_pixels));
    frame = DecodedSample{};
    frame.stored_width = header.width;
    frame.stored_height = header.height;
    frame.dct_scalable = header.format == ImageFormat::kJpeg;
    return Status::Ok();
  };
  if (!any && !stored_pixels) BC_RETURN_IF_ERROR(read_once());
  uint32_t left = mask;
  while (left != 0) {
    const size_t g0 = static_cast<size_t>(__builtin_ctz(left));
    const int scale = stored_pixels ? kScaleDenom : CacheScale(job.groups[g0], frame);
    DecodedSample s;
    if (any && kept.scale_num == scale) {
      s = kept;
      ++times->cache_hits;
    } else if (any && cache_->Find(key, scale, &s)) {
      ++times->cache_hits;
    } else {
      if (!missed) ++times->cache_misses;
      missed = false;
      BC_RETURN_IF_ERROR(read_once());
      const int64_t t0 = core::SteadyNowNs();
      BC_RETURN_IF_ERROR(DecodeWhole(ctx, stored_pixels, index, header, scale, &s));
      ctx.memo.source = nullptr;
      times->decode_ns += core::SteadyNowNs() - t0;
      ++times->decodes;
      cache_->Offer(key, s);  // only a sample decoded without error is offered
    }
    ForEachGroup(left, [&](size_t g) {
      if (!stored_pixels && CacheScale(job.groups[g], frame) != scale) return;
      left &= ~(uint32_t(1) << g);
      const PreparedView& v = *job.groups[g].view;
      const CropBox full_box = ViewCropBox(v, s.stored_width, s.stored_height, index, job.req.epoch);
      WriteGroup(ctx, job, g, PixelView{s.pixels, s.stride, s.width, s.height, s.channels},
                 ScaleBox(full_box, s.scale_num, s.width, s.height),
                 ViewFlip(v, index, job.req.epoch), pos, times);
    });
  }
  return Status::Ok();
}

Result<size_t> PipelineImpl::DecodedBytes(int64_t index) {
  if (index < 0 || index >= reader_->info().num_samples)
    return OutOfRangeError("pipeline: sample {} is out of range for {}", index,
                           reader_->info().path);
  WorkerContext& ctx = *workers_[0];
  SampleTimes times;
  BC_RETURN_IF_ERROR(ReadSample(ctx, 0, index, &times));
  if (reader_->info().kind != data::SampleKind::kEncoded) {
    PixelView v;
    BC_RETURN_IF_ERROR(RawPixels(ctx, index, channels_, &v));
    return size_t(v.width) * v.height * v.channels;
  }
  BC_ASSIGN_OR_RETURN(ImageHeader header, ctx.decoder.ReadHeader(ctx.encoded, options_.max_pixels));
  DecodedSample frame;
  frame.stored_width = header.width;
  frame.stored_height = header.height;
  frame.dct_scalable = header.format == ImageFormat::kJpeg;
  const int want = (channels_ == 1 || header.channels == 1) ? 1 : 3;
  uint32_t scales = 0;  // bit s: kept at scale s/8
  for (const auto& v : views_) {
    JobGroup g;
    g.view = v.get();
    scales |= uint32_t(1) << CacheScale(g, frame);
  }
  size_t bytes = 0;
  for (int scale : kScaleNums)
    if (scales & (uint32_t(1) << scale))
      bytes += size_t(ScaledDim(header.width, scale)) * ScaledDim(header.height, scale) * want;
  return bytes;
}

// One group's output of the sample at batch position `pos`: `box` of `view` resized to the
// group's size, flipped, converted and written into the group's images. Every output element
// is written once.
void PipelineImpl::WriteGroup(WorkerContext& ctx, const BatchJob& job, size_t g, PixelView view,
                              CropBox box, bool flip, size_t pos, SampleTimes* times) const {
  const int64_t t0 = core::SteadyNowNs();
  const JobGroup& group = job.groups[g];
  const SampleLayout& l = group.spec.layout;
  uint8_t* dst = group.images + pos * l.bytes();
  WorkerContext::ResizeMemo& memo = ctx.memo;
  if (box.width == l.width && box.height == l.height) {
    // The box is the output size: no resampling, the final pass reads the box directly.
    view.data += size_t(box.y) * view.stride + size_t(box.x) * view.channels;
    view.width = box.width;
    view.height = box.height;
  } else if (memo.source == view.data && memo.box == box && memo.width == l.width &&
             memo.height == l.height && memo.resized.channels == view.channels) {
    view = memo.resized;  // an earlier group of this sample resized the same box to this size
  } else if (l.dtype == DType::kUint8 && l.layout == Layout::kHWC && !flip &&
             view.channels == l.channels) {
    // The resize is the final pass: it writes the slot itself.
    const size_t stride = size_t(l.width) * l.channels;
    ResizeBox(view, box, l.width, l.height, dst, stride);
    memo = {view.data, box, l.width, l.height, PixelView{dst, stride, l.width, l.height, l.channels}};
    times->group_ns[g] += core::SteadyNowNs() - t0;
    return;
  } else {
    const size_t stride = size_t(l.width) * view.channels;
    ctx.resized.resize(stride * l.height);
    ResizeBox(view, box, l.width, l.height, ctx.resized.data(), stride);
    memo = {view.data, box, l.width, l.height,
            PixelView{ctx.resized.data(), stride, l.width, l.height, view.channels}};
    view = memo.resized;
  }
  WriteOutput(view, flip, group.spec, dst);
  times->group_ns[g] += core::SteadyNowNs() - t0;
}

// Groups that read the same stored image share its read and decodes; with offline buckets a
// group whose size is a bucket reads that bucket's image, so a sample may be read more than
// once (once per distinct stored image).
Status PipelineImpl::ProcessSample(WorkerContext& ctx, const BatchJob& job, size_t pos,
                                   int64_t index, SampleTimes* times) {
  uint32_t left = (job.groups.size() >= 32 ? ~uint32_t(0)
                                           : (uint32_t(1) << job.groups.size()) - 1);
  while (left != 0) {
    const int bucket = job.groups[static_cast<size_t>(__builtin_ctz(left))].bucket_size;
    uint32_t same = 0;
    ForEachGroup(left, [&](size_t g) {
      if (job.groups[g].bucket_size == bucket) same |= uint32_t(1) << g;
    });
    left &= ~same;
    BC_RETURN_IF_ERROR(cache_ != nullptr ? ProcessCached(ctx, job, same, pos, index, times)
                                         : ProcessStored(ctx, job, same, pos, index, times));
  }
  return Status::Ok();
}

Status PipelineImpl::CheckRequest(const BatchRequest& req) const {
  const data::DatasetInfo& info = reader_->info();
  auto check_size = [](int size) -> Status {
    if (size < 0 || size > core::kMaxViewImageSize)
      return InvalidArgumentError("pipeline: batch image_size must be in [0, {}], got {}",
                                  core::kMaxViewImageSize, size);
    return Status::Ok();
  };
  BC_RETURN_IF_ERROR(check_size(req.image_size));
  if (req.groups.empty() && !req.samples.empty() && req.images == nullptr)
    return InvalidArgumentError("pipeline: batch of {} samples has no image buffer", req.samples.size());
  if (!req.groups.empty() && (req.images != nullptr || req.image_size != 0))
    return InvalidArgumentError("pipeline: a batch with groups takes its images from the groups; "
                                "leave the request's images null and image_size 0");
  if (req.groups.size() > size_t(kMaxBatchGroups))
    return InvalidArgumentError("pipeline: a batch fills at most {} groups, got {}",
                                kMaxBatchGroups, req.groups.size());
  for (size_t g = 0; g < req.groups.size(); ++g) {
    const GroupTarget& t = req.groups[g];
    if (t.view < 0 || t.view >= views())
      return InvalidArgumentError("pipeline: group {} of the batch names view {}, but the "
                                  "pipeline has views 0..{} (Pipeline::AddView)", g, t.view,
                                  views() - 1);
    BC_RETURN_IF_ERROR(check_size(t.image_size));
    if (t.images == nullptr && !req.samples.empty())
      return InvalidArgumentError("pipeline: group {} of the batch has no image buffer", g);
    const auto* lo = static_cast<const uint8_t*>(t.images);
    const auto* hi = lo + req.samples.size() * GroupLayout(t.view, t.image_size).bytes();
    for (size_t o = 0; o < g; ++o) {
      const auto* olo = static_cast<const uint8_t*>(req.groups[o].images);
      const auto* ohi = olo + req.samples.size() *
                                  GroupLayout(req.groups[o].view, req.groups[o].image_size).bytes();
      if (lo < ohi && olo < hi)
        return InvalidArgumentError("pipeline: the image buffers of groups {} and {} of the batch "
                                    "overlap; give each group its own region", o, g);
    }
  }
  for (int64_t index : req.samples) {
    if (index < 0 || index >= info.num_samples)
      return OutOfRangeError("pipeline: sample {} is out of range for {} with {} samples", index,
                             info.path, info.num_samples);
  }
  return Status::Ok();
}

// The group of `job` that `target` asks for: its layout at this batch's size and, when that
// size is an offline bucket (progressive resizing), the bucket it reads.
void PipelineImpl::AddGroup(BatchJob& job, const GroupTarget& target) const {
  JobGroup g;
  g.view = views_[size_t(target.view)].get();
  g.spec = g.view->spec;  // the value table and its affine form
  g.spec.layout = GroupLayout(target.view, target.image_size);
  g.images = static_cast<uint8_t*>(target.images);
  const auto& buckets = reader_->info().bucket_sizes;
  const SampleLayout& l = g.spec.layout;
  const auto it = std::find(buckets.begin(), buckets.end(), l.width);
  if (l.width == l.height && it != buckets.end()) {
    g.bucket_size = l.width;
    g.cache_key_base = (it - buckets.begin() + 1) * reader_->info().num_samples;
  }
  job.groups.push_back(std::move(g));
}

void PipelineImpl::StartBatch(const BatchRequest& req) {
  auto job = std::make_unique<BatchJob>();
  job->req = req;
  job->samples.assign(req.samples.begin(), req.samples.end());  // the caller's may go first
  job->req.samples = job->samples;
  job->check = CheckRequest(req);
  if (job->check.ok() && req.groups.empty()) AddGroup(*job, GroupTarget{0, req.image_size, req.images});
  if (job->check.ok())
    for (const GroupTarget& t : req.groups) AddGroup(*job, t);
  job->req.groups = {};  // the caller's may go first; job->groups has them
  const int64_t n = job->check.ok() ? static_cast<int64_t>(req.samples.size()) : 0;
  job->statuses.assign(n, Status::Ok());
  BatchJob* j = job.get();
  job->ticket = pool_->Submit(n, [this, j](int worker, int64_t pos) {
    const BatchRequest& r = j->req;
    const int64_t index = r.samples[pos];
    SampleTimes times;
    Status s = ProcessSample(*workers_[worker], *j, size_t(pos), index, &times);
    if (!s.ok()) {
      j->statuses[pos] =
          s.WithContext(fmt::format("pipeline: sample {} of {}", index, reader_->info().path));
    } else if (r.labels != nullptr) {
      r.labels[pos] = reader_->Label(index);
    }
    j->read_ns.fetch_add(times.read_ns, std::memory_order_relaxed);
    j->read_lock_ns.fetch_add(times.read_lock_ns, std::memory_order_relaxed);
    j->decode_ns.fetch_add(times.decode_ns, std::memory_order_relaxed);
    j->decodes.fetch_add(times.decodes, std::memory_order_relaxed);
    for (size_t g = 0; g < j->groups.size(); ++g)
      j->group_ns[g].fetch_add(times.group_ns[g], std::memory_order_relaxed);
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
  result->decodes = job.decodes.load();
  for (size_t g = 0; g < job.groups.size(); ++g) {
    result->group_transform_ns.push_back(job.group_ns[g].load());
    result->transform_ns += result->group_transform_ns.back();
  }
  result->cache_hits = job.cache_hits.load();
  result->cache_misses = job.cache_misses.load();
  result->cache_bytes = cache_ != nullptr ? cache_->bytes() : 0;
  const bool skip = options_.on_bad_sample == "skip";
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
      for (const JobGroup& g : job.groups) {
        const size_t bytes = g.spec.layout.bytes();
        std::memmove(g.images + written * bytes, g.images + pos * bytes, bytes);
      }
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
