// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Reader for the IDX format of MNIST and Fashion-MNIST (unsigned-byte arrays only),
// gzip-compressed (`.gz`) or plain: zlib reads both transparently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "batchcast/status.h"

namespace batchcast::data {

struct IdxArray {
  std::vector<int64_t> dims;  // e.g. {60000, 28, 28} for images, {60000} for labels
  std::vector<uint8_t> data;  // row-major, product(dims) bytes
};

// Reads the whole file. Errors name the file and the cause (missing, bad magic,
// unsupported element type, truncated, trailing bytes).
Result<IdxArray> ReadIdxFile(const std::string& path);

}  // namespace batchcast::data
