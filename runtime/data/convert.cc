// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "data/convert.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "core/errors.h"
#include "core/log.h"
#include "data/dataset_writer.h"
#include "data/idx_reader.h"
#include "data/image_encode.h"
#include "data/image_folder.h"
#include "data/image_probe.h"
#include "data/ordered_parallel.h"

namespace batchcast::data {
namespace {

constexpr int64_t kWindowPerThread = 256;

int ResolveThreads(int threads) {
  if (threads > 0) return threads;
  return std::max(1, int(std::thread::hardware_concurrency()));
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Encoded {
  Status status;
  std::vector<uint8_t> bytes;
  ImageHeader header;
  std::vector<std::vector<uint8_t>> buckets;  // one pre-resized image per bucket size
  StoredShape shape;  // when `bytes` holds stored pixels (--store decoded|resized)
};

// The writer's spec for a stored form: decoded and resized:<S> store pixels of per-sample
// shapes, resized:<W>x<H> a fixed W x H x 3 raw array (the leader's crop=none output at
// that size, nothing left to resample); pixel forms are uncompressed unless asked.
Status ApplyStore(const StoreOptions& st, DatasetSpec* spec) {
  const StoreForm& f = st.form;
  spec->store = f.ToString();
  if (f.kind == StoreForm::Kind::kEncoded && !spec->bucket_sizes.empty()) {
    StoreForm buckets{StoreForm::Kind::kBuckets, 0, 0, 0, spec->bucket_sizes};
    spec->store = buckets.ToString();
  }
  if (f.kind == StoreForm::Kind::kBuckets)
    return InvalidArgumentError("convert: --store {} is given as OfflineBuckets (--buckets)",
                                spec->store);
  if (!f.stores_pixels()) {
    spec->compression = st.compression;
    return Status::Ok();
  }
  if (!st.make_pixels)
    return InvalidArgumentError("convert: --store {} needs a pixel maker", spec->store);
  if (!spec->bucket_sizes.empty())
    return InvalidArgumentError("convert: --store {} with --buckets: offline buckets are kept "
                                "beside encoded images only; use --store buckets:<sizes>, or "
                                "one file per stored form", spec->store);
  spec->kind = f.short_side == 0 && f.kind == StoreForm::Kind::kResized ? SampleKind::kRaw
                                                                         : SampleKind::kPixels;
  spec->raw_height = f.height;
  spec->raw_width = f.width;
  spec->raw_channels = 3;
  spec->compress = false;
  spec->compression = st.compression;
  return Status::Ok();
}

// Replaces the sample's bytes by its stored pixels (in the producing thread). `channels` 0:
// e->bytes is encoded; else raw w x h x channels pixels. A sample that does not decode is bad.
void MakeStored(const StoreOptions& st, int w, int h, int channels, Encoded* e) {
  if (!e->status.ok() || !st.form.stores_pixels()) return;
  auto px = st.make_pixels(st.form, e->bytes, w, h, channels);
  if (!px.ok()) {
    e->status = px.status().WithContext(fmt::format("--store {}", st.form.ToString()));
    return;
  }
  e->bytes = std::move(px->pixels);
  e->shape = px->shape;
}

// Appends one produced sample as its writer stores it.
Status AppendSample(DatasetWriter& w, const DatasetSpec& spec, const Encoded& e, int64_t label,
                    int width, int height) {
  if (spec.kind == SampleKind::kPixels) return w.AppendPixels(e.bytes, label, width, height, e.shape);
  return w.Append(e.bytes, label, width, height, e.header.encoding, e.buckets);
}

// The report's storage part, once the file is written.
void ReportStorage(const DatasetWriter& w, const DatasetSpec& spec, const OfflineBuckets& b,
                   const std::string& out, ConvertReport* r) {
  r->samples = w.num_samples();
  r->bucket_sizes = b.sizes;
  r->bucket_bytes = w.bucket_bytes();
  r->chunk_samples = w.chunk_samples();
  r->chunk_bytes = w.chunk_bytes();
  r->store = spec.store.empty() ? "encoded" : spec.store;
  std::error_code ec;
  r->file_bytes = int64_t(std::filesystem::file_size(out, ec));
  r->compression = spec.kind == SampleKind::kEncoded ? "none"
                   : !spec.compression.empty()       ? spec.compression
                   : spec.compress                   ? "gzip:1"
                                                     : "none";
}

Status CheckBuckets(const OfflineBuckets& b) {
  if (!b.sizes.empty() && !b.encoder)
    return InvalidArgumentError("convert: bucket sizes given without a bucket encoder");
  return Status::Ok();
}

// Adds the pre-resized bucket images of a sample (in the producing worker thread).
// `channels` 0: e.bytes is encoded; else raw h x w x channels pixels.
void EncodeBuckets(const OfflineBuckets& b, int w, int h, int channels, Encoded* e) {
  if (!e->status.ok() || b.sizes.empty()) return;
  for (int size : b.sizes) {
    auto img = b.encoder(e->bytes, w, h, channels, size);
    if (!img.ok()) {
      e->status = img.status().WithContext(fmt::format("bucket {}", size));
      return;
    }
    e->buckets.push_back(std::move(img).value());
  }
}

void ApplyBuckets(const OfflineBuckets& b, DatasetSpec* spec) {
  spec->bucket_sizes = b.sizes;
  spec->bucket_encoding = b.encoding;
}

// The spec's provenance, offline buckets and stored form.
Status ApplyOutputs(std::string created_by, const OfflineBuckets& b, const StoreOptions& st,
                    DatasetSpec* spec) {
  spec->created_by = std::move(created_by);
  BC_RETURN_IF_ERROR(CheckBuckets(b));
  ApplyBuckets(b, spec);
  return ApplyStore(st, spec);
}

Result<std::vector<std::string>> IdxClassNames(const IdxConvertOptions& o,
                                               const std::vector<uint8_t>& labels) {
  int max_label = 0;
  for (uint8_t l : labels) max_label = std::max<int>(max_label, l);
  if (o.class_names.empty()) {
    std::vector<std::string> names;
    for (int i = 0; i <= max_label; ++i) names.push_back(std::to_string(i));
    return names;
  }
  if (max_label >= int(o.class_names.size()))
    return InvalidArgumentError("convert: {} has label {} but only {} class names were given",
                                o.labels_path, max_label, o.class_names.size());
  return o.class_names;
}

Status CheckIdxShapes(const IdxConvertOptions& o, const IdxArray& images, const IdxArray& labels) {
  if (images.dims.size() != 3 && images.dims.size() != 4)
    return InvalidArgumentError("convert: {} has {} dimensions, expected N x H x W or N x H x W x C",
                                o.images_path, images.dims.size());
  if (labels.dims.size() != 1)
    return InvalidArgumentError("convert: {} has {} dimensions, expected 1 (one label per image)",
                                o.labels_path, labels.dims.size());
  if (labels.dims[0] != images.dims[0])
    return InvalidArgumentError("convert: {} has {} labels but {} has {} images", o.labels_path,
                                labels.dims[0], o.images_path, images.dims[0]);
  if (o.encode != "raw" && o.encode != "png" && o.encode != "jpeg")
    return InvalidArgumentError("convert: --encode {} is not one of raw, png, jpeg", o.encode);
  return Status::Ok();
}

Encoded EncodeIdxSample(const IdxConvertOptions& o, std::span<const uint8_t> px, int w, int h,
                        int c) {
  Encoded e;
  e.header = {ImageEncoding::kUnknown, w, h, c};
  if (o.encode == "raw") {
    e.bytes.assign(px.begin(), px.end());
    return e;
  }
  auto r = o.encode == "png" ? EncodePng(px, w, h, c) : EncodeJpeg(px, w, h, c, o.quality);
  if (!r.ok()) {
    e.status = r.status();
    return e;
  }
  e.bytes = std::move(*r);
  e.header.encoding = o.encode == "png" ? ImageEncoding::kPng : ImageEncoding::kJpeg;
  return e;
}

Result<std::vector<uint8_t>> ReadWholeFile(const std::string& path) {
  int fd = RetryEintr([&] { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC); });
  if (fd < 0) return ErrnoError(errno, "cannot open");
  struct stat st {};
  std::vector<uint8_t> bytes;
  if (fstat(fd, &st) == 0) bytes.resize(size_t(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = RetryEintr([&] { return ::read(fd, bytes.data() + got, bytes.size() - got); });
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return ErrnoError(err, "cannot read");
    }
    if (n == 0) break;
    got += size_t(n);
  }
  ::close(fd);
  bytes.resize(got);
  return bytes;
}

Encoded LoadImageFile(const std::string& path) {
  Encoded e;
  auto bytes = ReadWholeFile(path);
  if (!bytes.ok()) {
    e.status = bytes.status();
    return e;
  }
  auto hdr = ProbeImage(*bytes);
  if (!hdr.ok()) {
    e.status = hdr.status();
    return e;
  }
  e.header = *hdr;
  e.bytes = std::move(*bytes);
  return e;
}

}  // namespace

std::vector<std::string> FashionMnistClassNames() {
  return {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
          "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
}

Result<ConvertReport> ConvertIdx(const IdxConvertOptions& o, const ProgressFn& progress) {
  auto t0 = std::chrono::steady_clock::now();
  BC_ASSIGN_OR_RETURN(IdxArray images, ReadIdxFile(o.images_path));
  BC_ASSIGN_OR_RETURN(IdxArray labels, ReadIdxFile(o.labels_path));
  BC_RETURN_IF_ERROR(CheckIdxShapes(o, images, labels));
  const int64_t n = images.dims[0];
  const int h = int(images.dims[1]), w = int(images.dims[2]);
  const int c = images.dims.size() == 4 ? int(images.dims[3]) : 1;
  const size_t sample_bytes = size_t(h) * w * c;
  DatasetSpec spec;
  spec.kind = o.encode == "raw" ? SampleKind::kRaw : SampleKind::kEncoded;
  spec.raw_height = h;
  spec.raw_width = w;
  spec.raw_channels = c;
  BC_ASSIGN_OR_RETURN(spec.class_names, IdxClassNames(o, labels.data));
  spec.compress = o.compress;
  spec.compression = o.compression;
  spec.overwrite = o.overwrite;
  spec.created_by = fmt::format("batchcast convert idx --encode {} from {}", o.encode, o.images_path);
  BC_RETURN_IF_ERROR(CheckBuckets(o.buckets));
  ApplyBuckets(o.buckets, &spec);
  BC_ASSIGN_OR_RETURN(auto writer, DatasetWriter::Create(o.out_path, spec));
  ConvertReport report;
  const int threads = ResolveThreads(o.threads);
  auto produce = [&](int64_t i) {
    std::span<const uint8_t> px(images.data.data() + size_t(i) * sample_bytes, sample_bytes);
    Encoded e = EncodeIdxSample(o, px, w, h, c);
    if (!o.buckets.sizes.empty()) {  // from the source pixels, not a lossy re-encode
      Encoded raw;
      raw.bytes.assign(px.begin(), px.end());
      EncodeBuckets(o.buckets, w, h, c, &raw);
      if (!raw.status.ok()) e.status = raw.status;
      e.buckets = std::move(raw.buckets);
    }
    return e;
  };
  auto consume = [&](int64_t i, Encoded&& e) -> Status {
    if (!e.status.ok()) return e.status.WithContext(fmt::format("convert: sample {}", i));
    report.stored_bytes += int64_t(e.bytes.size());
    BC_RETURN_IF_ERROR(
        writer->Append(e.bytes, labels.data[size_t(i)], w, h, e.header.encoding, e.buckets));
    if (progress) progress(i + 1, n);
    return Status::Ok();
  };
  BC_RETURN_IF_ERROR(OrderedParallelMap<Encoded>(n, threads, kWindowPerThread * threads, produce,
                                                 consume));
  BC_RETURN_IF_ERROR(writer->Finish());
  ReportStorage(*writer, spec, o.buckets, o.out_path, &report);
  report.seconds = SecondsSince(t0);
  return report;
}

std::string ImageFolderProblems(const ImageFolderConvertOptions& o, const ConvertReport& r) {
  std::string out;
  if (!o.skip_bad)
    for (const auto& s : r.skipped) out += fmt::format("\n  bad image: {}", s);
  if (!o.allow_empty_classes)
    for (const auto& c : r.empty_classes)
      out += fmt::format("\n  empty class: {}/{} has no .jpg, .jpeg or .png file", o.root, c);
  if (out.empty()) return out;
  std::string fix;
  if (!o.skip_bad && !r.skipped.empty()) fix += " pass --skip-bad to convert without the bad images;";
  if (!o.allow_empty_classes && !r.empty_classes.empty())
    fix += " remove the empty class directories, or pass --allow-empty-classes to keep their "
           "labels (torchvision's ImageFolder refuses them);";
  fix.pop_back();
  return fmt::format("convert: {} has {} bad images and {} empty classes, so nothing was "
                     "written ({}):{}", o.root, o.skip_bad ? 0 : r.skipped.size(),
                     o.allow_empty_classes ? 0 : r.empty_classes.size(), fix.substr(1), out);
}

Result<ConvertReport> ConvertImageFolder(const ImageFolderConvertOptions& o,
                                         const ProgressFn& progress) {
  auto t0 = std::chrono::steady_clock::now();
  BC_ASSIGN_OR_RETURN(ImageFolderListing listing, ListImageFolder(o.root));
  if (o.limit < 0) return InvalidArgumentError("convert: --limit {} is negative", o.limit);
  if (o.limit > 0 && o.limit < int64_t(listing.files.size())) {  // every k-th file
    std::vector<ImageFolderEntry> kept;
    const int64_t total = int64_t(listing.files.size());
    for (int64_t i = 0; i < o.limit; ++i) kept.push_back(listing.files[size_t(i * total / o.limit)]);
    listing.files = std::move(kept);
  }
  ConvertReport report;
  for (const auto& f : listing.ignored) report.ignored.push_back(f.path + ": " + f.reason);
  report.empty_classes = listing.empty_classes;
  DatasetSpec spec;
  spec.kind = SampleKind::kEncoded;
  spec.class_names = listing.class_names;
  spec.overwrite = o.overwrite;
  BC_RETURN_IF_ERROR(ApplyOutputs(
      fmt::format("batchcast convert imagefolder {} --store {}", o.root, o.store.form.ToString()),
      o.buckets, o.store, &spec));
  std::unique_ptr<DatasetWriter> writer;
  if (!o.check_only) {
    BC_ASSIGN_OR_RETURN(writer, DatasetWriter::Create(o.out_path, spec));
  }
  // Writing stops at the first problem that will fail the conversion; reading and checking
  // go on to the end, so that the error lists every problem at once.
  // (Read by the producing threads, written by this one.)
  std::atomic<bool> writing =
      writer != nullptr && (o.allow_empty_classes || listing.empty_classes.empty());
  const int64_t n = int64_t(listing.files.size());
  const int threads = ResolveThreads(o.threads);
  auto produce = [&](int64_t i) {
    Encoded e = LoadImageFile(listing.files[size_t(i)].path);
    if (writing) EncodeBuckets(o.buckets, e.header.width, e.header.height, 0, &e);
    MakeStored(o.store, 0, 0, 0, &e);  // a decode error is bad, listed with the others
    return e;
  };
  auto consume = [&](int64_t i, Encoded&& e) -> Status {
    const auto& f = listing.files[size_t(i)];
    if (!e.status.ok()) {
      report.skipped.push_back(fmt::format("{}: {}", f.path, e.status.message()));
      if (!o.skip_bad) writing = false;
    } else if (writing) {
      report.stored_bytes += int64_t(e.bytes.size());
      BC_RETURN_IF_ERROR(
          AppendSample(*writer, spec, e, f.label, e.header.width, e.header.height));
    }
    if (progress) progress(i + 1, n);
    return Status::Ok();
  };
  BC_RETURN_IF_ERROR(OrderedParallelMap<Encoded>(n, threads, kWindowPerThread * threads, produce,
                                                 consume));
  report.seconds = SecondsSince(t0);
  if (o.check_only) return report;
  if (std::string problems = ImageFolderProblems(o, report); !problems.empty())
    return InvalidArgumentError("{}", problems);
  if (writer->num_samples() == 0)
    return InvalidArgumentError("convert: every image under {} was bad; nothing to write", o.root);
  BC_RETURN_IF_ERROR(writer->Finish());
  ReportStorage(*writer, spec, o.buckets, o.out_path, &report);
  report.seconds = SecondsSince(t0);
  return report;
}

namespace {

// A spec with the kind, raw shape and class names of an existing file.
DatasetSpec SpecOf(const DatasetInfo& info, bool overwrite) {
  DatasetSpec spec;
  spec.kind = info.kind;
  spec.raw_height = info.raw_height;
  spec.raw_width = info.raw_width;
  spec.raw_channels = info.raw_channels;
  spec.class_names = info.class_names;
  spec.overwrite = overwrite;
  return spec;
}

}  // namespace

Result<ConvertReport> ConvertStored(const StoredConvertOptions& o, const ProgressFn& progress) {
  auto t0 = std::chrono::steady_clock::now();
  BC_ASSIGN_OR_RETURN(auto source, DatasetReader::Open(o.source));
  const DatasetInfo& info = source->info();
  const auto stored = ParseStoreForm(info.store);
  if (info.kind == SampleKind::kPixels || (stored.ok() && stored->stores_pixels()))
    return InvalidArgumentError("convert: {} already stores the {} form; convert from the "
                                "encoded (or raw) original", o.source,
                                info.store.empty() ? "pixel" : info.store);
  if (o.limit < 0) return InvalidArgumentError("convert: --limit {} is negative", o.limit);
  const int64_t n = o.limit > 0 ? std::min(o.limit, info.num_samples) : info.num_samples;
  DatasetSpec spec = SpecOf(info, o.overwrite);
  BC_RETURN_IF_ERROR(ApplyOutputs(
      fmt::format("batchcast convert h5 {} --store {}", o.source, o.store.form.ToString()),
      o.buckets, o.store, &spec));
  if (info.kind == SampleKind::kRaw && !o.store.form.stores_pixels())
    spec.compression = o.store.compression.empty() ? "gzip:1" : o.store.compression;
  BC_ASSIGN_OR_RETURN(auto writer, DatasetWriter::Create(o.out_path, spec));
  const int raw_c = info.kind == SampleKind::kRaw ? info.raw_channels : 0;
  auto produce = [&](int64_t i) {
    Encoded e;
    e.status = source->ReadSample(i, &e.bytes);
    if (e.status.ok()) e.status = source->VerifySample(i, e.bytes);
    // Raw pixels: the stored shape (the original size may differ, e.g. a resized store).
    const StoredShape shape = source->SampleShape(i);
    e.header = {ImageEncoding::kUnknown, raw_c > 0 ? shape.width : source->OriginalWidth(i),
                raw_c > 0 ? shape.height : source->OriginalHeight(i), raw_c};
    if (e.status.ok() && raw_c == 0) {
      auto hdr = ProbeImage(e.bytes);
      if (hdr.ok()) e.header = *hdr;
      else e.status = hdr.status();
    }
    EncodeBuckets(o.buckets, e.header.width, e.header.height, raw_c, &e);
    MakeStored(o.store, e.header.width, e.header.height, raw_c, &e);
    return e;
  };
  ConvertReport report;
  auto consume = [&](int64_t i, Encoded&& e) -> Status {
    if (!e.status.ok()) {
      if (!o.skip_bad)
        return e.status.WithContext(fmt::format("convert: sample {} of {} (pass --skip-bad to "
                                                "leave bad samples out)", i, o.source));
      report.skipped.push_back(fmt::format("sample {}: {}", i, e.status.message()));
    } else {
      report.stored_bytes += int64_t(e.bytes.size());
      BC_RETURN_IF_ERROR(AppendSample(*writer, spec, e, source->Label(i), e.header.width,
                                      e.header.height));
    }
    if (progress) progress(i + 1, n);
    return Status::Ok();
  };
  const int threads = ResolveThreads(o.threads);
  BC_RETURN_IF_ERROR(OrderedParallelMap<Encoded>(n, threads, kWindowPerThread * threads, produce,
                                                 consume));
  if (writer->num_samples() == 0)
    return InvalidArgumentError("convert: every sample of {} was bad; nothing to write", o.source);
  BC_RETURN_IF_ERROR(writer->Finish());
  ReportStorage(*writer, spec, o.buckets, o.out_path, &report);
  report.seconds = SecondsSince(t0);
  return report;
}

namespace {

// The writer's spec that reproduces `info` in the current layout.
Result<DatasetSpec> UpgradeSpec(const DatasetInfo& info, bool overwrite) {
  DatasetSpec spec = SpecOf(info, overwrite);
  spec.store = info.store;
  spec.bucket_sizes = info.bucket_sizes;
  spec.bucket_encoding = info.bucket_encoding.empty() ? "jpeg" : info.bucket_encoding;
  spec.created_by = info.created_by.empty() ? std::string("batchcast convert --upgrade")
                                            : info.created_by + "; upgraded to layout version " +
                                                  std::to_string(spec.layout_version) +
                                                  " by batchcast convert --upgrade";
  if (info.kind != SampleKind::kEncoded) {  // raw pixels keep their chunk filter
    spec.compression = info.compression;
    BC_RETURN_IF_ERROR(CheckCompression(spec).WithContext(fmt::format(
        "convert --upgrade: {} compresses its pixels with {}, which convert cannot write",
        info.path, info.compression)));
  }
  return spec;
}

}  // namespace

Result<ConvertReport> ConvertUpgrade(const UpgradeOptions& o, const ProgressFn& progress) {
  auto t0 = std::chrono::steady_clock::now();
  BC_ASSIGN_OR_RETURN(auto source, DatasetReader::Open(o.source));
  const DatasetInfo& info = source->info();
  ConvertReport report;
  report.layout_from = info.schema_version;
  report.layout_to = info.schema_version;
  const bool vlen = info.kind == SampleKind::kEncoded || !info.bucket_sizes.empty();
  if (info.schema_version >= 2 || !vlen) {  // nothing is read through the per-sample lock
    report.already_current = true;
    report.seconds = SecondsSince(t0);
    return report;
  }
  std::error_code ec;
  const bool in_place = o.out_path.empty() || std::filesystem::equivalent(o.source, o.out_path, ec);
  const std::string out = in_place ? o.source : o.out_path;
  BC_ASSIGN_OR_RETURN(DatasetSpec spec, UpgradeSpec(info, in_place || o.overwrite));
  BC_ASSIGN_OR_RETURN(auto writer, DatasetWriter::Create(out, spec));
  const int64_t n = info.num_samples;
  std::vector<std::vector<uint8_t>> block, buckets(info.bucket_sizes.size());
  for (int64_t first = 0; first < n; first += 256) {
    const int64_t count = std::min<int64_t>(256, n - first);
    BC_RETURN_IF_ERROR(source->ReadSamples(first, count, &block).WithContext(
        fmt::format("convert --upgrade: {} (nothing was written)", o.source)));
    for (int64_t k = 0; k < count; ++k) {
      const int64_t i = first + k;
      const auto& bytes = block[size_t(k)];
      BC_RETURN_IF_ERROR(source->VerifySample(i, bytes).WithContext(
          "convert --upgrade (nothing was written; restore the file from a good copy)"));
      for (size_t b = 0; b < buckets.size(); ++b)
        BC_RETURN_IF_ERROR(source->ReadBucketSample(info.bucket_sizes[b], i, &buckets[b]));
      report.stored_bytes += int64_t(bytes.size());
      BC_RETURN_IF_ERROR(writer->Append(bytes, source->Label(i), source->OriginalWidth(i),
                                        source->OriginalHeight(i), SniffEncoding(bytes), buckets));
      if (progress) progress(i + 1, n);
    }
  }
  BC_RETURN_IF_ERROR(writer->Finish());
  OfflineBuckets kept;
  kept.sizes = info.bucket_sizes;
  ReportStorage(*writer, spec, kept, out, &report);
  report.layout_to = spec.layout_version;
  report.seconds = SecondsSince(t0);
  return report;
}

}  // namespace batchcast::data
