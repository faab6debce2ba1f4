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

namespace batchcast::data {

// Called from the converting thread after each written sample (done, total).
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

struct ConvertReport {
  int64_t samples = 0;                // written
  std::vector<std::string> skipped;   // "path: cause", one per skipped file (--skip-bad)
  int64_t ignored_files = 0;          // ImageFolder files without an image extension
  int64_t stored_bytes = 0;           // sum of stored sample bytes
  std::vector<int> bucket_sizes;      // offline buckets written (empty: none)
  std::vector<int64_t> bucket_bytes;  // stored bytes per bucket (bucket_sizes order)
  double seconds = 0;
};

// Offline progressive-resizing buckets (`--buckets 96,128,160`): each sample is also
// stored pre-resized per size; `encoder` makes those images (see BucketEncoder).
struct OfflineBuckets {
  std::vector<int> sizes;         // strictly ascending; empty = no buckets
  std::string encoding = "jpeg";  // jpeg | png
  BucketEncoder encoder;          // required when sizes is not empty
};

struct IdxConvertOptions {
  std::string images_path, labels_path, out_path;
  std::string encode = "raw";  // raw | png | jpeg
  int quality = 90;            // jpeg only
  std::vector<std::string> class_names;  // empty: "0", "1", ... up to the largest label
  int threads = 0;             // 0: hardware threads
  bool compress = true;        // raw: gzip chunks
  bool overwrite = false;
  OfflineBuckets buckets;
};

struct ImageFolderConvertOptions {
  std::string root, out_path;
  int threads = 0;
  bool skip_bad = false;  // skip (and report) unreadable or corrupt images instead of failing
  bool overwrite = false;
  OfflineBuckets buckets;
};

// Fashion-MNIST's ten class names, in label order.
std::vector<std::string> FashionMnistClassNames();

Result<ConvertReport> ConvertIdx(const IdxConvertOptions& options, const ProgressFn& progress);
Result<ConvertReport> ConvertImageFolder(const ImageFolderConvertOptions& options,
                                         const ProgressFn& progress);

}  // namespace batchcast::data
