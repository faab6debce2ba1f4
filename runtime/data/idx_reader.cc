// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "data/idx_reader.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include "core/errors.h"

namespace batchcast::data {
namespace {

constexpr int kIdxUnsignedByte = 0x08;
constexpr int kIdxMaxDims = 4;
constexpr int64_t kIdxMaxBytes = int64_t(1) << 34;  // 16 GiB: anything larger is a bad header
constexpr size_t kIdxReadChunk = size_t(16) << 20;    // the most the data grows by at once

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly n bytes or explains why not.
Status ReadExactly(gzFile f, const std::string& path, void* dst, size_t n, const char* what) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
    int got = gzread(f, p, chunk);
    if (got < 0) {
      int zerr = 0;
      const char* msg = gzerror(f, &zerr);
      return CorruptDataError("idx: cannot read {} of {}: {}", what, path, msg);
    }
    if (got == 0) return CorruptDataError("idx: {} is truncated while reading {}", path, what);
    p += got;
    n -= static_cast<size_t>(got);
  }
  return Status::Ok();
}

int64_t BigEndian32(const uint8_t* b) {
  return (int64_t(b[0]) << 24) | (int64_t(b[1]) << 16) | (int64_t(b[2]) << 8) | int64_t(b[3]);
}

Result<std::vector<int64_t>> ReadHeader(gzFile f, const std::string& path) {
  uint8_t magic[4];
  BC_RETURN_IF_ERROR(ReadExactly(f, path, magic, 4, "the header"));
  if (magic[0] != 0 || magic[1] != 0 || magic[3] == 0 || magic[3] > kIdxMaxDims)
    return CorruptDataError("idx: {} is not an IDX file (magic {:02x} {:02x} {:02x} {:02x})",
                            path, magic[0], magic[1], magic[2], magic[3]);
  if (magic[2] != kIdxUnsignedByte)
    return InvalidArgumentError("idx: {} has element type 0x{:02x}, only unsigned byte (0x08) "
                                "is supported", path, magic[2]);
  std::vector<int64_t> dims(magic[3]);
  int64_t total = 1;
  for (auto& d : dims) {
    uint8_t b[4];
    BC_RETURN_IF_ERROR(ReadExactly(f, path, b, 4, "the dimensions"));
    d = BigEndian32(b);
    // total <= kIdxMaxBytes (2^34) and d < 2^32: checked by division, never by an overflowing
    // product.
    if (std::max<int64_t>(d, 1) > kIdxMaxBytes / total)
      return CorruptDataError("idx: {} declares more than {} bytes of data", path, kIdxMaxBytes);
    total *= std::max<int64_t>(d, 1);
  }
  return dims;
}

}  // namespace

Result<IdxArray> ReadIdxFile(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return ErrnoError(errno, "idx: cannot open {}", path);
  if (S_ISDIR(st.st_mode)) return InvalidArgumentError("idx: {} is a directory", path);
  GzFile f(gzopen(path.c_str(), "rb"));
  if (!f) return ErrnoError(errno ? errno : ENOMEM, "idx: cannot open {}", path);
  gzbuffer(f.get(), 1 << 20);
  IdxArray out;
  BC_ASSIGN_OR_RETURN(out.dims, ReadHeader(f.get(), path));
  size_t total = 1;
  for (int64_t d : out.dims) total *= static_cast<size_t>(d);
  // The header is not trusted with memory: the data grows as it arrives (doubling, at most
  // kIdxReadChunk at a time), so a short file declaring 16 GiB fails as truncated having
  // allocated about twice what it holds, not 16 GiB.
  while (out.data.size() < total) {
    const size_t have = out.data.size();
    const size_t chunk = std::min({total - have, std::max(have, size_t(64) << 10), kIdxReadChunk});
    out.data.resize(have + chunk);
    BC_RETURN_IF_ERROR(ReadExactly(f.get(), path, out.data.data() + have, chunk, "the data"));
  }
  uint8_t extra;
  if (gzread(f.get(), &extra, 1) != 0)
    return CorruptDataError("idx: {} has bytes after the {} declared by its header", path, total);
  return out;
}

}  // namespace batchcast::data
