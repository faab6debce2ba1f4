// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Converters into the Batchcast HDF5 layout (docs/dataset-format.md). Encoding and header
// probing run on `threads` threads; HDF5 writes stay on the calling thread. Output is
// atomic (DatasetWriter): a failed or killed conversion never leaves a file at `out`.
// The output is identical whatever the thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "batchcast/status.h"
#include "data/dataset_writer.h"
#include "data/store_form.h"

namespace batchcast::data {

// Called from the converting thread after each written sample (done, total).
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

struct ConvertReport {
  int64_t samples = 0;                // written (0 for a check)
  std::vector<std::string> skipped;   // "path: cause", one per bad file (skipped, or found by a check)
  std::vector<std::string> ignored;   // "path: reason", ImageFolder files that are not images
  std::vector<std::string> empty_classes;  // ImageFolder class directories without an image
  int64_t stored_bytes = 0;           // sum of stored sample bytes
  std::vector<int> bucket_sizes;      // offline buckets written (empty: none)
  std::vector<int64_t> bucket_bytes;  // stored bytes per bucket (bucket_sizes order)
  int64_t chunk_samples = 0;          // samples per HDF5 chunk of `images` (pixels: about)
  int64_t chunk_bytes = 0;            // bytes per HDF5 chunk of `images`, before compression
  std::string store;                  // the stored form (--store), e.g. "decoded"
  std::string compression;            // its chunk filter ("none", "gzip:1", "lz4")
  int64_t file_bytes = 0;             // size of the written file (compressed, with metadata)
  double seconds = 0;
  // --upgrade: the source's layout version and the written one; already_current when the
  // source needed nothing (no file was written).
  int layout_from = 0, layout_to = 0;
  bool already_current = false;
};

// Offline progressive-resizing buckets (`--buckets 96,128,160`): each sample is also
// stored pre-resized per size; `encoder` makes those images (see BucketEncoder).
struct OfflineBuckets {
  std::vector<int> sizes;         // strictly ascending; empty = no buckets
  std::string encoding = "jpeg";  // jpeg | png
  BucketEncoder encoder;          // required when sizes is not empty
};

// Makes the stored pixels of one sample (pipeline::MakeStoredPixels): encoded bytes
// (channels == 0) or raw width x height x channels pixels in. Supplied by the caller, as
// BucketEncoder is (the data module links no decoder).
using StorePixelsFn = std::function<Result<StoredPixels>(
    const StoreForm& form, std::span<const uint8_t> sample, int width, int height, int channels)>;

// What `--store` asks of a conversion (docs/dataset-format.md, "Stored forms").
struct StoreOptions {
  StoreForm form;            // kBuckets: give the sizes in OfflineBuckets instead
  std::string compression;   // pixel forms: none (default) | gzip[:1-9] | lz4; zstd refused
  StorePixelsFn make_pixels; // required for decoded and resized
};

struct IdxConvertOptions {
  std::string images_path, labels_path, out_path;
  std::string encode = "raw";  // raw | png | jpeg
  int quality = 90;            // jpeg only
  std::vector<std::string> class_names;  // empty: "0", "1", ... up to the largest label
  int threads = 0;             // 0: hardware threads
  bool compress = true;        // raw: gzip chunks
  std::string compression;     // raw: none | gzip[:1-9] | lz4 (overrides compress; zstd refused)
  bool overwrite = false;
  OfflineBuckets buckets;
};

// Every file is read and its header checked before anything is decided, so that one run
// lists every bad file, ignored file and empty class at once. Bad files fail the conversion
// (nothing is written; the error lists them all) unless skip_bad; empty class directories
// fail it unless allow_empty_classes; ignored files are reported.
struct ImageFolderConvertOptions {
  std::string root, out_path;
  int threads = 0;
  bool skip_bad = false;  // skip (and report) unreadable or corrupt images instead of failing
  bool allow_empty_classes = false;  // keep class directories without images (labels unused)
  bool check_only = false;  // read and check every file, write nothing (out_path unused)
  // Convert only this many files (0: all), taken evenly across the sorted listing so that
  // every class is represented (the profiler's sample budget).
  int64_t limit = 0;
  bool overwrite = false;
  OfflineBuckets buckets;
  StoreOptions store;  // stored form of every image (default: the original bytes)
};

// Re-stores an existing Batchcast file (`convert h5 SRC --out OUT --store FORM`): every sample
// of `source` (encoded or raw) in the form asked, labels and class names kept. Bad samples
// (unreadable, failing their checksum, undecodable) fail the conversion unless skip_bad.
struct StoredConvertOptions {
  std::string source, out_path;
  int64_t limit = 0;      // convert only the first `limit` samples (0: all)
  int threads = 0;
  bool skip_bad = false;
  bool overwrite = false;
  StoreOptions store;
  OfflineBuckets buckets;
};

// Rewrites a Batchcast file in the current layout (`convert --upgrade FILE [--out OUT]`):
// layout version 1 encoded images and offline buckets (vlen, one HDF5 read under the
// process-wide lock per sample) become version 2 (bytes + index, read with pread and no
// lock). Every sample is checked against its stored checksum first (a damaged sample fails
// the upgrade, nothing is written); labels, sizes, class names, the stored form, the
// buckets and raw pixels' compression are kept; sample checksums are written (files from
// before they existed gain them). Without out_path the source is replaced atomically once
// the new file is complete. A source with nothing to upgrade is left alone
// (ConvertReport::already_current).
struct UpgradeOptions {
  std::string source;
  std::string out_path;    // "": replace `source`
  bool overwrite = false;  // replace an existing out_path
};

// Fashion-MNIST's ten class names, in label order.
std::vector<std::string> FashionMnistClassNames();

Result<ConvertReport> ConvertIdx(const IdxConvertOptions& options, const ProgressFn& progress);
Result<ConvertReport> ConvertImageFolder(const ImageFolderConvertOptions& options,
                                         const ProgressFn& progress);
Result<ConvertReport> ConvertStored(const StoredConvertOptions& options, const ProgressFn& progress);
Result<ConvertReport> ConvertUpgrade(const UpgradeOptions& options, const ProgressFn& progress);

// What in `report` (of a conversion or a check) stops a conversion with `options`: a
// message listing every bad image and empty class, one per line, with the fix; "" if none.
std::string ImageFolderProblems(const ImageFolderConvertOptions& options,
                                const ConvertReport& report);

}  // namespace batchcast::data
