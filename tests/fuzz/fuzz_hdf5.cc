// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// libFuzzer target: the HDF5 dataset reader (data::DatasetReader) on mutated dataset files.
// The input is written to a memfd and opened by path with the real reader, as the leader
// opens a dataset: Open (layout, metadata, labels, the layout version 2 sample index and
// chunk map, buckets), then the labels, sizes and the stored bytes of the first and the last
// samples (checked against their stored checksums), singly and as one range read. A sample
// read directly (pread at the offsets located at open) can only hold bytes of the file: one
// longer than the input is a read outside it. After every 16th input a canary (a good
// dataset the real writer made at start, layout version 2) is opened and read and must give
// its samples: a damaged file must not leave the HDF5 library or the reader in a state that
// fails or changes the next, good file (the converters and the leaders open many files in
// one process).
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset_reader.h"
#include "data/dataset_writer.h"
#include "fuzz_util.h"

namespace {

struct Canary {
  std::string path;
  std::vector<std::vector<uint8_t>> samples;
  std::vector<int64_t> labels;
};

// Five encoded samples of different lengths and labels, written once per process.
const Canary& GetCanary() {
  static const Canary canary = [] {
    using namespace batchcast;
    Canary c;
    c.path = "/tmp/bc-fuzz-hdf5-canary-" + std::to_string(getpid()) + ".h5";
    data::DatasetSpec spec;
    spec.class_names = {"a", "b", "c"};
    spec.overwrite = true;
    auto writer = data::DatasetWriter::Create(c.path, spec);
    fuzz::Check(writer.ok(), "canary: create");
    for (int i = 0; i < 5; ++i) {
      std::vector<uint8_t> bytes(size_t(100 + 37 * i));
      for (size_t j = 0; j < bytes.size(); ++j) bytes[j] = uint8_t(j * 31 + i);
      fuzz::Check((*writer)->Append(bytes, i % 3, 8 + i, 6, data::ImageEncoding::kJpeg).ok(),
                  "canary: append");
      c.samples.push_back(std::move(bytes));
      c.labels.push_back(i % 3);
    }
    fuzz::Check((*writer)->Finish().ok(), "canary: finish");
    static std::string remove_at_exit = c.path;
    std::atexit([] { ::unlink(remove_at_exit.c_str()); });
    return c;
  }();
  return canary;
}

void CheckCanary() {
  using namespace batchcast;
  const Canary& c = GetCanary();
  auto reader = data::DatasetReader::Open(c.path, data::ReaderOptions{});
  fuzz::Check(reader.ok(), "canary: a good file opens after the input");
  fuzz::Check((*reader)->info().num_samples == int64_t(c.samples.size()), "canary: sample count");
  std::vector<uint8_t> sample;
  for (size_t i = 0; i < c.samples.size(); ++i) {
    fuzz::Check((*reader)->ReadSample(int64_t(i), &sample).ok() && sample == c.samples[i] &&
                    (*reader)->VerifySample(int64_t(i), sample).ok() &&
                    (*reader)->Label(int64_t(i)) == c.labels[i],
                "canary: a good file reads its samples after the input");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // the reader turns the error stack into a Status
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace batchcast;
  static uint64_t inputs = 0;
  struct CanaryCheck {  // after the input, whichever way this function returns
    ~CanaryCheck() {
      if (++inputs % 16 == 1) CheckCanary();
    }
  } canary_check;
  fuzz::MemFile file(data, size);
  data::ReaderOptions options;
  options.chunk_cache_bytes = 1 << 20;
  auto reader = data::DatasetReader::Open(file.path(), options);
  if (!reader.ok()) return 0;
  const data::DatasetInfo& info = (*reader)->info();
  fuzz::Check(info.num_samples >= 0, "Open: sample count");
  const int64_t n = std::min<int64_t>(info.num_samples, 4);
  const bool direct = info.read_path == data::ReadPath::kDirect;
  std::vector<uint8_t> sample;
  std::vector<int64_t> picks;
  for (int64_t i = 0; i < n; ++i) picks.push_back(i);
  for (int64_t i = std::max(n, info.num_samples - 2); i < info.num_samples; ++i) picks.push_back(i);
  for (int64_t i : picks) {
    (*reader)->Label(i);
    (*reader)->OriginalWidth(i);
    (*reader)->OriginalHeight(i);
    if ((*reader)->ReadSample(i, &sample).ok()) {
      fuzz::Check(!direct || sample.size() <= size, "a direct read returned more than the file");
      (*reader)->VerifySample(i, sample).IgnoreError();  // the stored checksum, when there is one
    }
    for (int s : info.bucket_sizes)
      if ((*reader)->ReadBucketSample(s, i, &sample).ok())
        fuzz::Check(!direct || sample.size() <= size, "a direct bucket read past the file");
  }
  std::vector<std::vector<uint8_t>> range;
  (*reader)->ReadSamples(0, n, &range).IgnoreError();
  // Out of range is an error, never a read.
  fuzz::Check(!(*reader)->ReadSample(info.num_samples, &sample).ok(), "ReadSample past the end");
  return 0;
}
