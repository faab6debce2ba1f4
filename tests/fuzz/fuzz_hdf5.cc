// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// libFuzzer target: the HDF5 dataset reader (data::DatasetReader) on mutated dataset files.
// The input is written to a memfd and opened by path with the real reader, as the leader
// opens a dataset: Open (layout, metadata, labels, buckets), then the labels, sizes and
// the stored bytes of a few samples (checked against their stored checksums), singly and as
// one range read.
#include <hdf5.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/dataset_reader.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // the reader turns the error stack into a Status
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace batchcast;
  fuzz::MemFile file(data, size);
  data::ReaderOptions options;
  options.chunk_cache_bytes = 1 << 20;
  auto reader = data::DatasetReader::Open(file.path(), options);
  if (!reader.ok()) return 0;
  const data::DatasetInfo& info = (*reader)->info();
  fuzz::Check(info.num_samples >= 0, "Open: sample count");
  const int64_t n = std::min<int64_t>(info.num_samples, 4);
  std::vector<uint8_t> sample;
  for (int64_t i = 0; i < n; ++i) {
    (*reader)->Label(i);
    (*reader)->OriginalWidth(i);
    (*reader)->OriginalHeight(i);
    if ((*reader)->ReadSample(i, &sample).ok())
      (*reader)->VerifySample(i, sample).IgnoreError();  // the stored checksum, when there is one
    for (int s : info.bucket_sizes) (*reader)->ReadBucketSample(s, i, &sample).IgnoreError();
  }
  std::vector<std::vector<uint8_t>> range;
  (*reader)->ReadSamples(0, n, &range).IgnoreError();
  // Out of range is an error, never a read.
  fuzz::Check(!(*reader)->ReadSample(info.num_samples, &sample).ok(), "ReadSample past the end");
  return 0;
}
