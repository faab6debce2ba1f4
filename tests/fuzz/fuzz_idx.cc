// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// libFuzzer target: the IDX reader (MNIST / Fashion-MNIST files, plain or gzip) on the
// bytes of one file, opened by path from a memfd as the converter opens it.
#include <cstddef>
#include <cstdint>

#include "data/idx_reader.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace batchcast;
  fuzz::MemFile file(data, size);
  auto array = data::ReadIdxFile(file.path());
  if (!array.ok()) return 0;
  size_t total = 1;
  for (int64_t d : array->dims) {
    fuzz::Check(d >= 0, "ReadIdxFile: dimension >= 0");
    total *= static_cast<size_t>(d);
  }
  fuzz::Check(total == array->data.size(), "ReadIdxFile: data is product(dims) bytes");
  return 0;
}
