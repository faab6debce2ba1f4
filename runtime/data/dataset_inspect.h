// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// What `batchcast inspect` reports about a dataset file, and the content checksum.
//
// Checksum (docs/dataset-format.md#checksum): XXH3-64 (xxHash 0.8, seed 0), streamed over,
// for every sample i = 0..N-1 in index order: label[i] as 8 bytes little-endian two's
// complement, the stored byte count of sample i as 8 bytes little-endian, then the stored
// bytes (encoded image bytes, or H*W*C raw pixels). It depends on content only, not on
// chunking, compression or HDF5 library version, so two users can compare files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "batchcast/status.h"
#include "data/dataset_reader.h"

namespace batchcast::data {

struct SizeStats {
  int min = 0, median = 0, max = 0;
};

// A sample that failed verification: its index and why (checksum mismatch, read error).
struct BadSample {
  int64_t index = 0;
  std::string cause;
};

struct DatasetSummary {
  DatasetInfo info;
  std::vector<int64_t> class_counts;  // by label
  SizeStats width, height;            // original sizes
  int64_t file_bytes = 0;             // size of the file on disk
  int64_t stored_bytes = 0;           // sum of the stored sample bytes (uncompressed)
  uint64_t checksum = 0;
  bool verified = false;              // every sample was checked (InspectDataset's verify)
  std::vector<BadSample> bad_samples;  // what the check found, by index
};

// Streams every sample once (blocks of ReadSamples) to compute the checksum. With `bad`,
// also checks every sample against its stored checksum (DatasetReader::VerifySample) and
// lists those that fail, or cannot be read, instead of stopping at the first.
Result<uint64_t> DatasetChecksum(const DatasetReader& reader, int64_t* stored_bytes = nullptr,
                                 std::vector<BadSample>* bad = nullptr);

// 16 lowercase hex digits.
std::string FormatChecksum(uint64_t checksum);

// With `verify`, every sample is also checked (`batchcast inspect --verify`).
Result<DatasetSummary> InspectDataset(const std::string& path, bool verify = false);

// The summary as a JSON object (keys documented in docs/dataset-format.md).
std::string SummaryToJson(const DatasetSummary& summary);

}  // namespace batchcast::data
