// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Reader for the Batchcast HDF5 dataset layout (docs/dataset-format.md).
//
// Thread safety: every method may be called from any number of threads at once.
// Debian's HDF5 is not thread-safe, so all HDF5 calls go through one process-wide mutex
// (Hdf5Lock()). Sample reads avoid it (docs/dataset-format.md, "Reading without the HDF5
// lock"): samples whose bytes lie unfiltered in the file (layout version 2 encoded files,
// uncompressed raw and pixel files) are located once at Open and read with pread() from any
// thread, with no lock; compressed files take the lock once per chunk; only layout version 1
// encoded files (vlen) take it for every sample.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "batchcast/status.h"

namespace batchcast::data {

enum class SampleKind {
  kEncoded,  // variable-length uint8 per sample: JPEG or PNG bytes
  kRaw,      // fixed-shape uint8 array N x H x W x C
  kPixels,   // uint8 pixels of a per-sample shape H_i x W_i x C_i (convert --store decoded|resized)
};

// The shape of one stored sample's pixels (kRaw, kPixels; all 0 for kEncoded).
struct StoredShape {
  int width = 0, height = 0, channels = 0;
  size_t bytes() const { return size_t(width) * height * channels; }
};

// How a file's samples are read (DatasetInfo::read_path): kDirect, pread() with no lock;
// kInflate, gzip chunks read with pread() and inflated by zlib once per chunk, no lock;
// kBlocks, one HDF5 read of a whole chunk under the lock (other filters, such as lz4); the
// last two copy samples from a cache of chunks; kHdf5PerSample, one HDF5 read per sample
// under the lock (layout version 1 encoded).
enum class ReadPath { kDirect, kInflate, kBlocks, kHdf5PerSample };
// "direct", "inflate", "blocks", "hdf5-per-sample".
std::string_view ReadPathName(ReadPath path);

struct DatasetInfo {
  std::string path;
  int schema_version = 0;  // the layout version (docs/dataset-format.md): 1 or 2
  SampleKind kind = SampleKind::kRaw;
  int64_t num_samples = 0;
  // For kRaw: the stored shape of every sample. For kEncoded: 0 (per-sample sizes below).
  int raw_height = 0, raw_width = 0, raw_channels = 0;
  std::vector<std::string> class_names;
  std::string encoding;  // "raw", "jpeg", "png", "mixed" or "pixels"
  // How the converter stored the samples (`--store`): "encoded", "decoded", "resized:160", ...
  // ("" for files written before the attribute existed).
  std::string store;
  // Offline progressive-resizing buckets stored in the file (ascending; empty: none).
  std::vector<int> bucket_sizes;
  // The encoding attribute of the buckets ("jpeg" or "png"; "" without buckets).
  std::string bucket_encoding;
  // The file stores per-sample checksums (dataset 'checksums'); older files do not.
  bool has_checksums = false;
  // The chunk filter of `images`: "none", "gzip:<level>", "lz4" or "filter <id>" (another
  // HDF5 filter, e.g. one h5py wrote).
  std::string compression = "none";
  // How `images` is read (the buckets of a file are read the same way).
  ReadPath read_path = ReadPath::kDirect;
  // The root attribute batchcast_created_by ("" when absent).
  std::string created_by;
};

// Nanoseconds the calling thread has waited so far for locks inside dataset readers (the
// process-wide HDF5 lock), cumulative: the pipeline reports the difference over a read as
// its own telemetry timer (lock_wait), apart from the read itself.
int64_t ThisThreadReaderLockWaitNs();

// The checksum of one sample as the layout stores it: xxh3-64 of its stored bytes (encoded
// image, or raw H*W*C pixels) with its label as the seed.
uint64_t SampleChecksum(std::span<const uint8_t> bytes, int64_t label);

struct ReaderOptions {
  // Upper bound of the HDF5 chunk cache of this reader's `images` dataset. The cache is
  // sized to min(this, the whole decompressed dataset), so a random-access epoch over a
  // compressed raw dataset decompresses each chunk once instead of once per sample.
  int64_t chunk_cache_bytes = int64_t(256) << 20;
};

class DatasetReader {
 public:
  // Opens and validates the layout; the error names the file, the dataset and the cause.
  static Result<std::shared_ptr<DatasetReader>> Open(const std::string& path);
  static Result<std::shared_ptr<DatasetReader>> Open(const std::string& path,
                                                     const ReaderOptions& options);
  virtual ~DatasetReader() = default;

  virtual const DatasetInfo& info() const = 0;
  // Labels and original sizes are read once at Open and served from memory.
  virtual int64_t Label(int64_t index) const = 0;
  virtual int OriginalWidth(int64_t index) const = 0;
  virtual int OriginalHeight(int64_t index) const = 0;
  // The shape of sample `index` as stored: the raw shape (kRaw), its own (kPixels), zeros
  // (kEncoded: its header says).
  virtual StoredShape SampleShape(int64_t index) const;

  // Copies the stored bytes of one sample into *out (resized to fit; a reused vector is not
  // reallocated once it holds the largest sample): the encoded image for kEncoded, H*W*C
  // pixels for kRaw. Errors name the file and the sample index.
  virtual Status ReadSample(int64_t index, std::vector<uint8_t>* out) const = 0;

  // Copies samples [first, first + count) (sequential scans: inspect, checksums); layout
  // version 1 encoded files read them with one HDF5 read under the lock. (*out)[i] receives
  // sample first + i. The default implementation calls ReadSample() for each.
  virtual Status ReadSamples(int64_t first, int64_t count,
                             std::vector<std::vector<uint8_t>>* out) const;

  // Checks the stored bytes of sample `index` (as ReadSample gave them) and its label
  // against the sample's stored checksum: kCorruptData naming the sample on a mismatch; Ok
  // when they match or the file has no checksums (info().has_checksums).
  virtual Status VerifySample(int64_t index, std::span<const uint8_t> bytes) const;

  // Copies the encoded pre-resized image of one sample at a stored bucket size (one of
  // info().bucket_sizes). The default (no buckets) returns kNotFound.
  virtual Status ReadBucketSample(int size, int64_t index, std::vector<uint8_t>* out) const;
};

}  // namespace batchcast::data
