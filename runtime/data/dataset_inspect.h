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

struct DatasetSummary {
  DatasetInfo info;
  std::vector<int64_t> class_counts;  // by label
  SizeStats width, height;            // original sizes
  int64_t file_bytes = 0;             // size of the file on disk
  int64_t stored_bytes = 0;           // sum of the stored sample bytes (uncompressed)
  uint64_t checksum = 0;
};

// Streams every sample once (blocks of ReadSamples) to compute the checksum.
Result<uint64_t> DatasetChecksum(const DatasetReader& reader, int64_t* stored_bytes = nullptr);

// 16 lowercase hex digits.
std::string FormatChecksum(uint64_t checksum);

Result<DatasetSummary> InspectDataset(const std::string& path);

// The summary as a JSON object (keys documented in docs/dataset-format.md).
std::string SummaryToJson(const DatasetSummary& summary);

}  // namespace batchcast::data
