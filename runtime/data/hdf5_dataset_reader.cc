// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// DatasetReader for the Batchcast HDF5 layout: validates the file at Open, keeps labels,
// sizes and the sample index in memory, and reads samples through a ByteStore (pread with
// no lock, or HDF5 once per chunk; data/sample_store.h). Layout version 1 encoded files
// (vlen) are read one HDF5 read per sample under the process-wide lock, as before.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "core/errors.h"
#include "core/log.h"
#include "data/dataset_layout.h"
#include "data/dataset_reader.h"
#include "data/hdf5_lock.h"
#include "data/hdf5_util.h"
#include "data/sample_store.h"

namespace batchcast::data {
namespace {

uint64_t NextPrime(uint64_t n) {
  auto prime = [](uint64_t v) {
    if (v < 2) return false;
    for (uint64_t d = 2; d * d <= v; ++d)
      if (v % d == 0) return false;
    return true;
  };
  while (!prime(n)) ++n;
  return n;
}

// Samples whose bytes one ByteStore reads: sample i is bytes [offsets[i], offsets[i] +
// lengths[i]) of it (layout version 2 encoded images and buckets).
struct IndexedBytes {
  std::vector<uint64_t> offsets, lengths;
  std::unique_ptr<ByteStore> store;
};

class Hdf5DatasetReader final : public DatasetReader {
 public:
  ~Hdf5DatasetReader() override {
    {
      std::lock_guard lock(Hdf5Lock());
      vlen_type_.Reset();
      bucket_images_.clear();
      images_.Reset();
      file_.Reset();
    }
    if (store_file_.fd >= 0) ::close(store_file_.fd);
  }
  Status Init(const std::string& path, const ReaderOptions& options);

  const DatasetInfo& info() const override { return info_; }
  int64_t Label(int64_t index) const override { return InRange(index) ? labels_[index] : -1; }
  int OriginalWidth(int64_t index) const override { return InRange(index) ? widths_[index] : 0; }
  int OriginalHeight(int64_t index) const override {
    return InRange(index) ? heights_[index] : 0;
  }
  StoredShape SampleShape(int64_t index) const override;
  Status ReadSample(int64_t index, std::vector<uint8_t>* out) const override;
  Status ReadSamples(int64_t first, int64_t count,
                     std::vector<std::vector<uint8_t>>* out) const override;
  Status ReadBucketSample(int size, int64_t index, std::vector<uint8_t>* out) const override;
  Status VerifySample(int64_t index, std::span<const uint8_t> bytes) const override;

 private:
  Status OpenFile(const std::string& path);
  Status OpenBuckets(const ReaderOptions& options);
  Status OpenBucket(int size, const std::string& path, const ReaderOptions& options);
  bool InRange(int64_t i) const { return i >= 0 && i < info_.num_samples; }
  bool Vlen() const { return info_.kind == SampleKind::kEncoded && !indexed_; }
  Status CheckRoot();
  Status OpenImages(const ReaderOptions& options);
  void SizeChunkCache(hid_t dcpl, const ReaderOptions& options, hid_t dapl) const;
  Status LoadIndex(const std::string& group, uint64_t total_bytes, IndexedBytes* out);
  Status OpenImageStore(const ReaderOptions& options);
  Status CheckImagesType(hid_t type, hid_t space);
  Status CheckDims(bool raw, const hsize_t dims[4]) const;
  Status CheckStorage(hid_t ds, const char* name, int64_t elements, int64_t element_bytes) const;
  Status ReadEncoding();
  Result<H5Id> OpenVector(const char* name, H5T_class_t want, const char* want_name);
  Status LoadIntVector(const char* name, hid_t mem_type, void* dst);
  Status LoadClassNames();
  Status LoadMetadata();
  Status CheckLabels() const;
  Status ReadVlen(hid_t ds, int64_t first, int64_t count, std::vector<uint8_t>* outs,
                  const char* what) const;
  Status ReadIndexed(const IndexedBytes& bytes, int64_t index, std::vector<uint8_t>* out,
                     const char* what) const;
  Status LoadPixelShapes(uint64_t pixel_bytes);

  DatasetInfo info_;
  StoreFile store_file_;  // the file as the stores read it (own descriptor, size, base)
  bool indexed_ = false;  // encoded samples as bytes + index (layout version 2)
  uint64_t image_bytes_ = 0;  // bytes of a 1-D uint8 `images` (indexed encoded, pixels)
  H5Id file_, images_, vlen_type_;
  std::vector<int64_t> labels_;
  std::vector<int32_t> widths_, heights_;
  std::vector<uint64_t> checksums_;  // empty: the file has none
  // kPixels: each sample's stored shape and the offset of its first byte (N + 1 entries).
  std::vector<int32_t> stored_w_, stored_h_, stored_c_;
  std::vector<uint64_t> offsets_;
  // Every kind but version 1 encoded: how `images` is read; indexed encoded: where each
  // sample lies in it (raw samples are at i * H*W*C, pixels at offsets_).
  IndexedBytes images_bytes_;
  std::vector<H5Id> bucket_images_;   // buckets/<info_.bucket_sizes[i]>/images
  std::vector<IndexedBytes> bucket_bytes_;  // version 2: their index and store
};

Status Hdf5DatasetReader::Init(const std::string& path, const ReaderOptions& options) {
  info_.path = path;
  BC_RETURN_IF_ERROR(OpenFile(path));
  BC_RETURN_IF_ERROR(CheckRoot());
  BC_RETURN_IF_ERROR(OpenImages(options));
  BC_RETURN_IF_ERROR(LoadMetadata());
  BC_RETURN_IF_ERROR(CheckLabels());
  if (indexed_) BC_RETURN_IF_ERROR(LoadIndex("", image_bytes_, &images_bytes_));
  BC_RETURN_IF_ERROR(OpenImageStore(options));
  return OpenBuckets(options);
}

// The file for HDF5 and, once, for the stores' pread(): the descriptor is the reader's own
// (no shared file position), its size is what every chunk address is checked against.
Status Hdf5DatasetReader::OpenFile(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFoundError("hdf5: dataset file {} does not exist", path);
    return ErrnoError(errno, "hdf5: cannot access dataset file {}", path);
  }
  if (S_ISDIR(st.st_mode)) return InvalidArgumentError("hdf5: {} is a directory, not a dataset file", path);
  // Before HDF5 sees the file: HDF5 1.10 trusts the superblock's sizes and addresses.
  BC_RETURN_IF_ERROR(CheckHdf5Superblock(path));
  store_file_.path = path;
  store_file_.fd = RetryEintr([&] { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC); });
  if (store_file_.fd < 0) return ErrnoError(errno, "hdf5: cannot open dataset file {}", path);
  if (fstat(store_file_.fd, &st) != 0) return ErrnoError(errno, "hdf5: cannot stat {}", path);
  store_file_.bytes = uint64_t(st.st_size);
  file_ = H5Id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file_.valid())
    return Hdf5Error(StatusCode::kCorruptData,
                     fmt::format("cannot open {} (truncated, or left by a conversion that did "
                                 "not finish? {})", path, kRecreateWithConvert));
  // Chunk addresses are relative to HDF5's base address: the user block's end.
  H5Id fcpl(H5Fget_create_plist(file_.get()));
  hsize_t user_block = 0;
  if (fcpl.valid() && H5Pget_userblock(fcpl.get(), &user_block) >= 0)
    store_file_.base_address = uint64_t(user_block);
  return Status::Ok();
}

// Offline buckets: every member of /buckets is a size with an `images` of num_samples
// rows: vlen uint8 (layout version 1) or bytes + index (version 2). A malformed bucket fails
// Open (the file is wrong, not the request). Called from Init, under the caller's lock.
Status Hdf5DatasetReader::OpenBuckets(const ReaderOptions& options) {
  if (H5Lexists(file_.get(), layout::kBuckets, H5P_DEFAULT) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return Status::Ok();
  }
  H5Id group(H5Gopen2(file_.get(), layout::kBuckets, H5P_DEFAULT));
  H5G_info_t gi{};
  if (!group.valid() || H5Gget_info(group.get(), &gi) < 0)
    return Hdf5Error(StatusCode::kCorruptData,
                     fmt::format("'buckets' in {} is not a group; {}", info_.path,
                                 kRecreateWithConvert));
  std::vector<std::pair<int, std::string>> found;
  for (hsize_t i = 0; i < gi.nlinks && i < hsize_t(layout::kMaxBuckets); ++i) {
    char name[64] = {};
    H5Lget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof(name),
                       H5P_DEFAULT);
    char* end = nullptr;
    long size = std::strtol(name, &end, 10);
    if (end == name || *end != '\0' || size < 1 || size > 16384)
      return CorruptDataError("hdf5: 'buckets/{}' in {} is not an image size; {}", name,
                              info_.path, kRecreateWithConvert);
    found.emplace_back(int(size), name);
  }
  std::sort(found.begin(), found.end());
  for (const auto& [size, name] : found)
    BC_RETURN_IF_ERROR(OpenBucket(size, fmt::format("{}/{}", layout::kBuckets, name), options));
  return Status::Ok();
}

Status Hdf5DatasetReader::OpenBucket(int size, const std::string& group,
                                     const ReaderOptions& options) {
  const std::string path = fmt::format("{}/{}", group, layout::kImages);
  H5Id ds(H5Dopen2(file_.get(), path.c_str(), H5P_DEFAULT));
  if (!ds.valid())
    return Hdf5Error(StatusCode::kCorruptData,
                     fmt::format("cannot open dataset '{}' in {}; {}", path, info_.path,
                                 kRecreateWithConvert));
  H5Id type(H5Dget_type(ds.get()));
  H5Id space(H5Dget_space(ds.get()));
  hsize_t n = 0;
  const bool indexed = info_.schema_version >= layout::kIndexedBytesVersion;
  const bool ok_type = indexed ? H5Tget_class(type.get()) == H5T_INTEGER &&
                                     H5Tget_size(type.get()) == 1
                               : H5Tget_class(type.get()) == H5T_VLEN;
  const bool ok_shape = H5Sget_simple_extent_ndims(space.get()) == 1 &&
                        H5Sget_simple_extent_dims(space.get(), &n, nullptr) >= 0;
  if (!ok_type || !ok_shape || (!indexed && int64_t(n) != info_.num_samples))
    return CorruptDataError("hdf5: dataset '{}' in {} must be {} with {} rows, found {} with {} "
                            "rows; {}", path, info_.path,
                            indexed ? "uint8 (layout version 2: bytes + index)" : "vlen uint8",
                            indexed ? "one row per byte and " + std::to_string(info_.num_samples)
                                          + " indexed samples" : std::to_string(info_.num_samples),
                            DescribeType(type.get()), n, kRecreateWithConvert);
  if (info_.bucket_encoding.empty() && HasAttribute(ds.get(), layout::kEncodingAttr)) {
    BC_ASSIGN_OR_RETURN(info_.bucket_encoding,
                        ReadStringAttribute(ds.get(), layout::kEncodingAttr, info_.path));
  }
  IndexedBytes bytes;
  if (indexed) {
    BC_RETURN_IF_ERROR(CheckStorage(ds.get(), path.c_str(), int64_t(n), 1));
    BC_RETURN_IF_ERROR(LoadIndex(group + "/", uint64_t(n), &bytes));
    BC_ASSIGN_OR_RETURN(bytes.store, ByteStore::Open(&store_file_, ds.get(), path, uint64_t(n),
                                                     1, options.chunk_cache_bytes));
  }
  info_.bucket_sizes.push_back(size);
  bucket_images_.push_back(std::move(ds));
  bucket_bytes_.push_back(std::move(bytes));
  return Status::Ok();
}

Status Hdf5DatasetReader::ReadBucketSample(int size, int64_t index,
                                           std::vector<uint8_t>* out) const {
  auto it = std::find(info_.bucket_sizes.begin(), info_.bucket_sizes.end(), size);
  if (it == info_.bucket_sizes.end())
    return NotFoundError("hdf5: {} has no offline bucket of size {}", info_.path, size);
  if (!InRange(index))
    return OutOfRangeError("hdf5: sample {} is outside the {} samples of {}", index,
                           info_.num_samples, info_.path);
  const size_t b = size_t(it - info_.bucket_sizes.begin());
  const std::string what = fmt::format("bucket {} of sample", size);
  Status st = bucket_bytes_[b].store != nullptr
                  ? ReadIndexed(bucket_bytes_[b], index, out, what.c_str())
                  : ReadVlen(bucket_images_[b].get(), index, 1, out, what.c_str());
  return st;
}

Status Hdf5DatasetReader::CheckRoot() {
  const std::string& path = info_.path;
  if (!HasAttribute(file_.get(), layout::kSchemaAttr))
    return CorruptDataError("hdf5: {} has no '{}' attribute, so it is not a Batchcast dataset; {}",
                            path, layout::kSchemaAttr, kRecreateWithConvert);
  BC_ASSIGN_OR_RETURN(int64_t version, ReadIntAttribute(file_.get(), layout::kSchemaAttr, path));
  if (version < layout::kOldestSchemaVersion || version > layout::kSchemaVersion)
    return CorruptDataError("hdf5: {} has schema version {}, this build reads versions {} to {}; "
                            "{} (or read it with a newer Batchcast)", path, version,
                            layout::kOldestSchemaVersion, layout::kSchemaVersion,
                            kRecreateWithConvert);
  info_.schema_version = int(version);
  if (HasAttribute(file_.get(), layout::kCreatedByAttr)) {
    BC_ASSIGN_OR_RETURN(info_.created_by,
                        ReadStringAttribute(file_.get(), layout::kCreatedByAttr, path));
  }
  if (!HasAttribute(file_.get(), layout::kCompleteAttr))
    return CorruptDataError("hdf5: {} is incomplete (no '{}' attribute): the conversion that "
                            "wrote it did not finish; {}", path, layout::kCompleteAttr,
                            kRecreateWithConvert);
  return Status::Ok();
}

Status Hdf5DatasetReader::OpenImages(const ReaderOptions& options) {
  const std::string& path = info_.path;
  if (H5Lexists(file_.get(), layout::kImages, H5P_DEFAULT) <= 0)
    return CorruptDataError("hdf5: dataset 'images' is missing in {}; {}", path,
                            kRecreateWithConvert);
  H5Id dapl(H5Pcreate(H5P_DATASET_ACCESS));
  {
    H5Id probe(H5Dopen2(file_.get(), layout::kImages, H5P_DEFAULT));
    if (!probe.valid())
      return Hdf5Error(StatusCode::kCorruptData,
                       fmt::format("cannot open dataset 'images' in {}", path));
    H5Id type(H5Dget_type(probe.get()));
    H5Id space(H5Dget_space(probe.get()));
    BC_RETURN_IF_ERROR(CheckImagesType(type.get(), space.get()));
    H5Id dcpl(H5Dget_create_plist(probe.get()));
    std::string filters;
    for (int i = 0, n = H5Pget_nfilters(dcpl.get()); i < n; ++i) {  // lz4: a plugin
      unsigned flags = 0, config = 0, values[8] = {};
      size_t nvalues = 8;
      const H5Z_filter_t id =
          H5Pget_filter2(dcpl.get(), unsigned(i), &flags, &nvalues, values, 0, nullptr, &config);
      BC_RETURN_IF_ERROR(CheckFilterAvailable(int(id), fmt::format("reading {}", path)));
      filters += filters.empty() ? "" : "+";
      filters += id == H5Z_FILTER_DEFLATE ? fmt::format("gzip:{}", nvalues > 0 ? values[0] : 6)
                 : id == kLz4FilterId     ? std::string("lz4")
                                          : fmt::format("filter {}", int(id));
    }
    if (!filters.empty()) info_.compression = filters;
    SizeChunkCache(dcpl.get(), options, dapl.get());
  }  // closed before the reopen: HDF5 ignores the access plist of an already-open dataset
  images_ = H5Id(H5Dopen2(file_.get(), layout::kImages, dapl.get()));
  if (!images_.valid())
    return Hdf5Error(StatusCode::kCorruptData, fmt::format("cannot open dataset 'images' in {}", path));
  const bool raw = info_.kind == SampleKind::kRaw;
  const bool pixels = info_.kind == SampleKind::kPixels;
  BC_RETURN_IF_ERROR(CheckStorage(
      images_.get(), layout::kImages,
      raw      ? info_.num_samples * info_.raw_height * info_.raw_width * info_.raw_channels
      : pixels ? int64_t(offsets_.back())
      : indexed_ ? int64_t(image_bytes_)
               : info_.num_samples,
      Vlen() ? int64_t(sizeof(hvl_t)) : 1));
  if (HasAttribute(images_.get(), layout::kStoreAttr)) {
    BC_ASSIGN_OR_RETURN(info_.store,
                        ReadStringAttribute(images_.get(), layout::kStoreAttr, info_.path));
  }
  vlen_type_ = H5Id(H5Tvlen_create(H5T_NATIVE_UINT8));
  return ReadEncoding();
}

// HDF5's chunk cache of `images`. Byte datasets are cached by their ByteStore (whole
// chunks, decompressed once), so HDF5 keeps one chunk, for the rare chunk larger than a
// store's block. Version 1 vlen: the 16-byte heap references of the whole dataset, up to
// options.chunk_cache_bytes, ~10 hash slots per chunk (a prime, as HDF5 recommends), plain
// LRU (w0 = 0: a reference chunk read for one sample is wanted again for its neighbours).
void Hdf5DatasetReader::SizeChunkCache(hid_t dcpl, const ReaderOptions& options, hid_t dapl) const {
  if (H5Pget_layout(dcpl) != H5D_CHUNKED) return;
  hsize_t chunk[4] = {1, 1, 1, 1};
  H5Pget_chunk(dcpl, 4, chunk);
  const int64_t elem = Vlen() ? int64_t(sizeof(hvl_t)) : 1;
  uint64_t chunk_elems = 1;  // 64-bit, saturating: chunk dimensions come from the file
  for (hsize_t c : chunk)
    if (__builtin_mul_overflow(chunk_elems, uint64_t(c), &chunk_elems)) chunk_elems = 1ULL << 40;
  const int64_t chunk_bytes = int64_t(std::min<uint64_t>(chunk_elems, 1ULL << 40)) * elem;
  if (!Vlen()) {
    H5Pset_chunk_cache(dapl, 101, size_t(std::min(chunk_bytes, options.chunk_cache_bytes)), 1.0);
    return;
  }
  int64_t all = 0;
  if (__builtin_mul_overflow(elem, info_.num_samples, &all) ||
      __builtin_add_overflow(all, chunk_bytes, &all))
    all = options.chunk_cache_bytes;
  const int64_t want = std::max(std::min(options.chunk_cache_bytes, all), chunk_bytes);
  const int64_t chunks = std::max<int64_t>(want / std::max<int64_t>(chunk_bytes, 1), 1);
  H5Pset_chunk_cache(dapl, NextPrime(uint64_t(chunks) * 10 + 1), size_t(want), 0.0);
}

// Layout version 2 encoded bytes: sample i's offset and length in a `images` of
// `total_bytes` bytes, from <group>sample_offsets and <group>sample_lengths. Every sample
// must lie inside `images`: a damaged index is refused here, never read out of bounds.
Status Hdf5DatasetReader::LoadIndex(const std::string& group, uint64_t total_bytes,
                                    IndexedBytes* out) {
  const size_t n = size_t(info_.num_samples);
  const std::string off_name = group + layout::kSampleOffsets;
  const std::string len_name = group + layout::kSampleLengths;
  out->offsets.resize(n);
  out->lengths.resize(n);
  BC_RETURN_IF_ERROR(LoadIntVector(off_name.c_str(), H5T_NATIVE_UINT64, out->offsets.data()));
  BC_RETURN_IF_ERROR(LoadIntVector(len_name.c_str(), H5T_NATIVE_UINT64, out->lengths.data()));
  for (size_t i = 0; i < n; ++i) {
    const uint64_t off = out->offsets[i], len = out->lengths[i];
    uint64_t end = 0;
    const bool wraps = __builtin_add_overflow(off, len, &end);
    if (!wraps && end <= total_bytes && len <= layout::kMaxEncodedSampleBytes) continue;
    const std::string why =
        wraps ? std::string("past 2^64")
        : len > layout::kMaxEncodedSampleBytes
            ? fmt::format("more than the {} bytes a sample may have",
                          layout::kMaxEncodedSampleBytes)
            : fmt::format("past the end of the dataset, which holds {} bytes", total_bytes);
    return CorruptDataError("hdf5: the index of {}images in {} puts sample {} at bytes [{}, {} + "
                            "{}), {}: the sample index is damaged; {}", group, info_.path, i,
                            off, off, len, why, kRecreateWithConvert);
  }
  return Status::Ok();
}

// How `images` is read (every kind but version 1 encoded), and the one INFO line that tells
// the owner of a version 1 encoded file how to make it fast.
Status Hdf5DatasetReader::OpenImageStore(const ReaderOptions& options) {
  if (Vlen()) {
    info_.read_path = ReadPath::kHdf5PerSample;
    BC_LOG(Info, Data, "hdf5: {} stores encoded samples in layout version 1 (vlen), so every "
           "sample read takes the process-wide HDF5 lock; `batchcast convert --upgrade {}` "
           "rewrites it in layout version 2, read without the lock", info_.path, info_.path);
    return Status::Ok();
  }
  uint64_t rows = 0, row_bytes = 1;
  if (info_.kind == SampleKind::kRaw) {
    rows = uint64_t(info_.num_samples);
    row_bytes = uint64_t(info_.raw_height) * uint64_t(info_.raw_width) * uint64_t(info_.raw_channels);
  } else {
    rows = info_.kind == SampleKind::kPixels ? offsets_.back() : image_bytes_;
  }
  BC_ASSIGN_OR_RETURN(images_bytes_.store,
                      ByteStore::Open(&store_file_, images_.get(), layout::kImages, rows,
                                      row_bytes, options.chunk_cache_bytes));
  info_.read_path = images_bytes_.store->path();
  return Status::Ok();
}

Status Hdf5DatasetReader::CheckImagesType(hid_t type, hid_t space) {
  const std::string& path = info_.path;
  const bool u8 = H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) == 1 &&
                  H5Tget_sign(type) == H5T_SGN_NONE;
  bool vlen_u8 = false;
  if (H5Tget_class(type) == H5T_VLEN && H5Tis_variable_str(type) <= 0) {
    H5Id base(H5Tget_super(type));
    vlen_u8 = H5Tget_class(base.get()) == H5T_INTEGER && H5Tget_size(base.get()) == 1 &&
              H5Tget_sign(base.get()) == H5T_SGN_NONE;
  }
  if (!u8 && !vlen_u8)
    return CorruptDataError("hdf5: dataset 'images' in {} has dtype {}, expected uint8 or vlen "
                            "uint8; {}", path, DescribeType(type), kRecreateWithConvert);
  int rank = H5Sget_simple_extent_ndims(space);
  hsize_t dims[4] = {0, 0, 0, 0};
  if (rank >= 1 && rank <= 4) H5Sget_simple_extent_dims(space, dims, nullptr);
  if (u8 && rank == 1) image_bytes_ = uint64_t(dims[0]);
  const bool has_index = H5Lexists(file_.get(), layout::kSampleOffsets, H5P_DEFAULT) > 0;
  H5Eclear2(H5E_DEFAULT);
  const bool version2 = info_.schema_version >= layout::kIndexedBytesVersion;
  if (u8 && rank == 1 && has_index && version2) {  // encoded bytes + index (version 2)
    info_.kind = SampleKind::kEncoded;
    indexed_ = true;
    BC_ASSIGN_OR_RETURN(H5Id ds, OpenVector(layout::kSampleOffsets, H5T_INTEGER, "uint64"));
    H5Id offsets_space(H5Dget_space(ds.get()));
    info_.num_samples = H5Sget_simple_extent_npoints(offsets_space.get());
    if (info_.num_samples < 0 || info_.num_samples > layout::kMaxSamples)
      return CorruptDataError("hdf5: dataset '{}' in {} declares {} samples; {}",
                              layout::kSampleOffsets, path, info_.num_samples,
                              kRecreateWithConvert);
    return Status::Ok();
  }
  if (u8 && rank == 1) {  // stored pixels of per-sample shapes (--store decoded|resized)
    info_.kind = SampleKind::kPixels;
    return LoadPixelShapes(uint64_t(dims[0]));
  }
  if (vlen_u8 && version2)
    return CorruptDataError("hdf5: dataset 'images' in {} is vlen uint8 (layout version 1) but "
                            "the file says layout version {}, where encoded samples are uint8 "
                            "bytes with '{}' and '{}'; {}", path, info_.schema_version,
                            layout::kSampleOffsets, layout::kSampleLengths, kRecreateWithConvert);
  BC_RETURN_IF_ERROR(CheckDims(u8, dims));
  if (vlen_u8 && rank != 1)
    return CorruptDataError("hdf5: dataset 'images' in {} (vlen uint8) has rank {}, expected 1 "
                            "(one encoded image per sample); {}", path, rank, kRecreateWithConvert);
  if (u8 && (rank != 4 || dims[1] == 0 || dims[2] == 0 || dims[3] == 0))
    return CorruptDataError("hdf5: dataset 'images' in {} (uint8) has rank {}, expected 4 "
                            "(N x H x W x C with H, W, C > 0) or 1 (stored pixels); {}", path,
                            rank, kRecreateWithConvert);
  info_.kind = u8 ? SampleKind::kRaw : SampleKind::kEncoded;
  info_.num_samples = int64_t(dims[0]);
  if (u8) {
    info_.raw_height = int(dims[1]);
    info_.raw_width = int(dims[2]);
    info_.raw_channels = int(dims[3]);
  }
  return Status::Ok();
}

// Every dimension is checked before it is used as an int or a size: a corrupt or crafted
// header must not overflow a size computation, allocate terabytes or scan for hours.
Status Hdf5DatasetReader::CheckDims(bool raw, const hsize_t dims[4]) const {
  if (dims[0] > hsize_t(layout::kMaxSamples))
    return CorruptDataError("hdf5: dataset 'images' in {} declares {} samples, more than the "
                            "{} a file may hold; {}", info_.path, dims[0], layout::kMaxSamples,
                            kRecreateWithConvert);
  if (!raw) return Status::Ok();
  if (dims[1] > hsize_t(layout::kMaxRawSide) || dims[2] > hsize_t(layout::kMaxRawSide) ||
      dims[3] > 4)
    return CorruptDataError("hdf5: dataset 'images' in {} declares raw samples of {}x{}x{}; "
                            "at most {}x{}x4 are allowed; {}", info_.path, dims[1], dims[2],
                            dims[3], layout::kMaxRawSide, layout::kMaxRawSide,
                            kRecreateWithConvert);
  return Status::Ok();
}

// The stored data must cover what the dataspace declares: a file whose dimensions claim
// more than it stores is truncated or corrupt (and reading it would return fill values).
Status Hdf5DatasetReader::CheckStorage(hid_t ds, const char* name, int64_t elements,
                                       int64_t element_bytes) const {
  if (elements == 0) return Status::Ok();
  H5Id dcpl(H5Dget_create_plist(ds));
  H5Id space(H5Dget_space(ds));
  const H5D_layout_t kind = H5Pget_layout(dcpl.get());
  if (kind == H5D_CHUNKED) {
    hsize_t chunk[4] = {1, 1, 1, 1}, dims[4] = {1, 1, 1, 1}, nchunks = 0;
    const int rank = H5Pget_chunk(dcpl.get(), 4, chunk);
    H5Sget_simple_extent_dims(space.get(), dims, nullptr);
    uint64_t expected = 1;  // chunks the dataspace needs (each dimension rounded up)
    for (int i = 0; i < rank && i < 4; ++i) {
      if (chunk[i] == 0) return CorruptDataError("hdf5: dataset '{}' in {} has a chunk "
                                                 "dimension of 0; {}", name, info_.path,
                                                 kRecreateWithConvert);
      if (__builtin_mul_overflow(expected, (dims[i] + chunk[i] - 1) / chunk[i], &expected))
        expected = ~0ULL;
    }
    if (H5Dget_num_chunks(ds, space.get(), &nchunks) < 0)
      return Hdf5Error(StatusCode::kCorruptData,
                       fmt::format("cannot count the chunks of dataset '{}' in {}", name, info_.path));
    if (nchunks < expected)
      return CorruptDataError("hdf5: dataset '{}' in {} stores {} of the {} chunks its {} "
                              "elements need: the file is truncated or its dimensions are "
                              "corrupt; {}", name, info_.path, nchunks, expected, elements,
                              kRecreateWithConvert);
    return Status::Ok();
  }
  if (kind == H5D_CONTIGUOUS) {
    const uint64_t stored = H5Dget_storage_size(ds);
    uint64_t need = 0;
    if (__builtin_mul_overflow(uint64_t(elements), uint64_t(element_bytes), &need) || stored < need)
      return CorruptDataError("hdf5: dataset '{}' in {} stores {} bytes but its {} elements need "
                              "{}: the file is truncated or its dimensions are corrupt; {}", name,
                              info_.path, stored, elements, need, kRecreateWithConvert);
  }
  return Status::Ok();
}

Status Hdf5DatasetReader::ReadEncoding() {
  const bool raw = info_.kind == SampleKind::kRaw;
  const bool pixels = info_.kind == SampleKind::kPixels;
  if (!HasAttribute(images_.get(), layout::kEncodingAttr)) {
    // The decoder sniffs each encoded sample's magic bytes.
    info_.encoding = raw ? "raw" : pixels ? layout::kPixelsEncoding : "mixed";
    return Status::Ok();
  }
  BC_ASSIGN_OR_RETURN(info_.encoding,
                      ReadStringAttribute(images_.get(), layout::kEncodingAttr, info_.path));
  const std::string& e = info_.encoding;
  bool ok = raw      ? e == "raw"
            : pixels ? e == layout::kPixelsEncoding
                     : (e == "jpeg" || e == "png" || e == "mixed");
  if (!ok)
    return CorruptDataError("hdf5: dataset 'images' in {} has encoding '{}', expected {}; {}",
                            info_.path, e,
                            raw      ? "'raw' for uint8 pixels"
                            : pixels ? "'pixels' for 1-D stored pixels"
                                     : "jpeg, png or mixed",
                            kRecreateWithConvert);
  return Status::Ok();
}

Result<H5Id> Hdf5DatasetReader::OpenVector(const char* name, H5T_class_t want,
                                           const char* want_name) {
  const std::string& path = info_.path;
  if (H5Lexists(file_.get(), name, H5P_DEFAULT) <= 0)
    return CorruptDataError("hdf5: dataset '{}' is missing in {}; {}", name, path,
                            kRecreateWithConvert);
  H5Id ds(H5Dopen2(file_.get(), name, H5P_DEFAULT));
  if (!ds.valid())
    return Hdf5Error(StatusCode::kCorruptData, fmt::format("cannot open dataset '{}' in {}", name, path));
  H5Id type(H5Dget_type(ds.get()));
  if (H5Tget_class(type.get()) != want)
    return CorruptDataError("hdf5: dataset '{}' in {} has dtype {}, expected {}; {}", name, path,
                            DescribeType(type.get()), want_name, kRecreateWithConvert);
  H5Id space(H5Dget_space(ds.get()));
  int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank != 1)
    return CorruptDataError("hdf5: dataset '{}' in {} has rank {}, expected 1; {}", name, path,
                            rank, kRecreateWithConvert);
  return ds;
}

Status Hdf5DatasetReader::LoadIntVector(const char* name, hid_t mem_type, void* dst) {
  BC_ASSIGN_OR_RETURN(H5Id ds, OpenVector(name, H5T_INTEGER, "an integer type (int64/int32)"));
  H5Id space(H5Dget_space(ds.get()));
  int64_t n = H5Sget_simple_extent_npoints(space.get());
  if (n != info_.num_samples)
    return CorruptDataError("hdf5: dataset '{}' in {} has {} entries but 'images' has {}; {}",
                            name, info_.path, n, info_.num_samples, kRecreateWithConvert);
  H5Id type(H5Dget_type(ds.get()));
  BC_RETURN_IF_ERROR(CheckStorage(ds.get(), name, n, int64_t(H5Tget_size(type.get()))));
  if (n > 0 && H5Dread(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0)
    return Hdf5Error(StatusCode::kCorruptData,
                     fmt::format("cannot read dataset '{}' in {}", name, info_.path));
  return Status::Ok();
}

Status Hdf5DatasetReader::LoadClassNames() {
  BC_ASSIGN_OR_RETURN(H5Id ds, OpenVector(layout::kClassNames, H5T_STRING, "strings"));
  H5Id space(H5Dget_space(ds.get()));
  H5Id file_type(H5Dget_type(ds.get()));
  const int64_t n = H5Sget_simple_extent_npoints(space.get());
  const bool variable = H5Tis_variable_str(file_type.get()) > 0;
  const size_t width = variable ? 0 : H5Tget_size(file_type.get());
  H5Id mem(H5Tcopy(H5T_C_S1));
  H5Tset_size(mem.get(), variable ? H5T_VARIABLE : width);
  H5Tset_cset(mem.get(), H5Tget_cset(file_type.get()));  // HDF5 converts no ASCII <-> UTF-8
  std::vector<char*> names(variable ? size_t(n) : 0, nullptr);
  std::vector<char> fixed(variable ? 0 : size_t(n) * width);
  void* dst = variable ? static_cast<void*>(names.data()) : static_cast<void*>(fixed.data());
  if (n > 0 && H5Dread(ds.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0)
    return Hdf5Error(StatusCode::kCorruptData,
                     fmt::format("cannot read dataset 'class_names' in {}", info_.path));
  for (int64_t i = 0; i < n; ++i) {
    if (variable) {
      info_.class_names.emplace_back(names[size_t(i)] ? names[size_t(i)] : "");
    } else {
      const char* p = fixed.data() + size_t(i) * width;
      info_.class_names.emplace_back(p, strnlen(p, width));
    }
  }
  if (variable && n > 0) H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, names.data());
  return Status::Ok();
}

Status Hdf5DatasetReader::LoadMetadata() {
  const size_t n = size_t(info_.num_samples);
  labels_.resize(n);
  widths_.resize(n);
  heights_.resize(n);
  BC_RETURN_IF_ERROR(LoadIntVector(layout::kLabels, H5T_NATIVE_INT64, labels_.data()));
  BC_RETURN_IF_ERROR(LoadIntVector(layout::kWidths, H5T_NATIVE_INT32, widths_.data()));
  BC_RETURN_IF_ERROR(LoadIntVector(layout::kHeights, H5T_NATIVE_INT32, heights_.data()));
  if (H5Lexists(file_.get(), layout::kChecksums, H5P_DEFAULT) > 0) {
    checksums_.resize(n);
    BC_RETURN_IF_ERROR(LoadIntVector(layout::kChecksums, H5T_NATIVE_UINT64, checksums_.data()));
    info_.has_checksums = true;
  } else {
    H5Eclear2(H5E_DEFAULT);
  }
  return LoadClassNames();
}

Status Hdf5DatasetReader::CheckLabels() const {
  const int64_t classes = int64_t(info_.class_names.size());
  for (size_t i = 0; i < labels_.size(); ++i) {
    if (labels_[i] < 0 || labels_[i] >= classes)
      return CorruptDataError("hdf5: dataset 'labels' in {} has labels[{}] = {}, outside the {} "
                              "classes of 'class_names'; {}", info_.path, i, labels_[i], classes,
                              kRecreateWithConvert);
    if (widths_[i] <= 0 || heights_[i] <= 0)
      return CorruptDataError("hdf5: sample {} in {} has original size {}x{}; {}", i, info_.path,
                              widths_[i], heights_[i], kRecreateWithConvert);
  }
  return Status::Ok();
}

// Version 1: samples [first, first + count) of the vlen dataset `ds`, one HDF5 read under
// the lock (HDF5 allocates each sample's bytes; they are copied and reclaimed).
Status Hdf5DatasetReader::ReadVlen(hid_t ds, int64_t first, int64_t count,
                                   std::vector<uint8_t>* outs, const char* what) const {
  if (first < 0 || count < 0 || first + count > info_.num_samples)
    return OutOfRangeError("hdf5: samples [{}, {}) are outside the {} samples of {}", first,
                           first + count, info_.num_samples, info_.path);
  std::vector<hvl_t> vl(size_t(count), hvl_t{0, nullptr});
  Hdf5Guard lock;
  H5Id space(H5Dget_space(ds));
  const hsize_t start[1] = {hsize_t(first)}, n[1] = {hsize_t(count)};
  H5Id mem(H5Screate_simple(1, n, nullptr));
  if (H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, n, nullptr) < 0 ||
      H5Dread(ds, vlen_type_.get(), mem.get(), space.get(), H5P_DEFAULT, vl.data()) < 0)
    return Hdf5Error(StatusCode::kCorruptData,
                     fmt::format("cannot read {} {} of {}", what, first, info_.path));
  Status st;
  for (int64_t i = 0; i < count; ++i) {
    const auto* p = static_cast<const uint8_t*>(vl[size_t(i)].p);
    outs[i].assign(p, p + vl[size_t(i)].len);
    if (vl[size_t(i)].len == 0 && st.ok())
      st = CorruptDataError("hdf5: {} {} in {} is empty (0 bytes); {}", what, first + i,
                            info_.path, kRecreateWithConvert);
  }
  H5Dvlen_reclaim(vlen_type_.get(), mem.get(), H5P_DEFAULT, vl.data());
  return st;
}

// Version 2: sample `index` of indexed bytes, read by their store (no lock when direct).
Status Hdf5DatasetReader::ReadIndexed(const IndexedBytes& bytes, int64_t index,
                                      std::vector<uint8_t>* out, const char* what) const {
  const uint64_t len = bytes.lengths[size_t(index)];
  if (len == 0)
    return CorruptDataError("hdf5: {} {} in {} is empty (0 bytes); {}", what, index, info_.path,
                            kRecreateWithConvert);
  out->resize(size_t(len));
  Status st = bytes.store->Read(bytes.offsets[size_t(index)], len, out->data());
  if (!st.ok()) return st.WithContext(fmt::format("{} {}", what, index));
  return Status::Ok();
}

Status Hdf5DatasetReader::VerifySample(int64_t index, std::span<const uint8_t> bytes) const {
  if (checksums_.empty() || !InRange(index)) return Status::Ok();
  const uint64_t want = checksums_[size_t(index)];
  const uint64_t got = SampleChecksum(bytes, labels_[size_t(index)]);
  if (got == want) return Status::Ok();
  return CorruptDataError("hdf5: sample {} of {} fails its checksum (stored {:016x}, computed "
                          "{:016x} over its {} bytes and label {}): the sample or its label "
                          "changed after conversion; {}", index, info_.path, want, got,
                          bytes.size(), labels_[size_t(index)], kRecreateWithConvert);
}

// The per-sample shapes of stored pixels, read at Open (before LoadMetadata, which needs
// num_samples): every shape positive and bounded, their bytes adding up to `pixel_bytes`.
Status Hdf5DatasetReader::LoadPixelShapes(uint64_t pixel_bytes) {
  {
    BC_ASSIGN_OR_RETURN(H5Id ds, OpenVector(layout::kStoredWidths, H5T_INTEGER, "int32"));
    H5Id space(H5Dget_space(ds.get()));
    info_.num_samples = H5Sget_simple_extent_npoints(space.get());
  }
  if (info_.num_samples < 0 || info_.num_samples > layout::kMaxSamples)
    return CorruptDataError("hdf5: dataset '{}' in {} declares {} samples; {}",
                            layout::kStoredWidths, info_.path, info_.num_samples,
                            kRecreateWithConvert);
  const size_t n = size_t(info_.num_samples);
  stored_w_.resize(n);
  stored_h_.resize(n);
  stored_c_.resize(n);
  BC_RETURN_IF_ERROR(LoadIntVector(layout::kStoredWidths, H5T_NATIVE_INT32, stored_w_.data()));
  BC_RETURN_IF_ERROR(LoadIntVector(layout::kStoredHeights, H5T_NATIVE_INT32, stored_h_.data()));
  BC_RETURN_IF_ERROR(LoadIntVector(layout::kStoredChannels, H5T_NATIVE_INT32, stored_c_.data()));
  offsets_.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const int w = stored_w_[i], h = stored_h_[i], c = stored_c_[i];
    if (w <= 0 || h <= 0 || w > layout::kMaxRawSide || h > layout::kMaxRawSide ||
        (c != 1 && c != 3 && c != 4))
      return CorruptDataError("hdf5: sample {} in {} has stored shape {}x{}x{} (W x H x C), "
                              "expected sides in [1, {}] and 1, 3 or 4 channels; {}", i,
                              info_.path, w, h, c, layout::kMaxRawSide, kRecreateWithConvert);
    offsets_[i + 1] = offsets_[i] + uint64_t(w) * uint64_t(h) * uint64_t(c);
  }
  if (offsets_[n] != pixel_bytes)
    return CorruptDataError("hdf5: dataset 'images' in {} holds {} bytes but the stored shapes "
                            "of its {} samples add up to {}; {}", info_.path, pixel_bytes, n,
                            offsets_[n], kRecreateWithConvert);
  return Status::Ok();
}

StoredShape Hdf5DatasetReader::SampleShape(int64_t index) const {
  if (info_.kind != SampleKind::kPixels || !InRange(index))
    return DatasetReader::SampleShape(index);
  const size_t i = size_t(index);
  return StoredShape{stored_w_[i], stored_h_[i], stored_c_[i]};
}

Status Hdf5DatasetReader::ReadSample(int64_t index, std::vector<uint8_t>* out) const {
  if (!InRange(index))
    return OutOfRangeError("hdf5: sample {} is outside the {} samples of {}", index,
                           info_.num_samples, info_.path);
  if (Vlen()) return ReadVlen(images_.get(), index, 1, out, "sample");
  if (indexed_) return ReadIndexed(images_bytes_, index, out, "sample");
  uint64_t offset = 0, length = 0;
  if (info_.kind == SampleKind::kPixels) {
    offset = offsets_[size_t(index)];
    length = offsets_[size_t(index) + 1] - offset;
  } else {
    length = uint64_t(info_.raw_height) * uint64_t(info_.raw_width) * uint64_t(info_.raw_channels);
    offset = uint64_t(index) * length;
  }
  out->resize(size_t(length));
  Status st = images_bytes_.store->Read(offset, length, out->data());
  if (!st.ok()) return st.WithContext(fmt::format("sample {}", index));
  return Status::Ok();
}

Status Hdf5DatasetReader::ReadSamples(int64_t first, int64_t count,
                                      std::vector<std::vector<uint8_t>>* out) const {
  if (!Vlen()) return DatasetReader::ReadSamples(first, count, out);
  out->resize(size_t(std::max<int64_t>(count, 0)));
  return ReadVlen(images_.get(), first, count, out->data(), "sample");
}

}  // namespace

Status DatasetReader::ReadSamples(int64_t first, int64_t count,
                                  std::vector<std::vector<uint8_t>>* out) const {
  out->resize(size_t(std::max<int64_t>(count, 0)));
  for (int64_t i = 0; i < count; ++i) BC_RETURN_IF_ERROR(ReadSample(first + i, &(*out)[size_t(i)]));
  return Status::Ok();
}

uint64_t SampleChecksum(std::span<const uint8_t> bytes, int64_t label) {
  return uint64_t(XXH3_64bits_withSeed(bytes.data(), bytes.size(), uint64_t(label)));
}

std::string_view ReadPathName(ReadPath path) {
  switch (path) {
    case ReadPath::kDirect: return "direct";
    case ReadPath::kInflate: return "inflate";
    case ReadPath::kBlocks: return "blocks";
    case ReadPath::kHdf5PerSample: return "hdf5-per-sample";
  }
  return "unknown";
}

int64_t ThisThreadReaderLockWaitNs() { return ThisThreadHdf5LockTimes().wait_ns; }

StoredShape DatasetReader::SampleShape(int64_t) const {
  const DatasetInfo& i = info();
  if (i.kind != SampleKind::kRaw) return StoredShape{};
  return StoredShape{i.raw_width, i.raw_height, i.raw_channels};
}

Status DatasetReader::VerifySample(int64_t, std::span<const uint8_t>) const {
  return Status::Ok();
}

Status DatasetReader::ReadBucketSample(int size, int64_t, std::vector<uint8_t>*) const {
  return NotFoundError("dataset {} has no offline bucket of size {}", info().path, size);
}

Result<std::shared_ptr<DatasetReader>> DatasetReader::Open(const std::string& path) {
  return Open(path, ReaderOptions{});
}

Result<std::shared_ptr<DatasetReader>> DatasetReader::Open(const std::string& path,
                                                           const ReaderOptions& options) {
  Hdf5Init();
  auto reader = std::make_shared<Hdf5DatasetReader>();
  std::lock_guard lock(Hdf5Lock());
  Status st = reader->Init(path, options);
  if (!st.ok()) {
    BC_LOG(Debug, Data, "{}", st.message());
    return st;
  }
  const DatasetInfo& info = reader->info();
  BC_LOG(Info, Data, "opened {}: {} samples, encoding {}, {} classes, layout version {}, "
         "read path {}", path, info.num_samples, info.encoding, info.class_names.size(),
         info.schema_version, ReadPathName(info.read_path));
  return std::shared_ptr<DatasetReader>(std::move(reader));
}

}  // namespace batchcast::data
