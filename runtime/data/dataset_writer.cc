// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "data/dataset_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "core/errors.h"
#include "core/log.h"
#include "data/dataset_layout.h"
#include "data/hdf5_lock.h"
#include "data/hdf5_util.h"

namespace batchcast::data {
namespace {

constexpr size_t kFlushBytes = 16 << 20;
constexpr size_t kFlushSamples = 8192;

int64_t RawChunkSamples(int64_t sample_bytes) {
  return std::clamp<int64_t>(layout::kRawChunkTargetBytes / std::max<int64_t>(sample_bytes, 1), 1,
                             layout::kRawChunkMaxSamples);
}

Status SyncFile(const std::string& path) {
  int fd = RetryEintr([&] { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC); });
  if (fd < 0) return ErrnoError(errno, "convert: cannot open {} to sync it", path);
  int rc = RetryEintr([&] { return ::fsync(fd); });
  int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoError(err, "convert: cannot fsync {}", path);
  return Status::Ok();
}

}  // namespace

// One 1-D uint8 dataset that samples' bytes are appended to: stored pixels, and version 2
// encoded images and buckets. The dataset is created at its first flush, when the bytes
// pending give the chunk size; sample i is bytes [offsets[i], offsets[i] + lengths[i]), an
// index written beside it at Finish when `indexed` (pixels have their shapes instead).
struct ByteColumn {
  std::string group;     // "" or "buckets/<size>/": where `images` and its index live
  std::string encoding;  // written as the `encoding` attribute at creation when not empty
  bool indexed = false;
  std::unique_ptr<H5Id> ds;
  std::vector<uint8_t> pending;
  size_t pending_samples = 0;
  uint64_t flushed = 0, total = 0;
  std::vector<uint64_t> offsets, lengths;

  void Add(std::span<const uint8_t> bytes) {
    pending.insert(pending.end(), bytes.begin(), bytes.end());
    offsets.push_back(total);
    lengths.push_back(bytes.size());
    total += bytes.size();
    ++pending_samples;
  }
  std::string name() const { return group + layout::kImages; }
  // The first flush's mean sample, rounded up to 4 KiB, within [lo, hi] (per_sample), or a
  // kByteChunkFlushShare-th of its bytes so rounded.
  int64_t ChunkFor(int64_t lo, int64_t hi, bool per_sample) const {
    const int64_t n = std::max<int64_t>(int64_t(pending_samples), 1);
    const int64_t want = per_sample ? std::max<int64_t>(int64_t(pending.size()) / n, 1)
                                    : int64_t(pending.size()) / layout::kByteChunkFlushShare;
    return std::clamp<int64_t>((want + 4095) / 4096 * 4096, lo, hi);
  }
};

std::string PartialPath(const std::string& out_path) {
  return fmt::format("{}.partial-{}", out_path, static_cast<long>(getpid()));
}

Status CheckCompression(const DatasetSpec& spec) {
  const std::string& c = spec.compression;
  if (c.empty() || c == "none") return Status::Ok();
  if (spec.kind == SampleKind::kEncoded)
    return InvalidArgumentError(
        "convert: --compression {} applies to stored pixels only: encoded JPEG/PNG bytes are "
        "already compressed and HDF5 filters do not reach variable-length data; use "
        "--compression none, or store pixels (convert idx --encode raw, or --store "
        "decoded|resized:<size>)", c);
  if (c == "lz4" || c == "gzip") return Status::Ok();
  if (c == "zstd")
    return InvalidArgumentError(
        "convert: --compression zstd: Debian 12's hdf5-filter-plugin has no zstd filter (it "
        "ships lz4, bzip2 and bitshuffle); use lz4 (fast) or gzip[:1-9] (smaller)");
  if (c.rfind("gzip:", 0) == 0) {
    const std::string level = c.substr(5);
    if (level.size() == 1 && level[0] >= '1' && level[0] <= '9') return Status::Ok();
    return InvalidArgumentError("convert: --compression {}: the gzip level must be 1-9 (e.g. "
                                "gzip:6)", c);
  }
  return InvalidArgumentError("convert: --compression '{}' is not none, gzip[:1-9], lz4 or zstd",
                              c);
}

Result<std::unique_ptr<DatasetWriter>> DatasetWriter::Create(const std::string& out_path,
                                                             const DatasetSpec& spec) {
  std::error_code ec;
  if (!spec.overwrite && std::filesystem::exists(out_path, ec))
    return InvalidArgumentError("convert: {} already exists (pass --force to replace it)",
                                out_path);
  if (spec.layout_version != 1 && spec.layout_version != 2)
    return InvalidArgumentError("convert: layout version {} is not 1 (vlen) or 2 (bytes + index)",
                                spec.layout_version);
  if (spec.kind == SampleKind::kRaw &&
      (spec.raw_height <= 0 || spec.raw_width <= 0 || spec.raw_channels <= 0))
    return InvalidArgumentError("convert: raw samples need a shape, got {}x{}x{}",
                                spec.raw_height, spec.raw_width, spec.raw_channels);
  BC_RETURN_IF_ERROR(CheckCompression(spec));
  Hdf5Init();
  std::unique_ptr<DatasetWriter> w(new DatasetWriter());
  w->spec_ = spec;
  w->out_path_ = out_path;
  w->partial_path_ = PartialPath(out_path);
  w->sample_bytes_ = int64_t(spec.raw_height) * spec.raw_width * spec.raw_channels;
  std::lock_guard lock(Hdf5Lock());
  // The 1.8 file format and later: object headers, the superblock and the chunk index carry
  // checksums, so corrupt metadata is an HDF5 error at read instead of garbage (h5py and
  // HDF5 >= 1.8 read these files).
  H5Id fapl(H5Pcreate(H5P_FILE_ACCESS));
  if (H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST) < 0)
    return Hdf5Error(StatusCode::kInternal, "cannot set the file format bounds");
  w->file_ = std::make_unique<H5Id>(
      H5Fcreate(w->partial_path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
  if (!w->file_->valid())
    return Hdf5Error(StatusCode::kIoError, fmt::format("cannot create {}", w->partial_path_));
  // The lowest version that describes the file: raw and pixel files without buckets are the
  // same in both, so builds older than version 2 still read them.
  const bool has_encoded = spec.kind == SampleKind::kEncoded || !spec.bucket_sizes.empty();
  BC_RETURN_IF_ERROR(WriteIntAttribute(w->file_->get(), layout::kSchemaAttr,
                                       has_encoded ? spec.layout_version : 1));
  if (!spec.created_by.empty())
    BC_RETURN_IF_ERROR(
        WriteStringAttribute(w->file_->get(), layout::kCreatedByAttr, spec.created_by));
  BC_RETURN_IF_ERROR(w->CreateImages());
  BC_RETURN_IF_ERROR(w->CreateBuckets());
  return w;
}

Status DatasetWriter::CreateBuckets() {
  const auto& sizes = spec_.bucket_sizes;
  if (sizes.empty()) return Status::Ok();
  if (int(sizes.size()) > layout::kMaxBuckets)
    return InvalidArgumentError("convert: {} buckets given, at most {}", sizes.size(),
                                layout::kMaxBuckets);
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] < 1 || sizes[i] > 16384 || (i > 0 && sizes[i] <= sizes[i - 1]))
      return InvalidArgumentError(
          "convert: bucket sizes must be strictly ascending in [1, 16384], got {} at position {}",
          sizes[i], i + 1);
  if (spec_.bucket_encoding != "jpeg" && spec_.bucket_encoding != "png")
    return InvalidArgumentError("convert: bucket encoding '{}' is not jpeg or png",
                                spec_.bucket_encoding);
  H5Id group(H5Gcreate2(file_->get(), layout::kBuckets, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!group.valid())
    return Hdf5Error(StatusCode::kIoError, fmt::format("cannot create group 'buckets' in {}",
                                                       partial_path_));
  for (int size : sizes) {
    std::string name = std::to_string(size);
    H5Id sub(H5Gcreate2(group.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (Indexed()) {  // the dataset is made at the first flush
      if (!sub.valid())
        return Hdf5Error(StatusCode::kIoError, fmt::format("cannot create group 'buckets/{}' in "
                                                           "{}", size, partial_path_));
      auto column = std::make_unique<ByteColumn>();
      column->group = fmt::format("{}/{}/", layout::kBuckets, size);
      column->encoding = spec_.bucket_encoding;
      column->indexed = true;
      bucket_columns_.push_back(std::move(column));
      continue;
    }
    hsize_t dims[1] = {0}, maxdims[1] = {H5S_UNLIMITED};
    hsize_t chunk[1] = {hsize_t(layout::kVlenChunkSamples)};
    H5Id space(H5Screate_simple(1, dims, maxdims));
    H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
    H5Pset_chunk(dcpl.get(), 1, chunk);
    H5Id type(H5Tvlen_create(H5T_STD_U8LE));
    auto ds = std::make_unique<H5Id>(
        sub.valid() ? H5Dcreate2(sub.get(), layout::kImages, type.get(), space.get(), H5P_DEFAULT,
                                 dcpl.get(), H5P_DEFAULT)
                    : H5I_INVALID_HID);
    if (!ds->valid())
      return Hdf5Error(StatusCode::kIoError,
                       fmt::format("cannot create dataset 'buckets/{}/images' in {}", size,
                                   partial_path_));
    BC_RETURN_IF_ERROR(
        WriteStringAttribute(ds->get(), layout::kEncodingAttr, spec_.bucket_encoding));
    bucket_images_.push_back(std::move(ds));
  }
  bucket_pending_bytes_.resize(sizes.size());
  bucket_pending_sizes_.resize(sizes.size());
  bucket_bytes_.assign(sizes.size(), 0);
  return Status::Ok();
}

// The chunk filter of raw images (spec_.compression, checked by Create).
Status DatasetWriter::SetCompression(int64_t dcpl) const {
  const std::string& c = spec_.compression;
  if (c.empty() && spec_.kind == SampleKind::kPixels) return Status::Ok();  // none by default
  if (c.empty()) return spec_.compress && H5Pset_deflate(dcpl, 1) < 0
                            ? Hdf5Error(StatusCode::kInternal, "cannot set gzip compression")
                            : Status::Ok();
  if (c == "none") return Status::Ok();
  if (c == "lz4") {
    BC_RETURN_IF_ERROR(CheckFilterAvailable(kLz4FilterId, "convert --compression lz4"));
    if (H5Pset_filter(dcpl, kLz4FilterId, H5Z_FLAG_MANDATORY, 0, nullptr) < 0)
      return Hdf5Error(StatusCode::kInternal, "cannot set lz4 compression");
    return Status::Ok();
  }
  const int level = c == "gzip" ? 6 : std::stoi(c.substr(5));  // "gzip:L", checked by Create
  if (H5Pset_deflate(dcpl, unsigned(level)) < 0)
    return Hdf5Error(StatusCode::kInternal, "cannot set gzip compression");
  return Status::Ok();
}

// Appends `column`'s pending bytes to its dataset, creating it first (chunks of
// `chunk_bytes`, compressed as the spec says when `compress`). Called with the lock held.
Status DatasetWriter::FlushColumn(ByteColumn& column, int64_t chunk_bytes, bool compress) {
  const std::string name = column.name();
  if (column.ds == nullptr) {
    hsize_t dims[1] = {0}, maxdims[1] = {H5S_UNLIMITED}, chunk[1] = {hsize_t(chunk_bytes)};
    H5Id space(H5Screate_simple(1, dims, maxdims));
    H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
    H5Pset_chunk(dcpl.get(), 1, chunk);
    if (compress) BC_RETURN_IF_ERROR(SetCompression(dcpl.get()));
    column.ds = std::make_unique<H5Id>(H5Dcreate2(file_->get(), name.c_str(), H5T_STD_U8LE,
                                                  space.get(), H5P_DEFAULT, dcpl.get(),
                                                  H5P_DEFAULT));
    if (!column.ds->valid())
      return Hdf5Error(StatusCode::kIoError,
                       fmt::format("cannot create dataset '{}' in {}", name, partial_path_));
    if (!column.encoding.empty())
      BC_RETURN_IF_ERROR(WriteStringAttribute(column.ds->get(), layout::kEncodingAttr,
                                              column.encoding));
  }
  if (column.pending.empty()) return Status::Ok();
  const hsize_t count[1] = {column.pending.size()}, start[1] = {hsize_t(column.flushed)};
  const hsize_t new_dims[1] = {start[0] + count[0]};
  H5Id mem(H5Screate_simple(1, count, nullptr));
  herr_t rc = H5Dset_extent(column.ds->get(), new_dims);
  H5Id file_space(H5Dget_space(column.ds->get()));
  if (rc >= 0)
    rc = H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr);
  if (rc >= 0)
    rc = H5Dwrite(column.ds->get(), H5T_NATIVE_UINT8, mem.get(), file_space.get(), H5P_DEFAULT,
                  column.pending.data());
  if (rc < 0)
    return Hdf5Error(StatusCode::kIoError, fmt::format("cannot write bytes {}.. of '{}' to {}",
                                                       column.flushed, name, partial_path_));
  column.flushed += count[0];
  column.pending.clear();
  column.pending_samples = 0;
  return Status::Ok();
}

// `images` as a column: stored pixels (chunks of about one mean sample, 64 KiB to 4 MiB,
// compressed as asked), or version 2 encoded bytes (chunks of the first flush, 4 KiB to
// 4 MiB, never compressed: JPEG and PNG bytes do not shrink).
Status DatasetWriter::FlushImageColumn() {
  ByteColumn& c = *image_column_;
  const bool pixels = spec_.kind == SampleKind::kPixels;
  if (c.ds == nullptr) {
    const int64_t n = std::max<int64_t>(int64_t(c.pending_samples), 1);
    const int64_t mean = std::max<int64_t>(int64_t(c.pending.size()) / n, 1);
    chunk_bytes_ = pixels ? c.ChunkFor(layout::kPixelChunkMinBytes, layout::kPixelChunkMaxBytes,
                                       true)
                          : c.ChunkFor(layout::kByteChunkMinBytes, layout::kByteChunkMaxBytes,
                                       false);
    chunk_samples_ = std::max<int64_t>(chunk_bytes_ / mean, 1);
  }
  return FlushColumn(c, chunk_bytes_, pixels);
}

int64_t DatasetWriter::images_id() const {
  return images_ != nullptr ? images_->get() : image_column_->ds->get();
}

Status DatasetWriter::CreateImages() {
  if (spec_.kind == SampleKind::kPixels || (spec_.kind == SampleKind::kEncoded && Indexed())) {
    image_column_ = std::make_unique<ByteColumn>();  // its dataset: at the first flush
    image_column_->indexed = spec_.kind == SampleKind::kEncoded;
    return Status::Ok();
  }
  const bool raw = spec_.kind == SampleKind::kRaw;
  hsize_t dims[4] = {0, hsize_t(spec_.raw_height), hsize_t(spec_.raw_width),
                     hsize_t(spec_.raw_channels)};
  hsize_t maxdims[4] = {H5S_UNLIMITED, dims[1], dims[2], dims[3]};
  hsize_t chunk[4] = {hsize_t(raw ? RawChunkSamples(sample_bytes_) : layout::kVlenChunkSamples),
                      dims[1], dims[2], dims[3]};
  int rank = raw ? 4 : 1;
  chunk_samples_ = int64_t(chunk[0]);
  chunk_bytes_ = chunk_samples_ * (raw ? sample_bytes_ : int64_t(sizeof(hvl_t)));
  H5Id space(H5Screate_simple(rank, dims, maxdims));
  H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_chunk(dcpl.get(), rank, chunk);
  if (raw) BC_RETURN_IF_ERROR(SetCompression(dcpl.get()));
  H5Id type(raw ? H5Tcopy(H5T_STD_U8LE) : H5Tvlen_create(H5T_STD_U8LE));
  images_ = std::make_unique<H5Id>(H5Dcreate2(file_->get(), layout::kImages, type.get(),
                                              space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
  if (!images_->valid())
    return Hdf5Error(StatusCode::kIoError,
                     fmt::format("cannot create dataset 'images' in {}", partial_path_));
  return Status::Ok();
}

DatasetWriter::~DatasetWriter() {
  if (!finished_) Abort();
  std::lock_guard lock(Hdf5Lock());
  bucket_images_.clear();
  bucket_columns_.clear();
  image_column_.reset();
  images_.reset();
  file_.reset();
}

void DatasetWriter::Abort() {
  {
    std::lock_guard lock(Hdf5Lock());
    bucket_images_.clear();
    bucket_columns_.clear();
    image_column_.reset();
    images_.reset();
    file_.reset();
  }
  if (::unlink(partial_path_.c_str()) != 0 && errno != ENOENT)
    BC_LOG(Warn, Data, "convert: cannot remove {}: {}", partial_path_, std::strerror(errno));
}

Status DatasetWriter::Append(std::span<const uint8_t> bytes, int64_t label, int width, int height,
                             ImageEncoding encoding,
                             std::span<const std::vector<uint8_t>> buckets) {
  if (finished_) return FailedPreconditionError("convert: append to {} after finish", out_path_);
  if (spec_.kind == SampleKind::kRaw && int64_t(bytes.size()) != sample_bytes_)
    return InvalidArgumentError("convert: sample {} has {} bytes, expected {}x{}x{} = {}",
                                num_samples_, bytes.size(), spec_.raw_height, spec_.raw_width,
                                spec_.raw_channels, sample_bytes_);
  if (spec_.kind == SampleKind::kEncoded && bytes.empty())
    return InvalidArgumentError("convert: sample {} is empty (0 bytes)", num_samples_);
  if (spec_.kind == SampleKind::kPixels && int64_t(stored_widths_.size()) != num_samples_ + 1)
    return InvalidArgumentError("convert: sample {} of stored pixels needs its shape "
                                "(DatasetWriter::AppendPixels)", num_samples_);
  if (label < 0 || (!spec_.class_names.empty() && label >= int64_t(spec_.class_names.size())))
    return InvalidArgumentError("convert: sample {} has label {}, outside [0, {})", num_samples_,
                                label, spec_.class_names.size());
  if (buckets.size() != spec_.bucket_sizes.size())
    return InvalidArgumentError("convert: sample {} has {} bucket images, expected {}",
                                num_samples_, buckets.size(), spec_.bucket_sizes.size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (buckets[b].empty())
      return InvalidArgumentError("convert: sample {} has an empty bucket image at size {}",
                                  num_samples_, spec_.bucket_sizes[b]);
  }
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (!bucket_columns_.empty()) {
      bucket_columns_[b]->Add(buckets[b]);
    } else {
      bucket_pending_bytes_[b].insert(bucket_pending_bytes_[b].end(), buckets[b].begin(),
                                      buckets[b].end());
      bucket_pending_sizes_[b].push_back(buckets[b].size());
    }
    bucket_bytes_[b] += int64_t(buckets[b].size());
  }
  images_bytes_ += int64_t(bytes.size());
  saw_jpeg_ |= encoding == ImageEncoding::kJpeg;
  saw_png_ |= encoding == ImageEncoding::kPng;
  if (image_column_ != nullptr) {
    image_column_->Add(bytes);
    pending_unflushed_bytes_ += bytes.size();
  } else {
    pending_bytes_.insert(pending_bytes_.end(), bytes.begin(), bytes.end());
    pending_unflushed_bytes_ = pending_bytes_.size();
  }
  pending_sizes_.push_back(bytes.size());
  labels_.push_back(label);
  checksums_.push_back(SampleChecksum(bytes, label));
  widths_.push_back(width);
  heights_.push_back(height);
  ++num_samples_;
  if (pending_unflushed_bytes_ >= kFlushBytes || pending_sizes_.size() >= kFlushSamples)
    return Flush();
  return Status::Ok();
}

Status DatasetWriter::AppendPixels(std::span<const uint8_t> pixels, int64_t label, int width,
                                   int height, StoredShape shape) {
  if (spec_.kind != SampleKind::kPixels)
    return InvalidArgumentError("convert: {} does not store pixels of per-sample shapes",
                                out_path_);
  if (shape.width <= 0 || shape.height <= 0 || shape.width > layout::kMaxRawSide ||
      shape.height > layout::kMaxRawSide ||
      (shape.channels != 1 && shape.channels != 3 && shape.channels != 4) ||
      pixels.size() != shape.bytes())
    return InvalidArgumentError("convert: sample {} has {} bytes of pixels for a stored shape of "
                                "{}x{}x{} (W x H x C; sides up to {}, 1, 3 or 4 channels)",
                                num_samples_, pixels.size(), shape.width, shape.height,
                                shape.channels, layout::kMaxRawSide);
  stored_widths_.push_back(shape.width);
  stored_heights_.push_back(shape.height);
  stored_channels_.push_back(shape.channels);
  Status st = Append(pixels, label, width, height);
  if (!st.ok() && int64_t(stored_widths_.size()) > num_samples_) {
    stored_widths_.pop_back();
    stored_heights_.pop_back();
    stored_channels_.pop_back();
  }
  return st;
}

namespace {

// Appends `sizes.size()` vlen rows (concatenated in `bytes`) at `start` of dataset `ds`.
Status AppendVlenRows(hid_t ds, hsize_t start, const std::vector<size_t>& sizes,
                      std::vector<uint8_t>& bytes, const std::string& what) {
  hsize_t n = sizes.size();
  std::vector<hvl_t> vl;
  size_t off = 0;
  for (size_t s : sizes) {
    vl.push_back({s, bytes.data() + off});
    off += s;
  }
  hsize_t new_dims[1] = {start + n}, first[1] = {start}, count[1] = {n};
  H5Id mem(H5Screate_simple(1, count, nullptr));
  H5Id type(H5Tvlen_create(H5T_NATIVE_UINT8));
  herr_t rc = H5Dset_extent(ds, new_dims);
  H5Id file_space(H5Dget_space(ds));
  if (rc >= 0)
    rc = H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, first, nullptr, count, nullptr);
  if (rc >= 0) rc = H5Dwrite(ds, type.get(), mem.get(), file_space.get(), H5P_DEFAULT, vl.data());
  if (rc < 0) return Hdf5Error(StatusCode::kIoError, what);
  return Status::Ok();
}

}  // namespace

// Bucket rows go at the same positions as the samples (called with the lock held).
Status DatasetWriter::FlushBuckets() {
  for (auto& column : bucket_columns_)
    BC_RETURN_IF_ERROR(FlushColumn(
        *column, column->ChunkFor(layout::kByteChunkMinBytes, layout::kByteChunkMaxBytes, false),
        false));
  for (size_t b = 0; b < bucket_images_.size(); ++b) {
    BC_RETURN_IF_ERROR(AppendVlenRows(
        bucket_images_[b]->get(), hsize_t(bucket_flushed_), bucket_pending_sizes_[b],
        bucket_pending_bytes_[b],
        fmt::format("cannot write bucket {} of samples {}.. to {}", spec_.bucket_sizes[b],
                    bucket_flushed_, partial_path_)));
    bucket_pending_bytes_[b].clear();
    bucket_pending_sizes_[b].clear();
  }
  bucket_flushed_ = flushed_;
  return Status::Ok();
}

Status DatasetWriter::Flush() {
  std::lock_guard lock(Hdf5Lock());
  if (image_column_ != nullptr) {
    BC_RETURN_IF_ERROR(FlushImageColumn());
    flushed_ = num_samples_;
    pending_sizes_.clear();
    pending_unflushed_bytes_ = 0;
    return FlushBuckets();
  }
  if (pending_sizes_.empty()) return Status::Ok();
  const bool raw = spec_.kind == SampleKind::kRaw;
  hsize_t n = pending_sizes_.size();
  hsize_t start[4] = {hsize_t(flushed_), 0, 0, 0};
  hsize_t count[4] = {n, hsize_t(spec_.raw_height), hsize_t(spec_.raw_width),
                      hsize_t(spec_.raw_channels)};
  hsize_t new_dims[4] = {hsize_t(flushed_) + n, count[1], count[2], count[3]};
  int rank = raw ? 4 : 1;
  std::vector<hvl_t> vl;
  if (!raw) {
    size_t off = 0;
    for (size_t s : pending_sizes_) {
      vl.push_back({s, pending_bytes_.data() + off});
      off += s;
    }
  }
  H5Id mem(H5Screate_simple(rank, count, nullptr));
  H5Id type(raw ? H5Tcopy(H5T_NATIVE_UINT8) : H5Tvlen_create(H5T_NATIVE_UINT8));
  herr_t rc = H5Dset_extent(images_->get(), new_dims);
  H5Id file_space(H5Dget_space(images_->get()));
  if (rc >= 0)
    rc = H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr);
  if (rc >= 0)
    rc = H5Dwrite(images_->get(), type.get(), mem.get(), file_space.get(), H5P_DEFAULT,
                  raw ? static_cast<const void*>(pending_bytes_.data()) : vl.data());
  if (rc < 0)
    return Hdf5Error(StatusCode::kIoError,
                     fmt::format("cannot write samples {}..{} to {}", flushed_,
                                 flushed_ + int64_t(n) - 1, partial_path_));
  flushed_ += int64_t(n);
  pending_bytes_.clear();
  pending_sizes_.clear();
  pending_unflushed_bytes_ = 0;
  return FlushBuckets();
}

Status DatasetWriter::WriteSmallDatasets() {
  std::lock_guard lock(Hdf5Lock());
  const hid_t f = file_->get();
  const hsize_t n = labels_.size();
  // The per-sample columns: name, stored type, memory type, values (n of them).
  struct Column {
    const char* name;
    hid_t file_type, mem_type;
    const void* data;
  };
  std::vector<Column> columns = {
      {layout::kLabels, H5T_STD_I64LE, H5T_NATIVE_INT64, labels_.data()},
      {layout::kWidths, H5T_STD_I32LE, H5T_NATIVE_INT32, widths_.data()},
      {layout::kHeights, H5T_STD_I32LE, H5T_NATIVE_INT32, heights_.data()},
      {layout::kChecksums, H5T_STD_U64LE, H5T_NATIVE_UINT64, checksums_.data()}};
  if (spec_.kind == SampleKind::kPixels) {
    columns.push_back({layout::kStoredWidths, H5T_STD_I32LE, H5T_NATIVE_INT32,
                       stored_widths_.data()});
    columns.push_back({layout::kStoredHeights, H5T_STD_I32LE, H5T_NATIVE_INT32,
                       stored_heights_.data()});
    columns.push_back({layout::kStoredChannels, H5T_STD_I32LE, H5T_NATIVE_INT32,
                       stored_channels_.data()});
  }
  for (const Column& c : columns)
    BC_RETURN_IF_ERROR(
        WriteDataset1D(f, c.name, c.file_type, c.mem_type, c.data, n, partial_path_));
  H5Id str(H5Tcopy(H5T_C_S1));
  H5Tset_size(str.get(), H5T_VARIABLE);
  H5Tset_cset(str.get(), H5T_CSET_UTF8);
  std::vector<const char*> names;
  for (const auto& c : spec_.class_names) names.push_back(c.c_str());
  BC_RETURN_IF_ERROR(WriteDataset1D(f, layout::kClassNames, str.get(), str.get(), names.data(),
                                    names.size(), partial_path_));
  if (spec_.kind == SampleKind::kPixels) {
    BC_RETURN_IF_ERROR(WriteDataset1D(f, layout::kStoredWidths, H5T_STD_I32LE,
                                      H5T_NATIVE_INT32, stored_widths_.data(), n, partial_path_));
    BC_RETURN_IF_ERROR(WriteDataset1D(f, layout::kStoredHeights, H5T_STD_I32LE,
                                      H5T_NATIVE_INT32, stored_heights_.data(), n, partial_path_));
    BC_RETURN_IF_ERROR(WriteDataset1D(f, layout::kStoredChannels, H5T_STD_I32LE,
                                      H5T_NATIVE_INT32, stored_channels_.data(), n, partial_path_));
  }
  std::vector<const ByteColumn*> indexed;
  if (image_column_ != nullptr && image_column_->indexed) indexed.push_back(image_column_.get());
  for (const auto& c : bucket_columns_) indexed.push_back(c.get());
  for (const ByteColumn* c : indexed) {
    const std::string off = c->group + layout::kSampleOffsets;
    const std::string len = c->group + layout::kSampleLengths;
    BC_RETURN_IF_ERROR(WriteDataset1D(f, off.c_str(), H5T_STD_U64LE, H5T_NATIVE_UINT64,
                                      c->offsets.data(), c->offsets.size(), partial_path_));
    BC_RETURN_IF_ERROR(WriteDataset1D(f, len.c_str(), H5T_STD_U64LE, H5T_NATIVE_UINT64,
                                      c->lengths.data(), c->lengths.size(), partial_path_));
  }
  if (!spec_.store.empty())
    BC_RETURN_IF_ERROR(WriteStringAttribute(images_id(), layout::kStoreAttr, spec_.store));
  std::string encoding = spec_.kind == SampleKind::kPixels ? layout::kPixelsEncoding : "raw";
  if (spec_.kind == SampleKind::kEncoded)
    encoding = saw_jpeg_ && saw_png_ ? "mixed" : saw_png_ ? "png" : saw_jpeg_ ? "jpeg" : "mixed";
  return WriteStringAttribute(images_id(), layout::kEncodingAttr, encoding);
}

Status DatasetWriter::WriteMarkerAndClose() {
  std::lock_guard lock(Hdf5Lock());
  BC_RETURN_IF_ERROR(WriteIntAttribute(file_->get(), layout::kCompleteAttr, 1));
  bucket_images_.clear();
  bucket_columns_.clear();
  image_column_.reset();
  images_.reset();
  if (H5Fflush(file_->get(), H5F_SCOPE_GLOBAL) < 0)
    return Hdf5Error(StatusCode::kIoError, fmt::format("cannot flush {}", partial_path_));
  if (H5Fclose(file_->Release()) < 0)
    return Hdf5Error(StatusCode::kIoError, fmt::format("cannot close {}", partial_path_));
  return Status::Ok();
}

Status DatasetWriter::Finish() {
  if (finished_) return FailedPreconditionError("convert: {} finished twice", out_path_);
  BC_RETURN_IF_ERROR(Flush());
  BC_RETURN_IF_ERROR(WriteSmallDatasets());
  BC_RETURN_IF_ERROR(WriteMarkerAndClose());
  BC_RETURN_IF_ERROR(SyncFile(partial_path_));
  if (std::rename(partial_path_.c_str(), out_path_.c_str()) != 0)
    return ErrnoError(errno, "convert: cannot rename {} to {}", partial_path_, out_path_);
  finished_ = true;
  BC_LOG(Info, Data, "convert: wrote {} samples to {}", num_samples_, out_path_);
  return Status::Ok();
}

}  // namespace batchcast::data
