// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Where one dataset of sample bytes lies and how its bytes are read (docs/dataset-format.md,
// "Reading without the HDF5 lock"). A ByteStore addresses the dataset's bytes in C order
// (sample i of a raw N x H x W x C array is bytes [i*HWC, (i+1)*HWC); a 1-D byte array is
// itself) and reads a range of them by one of three paths, decided once at open:
//
//   direct   every byte lies unfiltered in the file (contiguous storage, or chunks without a
//            filter): the file address of every chunk is looked up once, under the HDF5
//            lock (H5Dget_offset, H5Dget_chunk_info_by_coord), checked to lie inside the file
//            and against HDF5 reads; reads are then pread() calls on the reader's own
//            descriptor, from any thread, with no lock and no allocation.
//   inflate  chunks compressed with gzip alone (HDF5's deflate filter writes zlib streams):
//            each chunk's address and stored size are looked up and checked the same way;
//            a chunk is read with pread() and inflated by zlib, outside any lock, once, into a
//            cache of blocks (bounded by ReaderOptions::chunk_cache_bytes); samples are
//            copied out of their block.
//   blocks   other filters (lz4, ...) or storage HDF5 alone can find: one HDF5 read of a
//            whole chunk's rows under the lock, into the same cache. The serial section is
//            one chunk's read per chunk, not one HDF5 call per sample.
//
// Private to the data module.
#pragma once

#include <hdf5.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "batchcast/status.h"
#include "data/dataset_reader.h"
#include "data/hdf5_util.h"

namespace batchcast::data {

// The file a reader opened: its path, a read-only descriptor of its own (pread), its size
// at open and HDF5's base address (the user block's size: chunk addresses are relative to it).
struct StoreFile {
  std::string path;
  int fd = -1;
  uint64_t bytes = 0;
  uint64_t base_address = 0;
};

class ByteStore {
 public:
  // Opens dataset `ds` (named `name` in messages) of `rows` rows of `row_bytes` bytes each
  // (rank 1: bytes; rank 4: samples). Chooses the path; refuses (kCorruptData) a file whose
  // chunks lie outside it or do not hold what their dataset declares. Needs Hdf5Lock() held;
  // `file` and the dataset `ds` (which the store reads through on the blocks path) must
  // stay open while the store lives. `cache_bytes` bounds the blocks path's cache.
  static Result<std::unique_ptr<ByteStore>> Open(const StoreFile* file, hid_t ds,
                                                 const std::string& name, uint64_t rows,
                                                 uint64_t row_bytes, int64_t cache_bytes);
  ~ByteStore() = default;
  ByteStore(const ByteStore&) = delete;
  ByteStore& operator=(const ByteStore&) = delete;

  // Copies bytes [offset, offset + length) of the dataset to dst. Callers check the range
  // against total_bytes() first (a violation is kInternal here, never a read). Any thread;
  // the direct path takes no lock, the blocks path takes Hdf5Guard only to load a block.
  Status Read(uint64_t offset, uint64_t length, uint8_t* dst) const;

  ReadPath path() const { return path_; }
  uint64_t total_bytes() const { return rows_ * row_bytes_; }
  uint64_t block_bytes() const { return block_rows_ * row_bytes_; }

 private:
  ByteStore() = default;
  // Looks up every chunk's address: path_ becomes kDirect or kInflate, or stays kBlocks.
  Status MapChunks(hid_t ds);
  Status MapContiguous(hid_t ds);
  Status CheckExtents();
  Result<bool> ProbeAgainstHdf5(hid_t ds) const;
  Status Inflate(uint64_t b, std::vector<uint8_t>* out) const;
  Status ReadDirect(uint64_t offset, uint64_t length, uint8_t* dst) const;
  Status ReadBlocks(uint64_t offset, uint64_t length, uint8_t* dst) const;
  Result<std::shared_ptr<const std::vector<uint8_t>>> Block(uint64_t b) const;
  Status LoadBlock(uint64_t b, std::vector<uint8_t>* out) const;
  void Evict(uint64_t keep) const;

  const StoreFile* file_ = nullptr;
  std::string name_;
  ReadPath path_ = ReadPath::kBlocks;
  uint64_t rows_ = 0, row_bytes_ = 1, block_rows_ = 1, num_blocks_ = 0;
  int rank_ = 1;
  // Direct and inflate: each block's absolute file address. Direct: the bytes that follow it
  // contiguously in the file (adjacent chunks merged), so a sample spanning chunks is usually
  // one pread. Inflate: its stored (compressed) size, and whether the filter was skipped.
  std::vector<uint64_t> address_, run_bytes_, stored_bytes_;
  std::vector<uint8_t> unfiltered_;
  // Blocks: the dataset (the reader's; used under the lock) and the cached blocks.
  hid_t dataset_ = H5I_INVALID_HID;
  int64_t cache_budget_ = 0;
  mutable std::vector<std::shared_ptr<const std::vector<uint8_t>>> blocks_;
  mutable std::array<std::mutex, 64> stripes_;  // block b: stripes_[b % 64]
  mutable std::mutex evict_mu_;
  mutable std::atomic<int64_t> cached_bytes_{0};
  mutable uint64_t evict_hand_ = 0;  // under evict_mu_
};

}  // namespace batchcast::data
