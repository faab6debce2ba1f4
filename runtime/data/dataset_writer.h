// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Writes one split in the Batchcast HDF5 layout (docs/dataset-format.md), atomically:
// everything goes to "<out>.partial-<pid>", and Finish() writes the completeness marker,
// closes, fsyncs and renames it to <out>. A writer destroyed without Finish() (an error)
// removes its partial file; a killed process leaves only the partial file, which the
// reader refuses because it lacks the marker.
//
// Single-threaded: call from one thread (it holds Hdf5Lock() during each HDF5 call).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "batchcast/status.h"
#include "data/dataset_reader.h"
#include "data/image_probe.h"

namespace batchcast {
class H5Id;  // core/hdf5_util.h
}  // namespace batchcast

namespace batchcast::data {

struct ByteColumn;

struct DatasetSpec {
  SampleKind kind = SampleKind::kEncoded;
  int raw_height = 0, raw_width = 0, raw_channels = 0;  // kRaw only
  std::vector<std::string> class_names;
  bool compress = true;       // kRaw: gzip level 1 per chunk (encoded bytes are never recompressed)
  // kRaw: the chunk filter, overriding `compress` when set (docs/dataset-format.md,
  // "Compression"): none | gzip[:1-9] | lz4 (HDF5 filter 32004, Debian's hdf5-filter-plugin).
  std::string compression;
  bool overwrite = false;     // replace an existing <out>
  std::string created_by;     // provenance, stored in the root attribute
  // Offline progressive-resizing buckets (docs/dataset-format.md): every Append also
  // stores one pre-resized encoded image per size, under buckets/<size>/images.
  std::vector<int> bucket_sizes;
  std::string bucket_encoding = "jpeg";  // jpeg | png (the attribute on each bucket)
  // How the samples were stored (`--store`, e.g. "decoded", "resized:160"); written as the
  // `store` attribute of `images` when not empty.
  std::string store;
  // The layout of encoded bytes (images and buckets): 2, bytes + index, read without the
  // HDF5 lock (the default); 1, vlen, as written before version 2 existed (for compatibility
  // tests and readers older than version 2). Raw and pixel files are the same in both.
  int layout_version = 2;
};

// Makes the bucket image of one sample: encoded JPEG/PNG bytes (channels == 0) or raw
// H x W x channels pixels in, the encoded image with shorter side `size` out. Supplied by
// the caller (the converter links a decoder and a resampler; the data module does not).
using BucketEncoder = std::function<Result<std::vector<uint8_t>>(
    std::span<const uint8_t> sample, int width, int height, int channels, int size)>;

// Checks spec.compression (the message names what to use instead).
Status CheckCompression(const DatasetSpec& spec);

// "<out>.partial-<pid of this process>".
std::string PartialPath(const std::string& out_path);

class DatasetWriter {
 public:
  static Result<std::unique_ptr<DatasetWriter>> Create(const std::string& out_path,
                                                       const DatasetSpec& spec);
  ~DatasetWriter();
  DatasetWriter(const DatasetWriter&) = delete;
  DatasetWriter& operator=(const DatasetWriter&) = delete;

  // Appends one sample: encoded bytes (kEncoded; `encoding` kJpeg or kPng, width/height
  // from the header) or H*W*C pixels (kRaw). Buffered; written in batches.
  // With spec.bucket_sizes, `buckets` holds one encoded image per bucket size, in order.
  Status Append(std::span<const uint8_t> bytes, int64_t label, int width, int height,
                ImageEncoding encoding = ImageEncoding::kUnknown,
                std::span<const std::vector<uint8_t>> buckets = {});

  // Appends one sample of stored pixels (kPixels): shape.bytes() bytes, HWC; width and
  // height are the original image's.
  Status AppendPixels(std::span<const uint8_t> pixels, int64_t label, int width, int height,
                      StoredShape shape);

  // Writes labels, sizes, class names and the completeness marker, then renames.
  Status Finish();

  int64_t num_samples() const { return num_samples_; }
  const std::string& partial_path() const { return partial_path_; }
  // Stored bytes of `images` and of each bucket's images (spec.bucket_sizes order).
  int64_t images_bytes() const { return images_bytes_; }
  const std::vector<int64_t>& bucket_bytes() const { return bucket_bytes_; }
  // Samples per HDF5 chunk of `images` (raw: chosen from the sample size, about
  // kRawChunkTargetBytes per chunk; encoded version 1: kVlenChunkSamples descriptors;
  // bytes: about, from the mean sample).
  int64_t chunk_samples() const { return chunk_samples_; }
  // Bytes per HDF5 chunk of `images` before compression.
  int64_t chunk_bytes() const { return chunk_bytes_; }

 private:
  DatasetWriter() = default;
  bool Indexed() const { return spec_.layout_version >= 2; }  // encoded bytes + index
  Status CreateImages();
  Status SetCompression(int64_t dcpl) const;  // an hid_t
  Status Flush();
  Status FlushImageColumn();
  Status FlushColumn(ByteColumn& column, int64_t chunk_bytes, bool compress);
  Status CreateBuckets();
  Status FlushBuckets();
  int64_t images_id() const;  // the hid_t of `images`
  Status WriteSmallDatasets();
  Status WriteMarkerAndClose();
  void Abort();

  DatasetSpec spec_;
  std::string out_path_, partial_path_;
  std::unique_ptr<H5Id> file_, images_;  // images_: raw and version 1 encoded
  std::unique_ptr<ByteColumn> image_column_;  // pixels and version 2 encoded
  std::vector<std::unique_ptr<H5Id>> bucket_images_;       // version 1
  std::vector<std::unique_ptr<ByteColumn>> bucket_columns_;  // version 2
  std::vector<std::vector<uint8_t>> bucket_pending_bytes_;
  std::vector<std::vector<size_t>> bucket_pending_sizes_;
  std::vector<int64_t> bucket_bytes_;
  int64_t images_bytes_ = 0, bucket_flushed_ = 0;
  int64_t num_samples_ = 0, flushed_ = 0;
  int64_t chunk_samples_ = 0, chunk_bytes_ = 0;
  std::vector<int32_t> stored_widths_, stored_heights_, stored_channels_;  // kPixels
  int64_t sample_bytes_ = 0;  // raw: H*W*C
  std::vector<uint8_t> pending_bytes_;  // raw and version 1 encoded (columns hold their own)
  std::vector<size_t> pending_sizes_;
  size_t pending_unflushed_bytes_ = 0;
  std::vector<int64_t> labels_;
  std::vector<int32_t> widths_, heights_;
  std::vector<uint64_t> checksums_;  // SampleChecksum of every sample
  bool saw_jpeg_ = false, saw_png_ = false, finished_ = false;
};

}  // namespace batchcast::data
