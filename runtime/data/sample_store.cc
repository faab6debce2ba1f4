// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "data/sample_store.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "core/errors.h"
#include "core/log.h"
#include "data/hdf5_lock.h"

namespace batchcast::data {
namespace {

// The blocks path of storage that is not chunked (external files, compact): rows per block.
constexpr uint64_t kUnchunkedBlockBytes = 1 << 20;
// The blocks path reads at most this many bytes per HDF5 call (a larger chunk is read in
// parts, which HDF5's own chunk cache, sized to one chunk by the reader, serves).
constexpr uint64_t kMaxBlockBytes = 64 << 20;
// Bytes compared between pread and HDF5 at the start of the first and the last block.
constexpr uint64_t kProbeBytes = 64;

// Reads exactly `length` bytes at `offset` of `fd`; a short file is an error, never a hang.
Status PreadFull(const StoreFile& f, uint64_t offset, uint64_t length, uint8_t* dst) {
  while (length > 0) {
    const ssize_t n = RetryEintr([&] {
      return ::pread(f.fd, dst, size_t(std::min<uint64_t>(length, 1ULL << 30)), off_t(offset));
    });
    if (n < 0) return ErrnoError(errno, "hdf5: cannot read {} bytes at byte {} of {}", length,
                                 offset, f.path);
    if (n == 0)
      return CorruptDataError("hdf5: {} ends before byte {}, where sample bytes were at open: "
                              "the file was truncated or replaced while it was read", f.path,
                              offset + length);
    dst += n;
    offset += uint64_t(n);
    length -= uint64_t(n);
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<ByteStore>> ByteStore::Open(const StoreFile* file, hid_t ds,
                                                   const std::string& name, uint64_t rows,
                                                   uint64_t row_bytes, int64_t cache_bytes) {
  std::unique_ptr<ByteStore> s(new ByteStore());
  s->file_ = file;
  s->name_ = name;
  s->rows_ = rows;
  s->row_bytes_ = std::max<uint64_t>(row_bytes, 1);
  s->cache_budget_ = cache_bytes;
  uint64_t total = 0;
  if (__builtin_mul_overflow(s->rows_, s->row_bytes_, &total) || total > (1ULL << 62))
    return CorruptDataError("hdf5: dataset '{}' in {} declares {} rows of {} bytes, more than a "
                            "file can hold; {}", name, file->path, rows, row_bytes,
                            kRecreateWithConvert);
  s->dataset_ = ds;
  H5Id space(H5Dget_space(ds));
  s->rank_ = H5Sget_simple_extent_ndims(space.get());
  if (s->total_bytes() == 0) {  // nothing to read: no block, no probe
    s->path_ = ReadPath::kDirect;
    return s;
  }
  H5Id dcpl(H5Dget_create_plist(ds));
  if (H5Pget_layout(dcpl.get()) == H5D_CHUNKED) {
    BC_RETURN_IF_ERROR(s->MapChunks(ds));
  } else {
    BC_RETURN_IF_ERROR(s->MapContiguous(ds));
  }
  if (s->path_ != ReadPath::kBlocks) {
    BC_RETURN_IF_ERROR(s->CheckExtents());
    BC_ASSIGN_OR_RETURN(bool agrees, s->ProbeAgainstHdf5(ds));
    if (!agrees) {
      BC_LOG(Info, Data, "hdf5: dataset '{}' of {}: its bytes are not where the chunk index "
             "says (an unusual base address?); reading it through HDF5 instead", name,
             file->path);
      s->path_ = ReadPath::kBlocks;
    }
  }
  if (s->path_ == ReadPath::kBlocks) {
    s->address_.clear();
    s->run_bytes_.clear();
    s->stored_bytes_.clear();
    s->unfiltered_.clear();
  }
  s->blocks_.assign(size_t(s->num_blocks_), nullptr);
  return s;
}

// Chunked storage. Blocks are the chunks' rows: whole chunks along the first dimension, all
// of the others (a chunking that splits a sample goes through HDF5, in blocks of whole chunk
// rows). Unfiltered chunks are read directly; gzip-only chunks no larger than a block are
// inflated by us; anything else goes through HDF5.
Status ByteStore::MapChunks(hid_t ds) {
  H5Id dcpl(H5Dget_create_plist(ds));
  hsize_t chunk[H5S_MAX_RANK] = {}, dims[H5S_MAX_RANK] = {};
  const int rank = H5Pget_chunk(dcpl.get(), H5S_MAX_RANK, chunk);
  H5Id space(H5Dget_space(ds));
  H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  if (rank < 1 || chunk[0] == 0)
    return CorruptDataError("hdf5: dataset '{}' in {} has a chunk dimension of 0; {}", name_,
                            file_->path, kRecreateWithConvert);
  block_rows_ = uint64_t(chunk[0]);
  num_blocks_ = (rows_ + block_rows_ - 1) / block_rows_;
  bool whole_rows = true;
  for (int i = 1; i < rank; ++i) whole_rows = whole_rows && chunk[i] == dims[i];
  const int filters = H5Pget_nfilters(dcpl.get());
  unsigned flags = 0, config = 0;
  size_t nvalues = 0;
  const bool gzip = filters == 1 && H5Pget_filter2(dcpl.get(), 0, &flags, &nvalues, nullptr, 0,
                                                   nullptr, &config) == H5Z_FILTER_DEFLATE;
  uint64_t block_bytes = 0;
  const bool sized = !__builtin_mul_overflow(block_rows_, row_bytes_, &block_bytes);
  if (!whole_rows || !sized || (filters != 0 && (!gzip || block_bytes > kMaxBlockBytes))) {
    path_ = ReadPath::kBlocks;
    block_rows_ = std::clamp<uint64_t>(kMaxBlockBytes / row_bytes_, 1, block_rows_);
    num_blocks_ = (rows_ + block_rows_ - 1) / block_rows_;
    return Status::Ok();
  }
  path_ = filters == 0 ? ReadPath::kDirect : ReadPath::kInflate;
  address_.resize(size_t(num_blocks_));
  stored_bytes_.resize(size_t(num_blocks_));
  unfiltered_.assign(size_t(num_blocks_), 0);
  for (uint64_t b = 0; b < num_blocks_; ++b) {
    hsize_t coord[H5S_MAX_RANK] = {hsize_t(b * block_rows_)};
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(ds, coord, &mask, &addr, &size) < 0 || addr == HADDR_UNDEF)
      return Hdf5Error(StatusCode::kCorruptData,
                       fmt::format("dataset '{}' in {} lacks chunk {} of its {}: the file is "
                                   "truncated or damaged; {}", name_, file_->path, b,
                                   num_blocks_, kRecreateWithConvert));
    unfiltered_[size_t(b)] = (mask & 1) != 0;  // the deflate filter was skipped for it
    const bool raw = path_ == ReadPath::kDirect || unfiltered_[size_t(b)];
    if (raw ? uint64_t(size) != block_bytes : size == 0)
      return CorruptDataError("hdf5: chunk {} of dataset '{}' in {} stores {} bytes where its "
                              "chunk shape holds {}{}: the file is damaged; {}", b, name_,
                              file_->path, size, block_bytes, raw ? "" : " compressed",
                              kRecreateWithConvert);
    stored_bytes_[size_t(b)] = uint64_t(size);
    if (__builtin_add_overflow(uint64_t(addr), file_->base_address, &address_[size_t(b)]))
      address_[size_t(b)] = ~0ULL;  // refused by CheckExtents
  }
  return Status::Ok();
}

// Contiguous storage in this file is one block read directly; contiguous storage in an
// external file, and compact storage, go through HDF5 in blocks of about 1 MiB.
Status ByteStore::MapContiguous(hid_t ds) {
  H5Id dcpl(H5Dget_create_plist(ds));
  block_rows_ = std::max<uint64_t>(kUnchunkedBlockBytes / row_bytes_, 1);
  num_blocks_ = (rows_ + block_rows_ - 1) / block_rows_;
  path_ = ReadPath::kBlocks;
  if (H5Pget_layout(dcpl.get()) != H5D_CONTIGUOUS || H5Pget_external_count(dcpl.get()) != 0)
    return Status::Ok();
  const haddr_t addr = H5Dget_offset(ds);  // absolute (HDF5 adds the base address)
  if (addr == HADDR_UNDEF)
    return CorruptDataError("hdf5: dataset '{}' in {} declares {} bytes but has no storage in "
                            "the file: it is damaged; {}", name_, file_->path, total_bytes(),
                            kRecreateWithConvert);
  path_ = ReadPath::kDirect;
  block_rows_ = rows_;
  num_blocks_ = 1;
  address_.assign(1, uint64_t(addr));
  stored_bytes_.assign(1, total_bytes());
  unfiltered_.assign(1, 1);
  return Status::Ok();
}

// Every block inside the file (a damaged chunk index must be refused at open, never read
// past the file's end); then, direct, the runs of adjacent blocks.
Status ByteStore::CheckExtents() {
  const uint64_t block = block_bytes();
  const uint64_t total = total_bytes();
  run_bytes_.assign(address_.size(), 0);
  for (uint64_t b = num_blocks_; b-- > 0;) {
    const uint64_t logical = std::min(block, total - b * block);  // the bytes the dataset uses
    const bool raw = path_ == ReadPath::kDirect || unfiltered_[size_t(b)];
    const uint64_t len = raw ? logical : stored_bytes_[size_t(b)];
    const uint64_t a = address_[size_t(b)];
    uint64_t end = 0;
    if (__builtin_add_overflow(a, len, &end) || end > file_->bytes)
      return CorruptDataError("hdf5: {} is damaged: chunk {} of dataset '{}' lies at bytes "
                              "[{}, {}) of a {}-byte file (truncated, or a damaged chunk "
                              "index); {}", file_->path, b, name_, a, a + len, file_->bytes,
                              kRecreateWithConvert);
    if (path_ != ReadPath::kDirect) continue;
    run_bytes_[size_t(b)] = len;
    if (b + 1 < num_blocks_ && len == block && address_[size_t(b) + 1] == end)
      run_bytes_[size_t(b)] += run_bytes_[size_t(b) + 1];
  }
  return Status::Ok();
}

// The first and the last block, read both ways, must agree: a mapping built on a wrong idea
// of HDF5's addresses falls back to HDF5 instead of serving garbage. Direct: the first bytes
// of each, through HDF5 and by pread. Inflate: each chunk's stored (compressed) bytes, by
// H5Dread_chunk and by pread, so that the mapping is checked apart from the data (a damaged
// chunk fails its own samples when read, which HDF5's deflate filter does not always do). A
// block HDF5 cannot read proves nothing and is skipped; with none compared, HDF5 reads all.
Result<bool> ByteStore::ProbeAgainstHdf5(hid_t ds) const {
  const uint64_t total = total_bytes();
  const uint64_t firsts[2] = {0, num_blocks_ - 1};
  int compared = 0;
  for (uint64_t b : firsts) {
    std::vector<uint8_t> via_hdf5, via_store;
    Status ours;
    if (path_ == ReadPath::kInflate) {
      const uint64_t stored = stored_bytes_[size_t(b)];
      via_hdf5.resize(size_t(stored));
      via_store.resize(size_t(stored));
      hsize_t coord[H5S_MAX_RANK] = {hsize_t(b * block_rows_)};
      uint32_t filters = 0;
      if (H5Dread_chunk(ds, H5P_DEFAULT, coord, &filters, via_hdf5.data()) < 0) {
        H5Eclear2(H5E_DEFAULT);
        continue;
      }
      ours = PreadFull(*file_, address_[size_t(b)], stored, via_store.data());
    } else {
      // Whole rows at the block's start: HDF5 selects rows, pread bytes.
      const uint64_t row = b * block_rows_;
      const uint64_t rows = std::min<uint64_t>((kProbeBytes + row_bytes_ - 1) / row_bytes_,
                                               rows_ - row);
      const uint64_t len = std::min<uint64_t>(rows * row_bytes_, total - row * row_bytes_);
      via_hdf5.resize(size_t(rows * row_bytes_));
      via_store.resize(static_cast<size_t>(len));
      H5Id space(H5Dget_space(ds));
      hsize_t off[H5S_MAX_RANK] = {hsize_t(row)}, count[H5S_MAX_RANK] = {hsize_t(rows)};
      hsize_t dims[H5S_MAX_RANK] = {};
      H5Sget_simple_extent_dims(space.get(), dims, nullptr);
      for (int i = 1; i < rank_; ++i) count[i] = dims[i];
      H5Id mem(H5Screate_simple(rank_, count, nullptr));
      if (H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, off, nullptr, count, nullptr) < 0 ||
          H5Dread(ds, H5T_NATIVE_UINT8, mem.get(), space.get(), H5P_DEFAULT,
                  via_hdf5.data()) < 0) {
        H5Eclear2(H5E_DEFAULT);
        continue;
      }
      via_hdf5.resize(size_t(len));
      ours = ReadDirect(row * row_bytes_, len, via_store.data());
    }
    if (!ours.ok() || via_hdf5 != via_store) return false;
    ++compared;
  }
  return compared > 0;
}

Status ByteStore::Read(uint64_t offset, uint64_t length, uint8_t* dst) const {
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, length, &end) || end > total_bytes())
    return InternalError("hdf5: bytes [{}, {}) are outside the {} bytes of dataset '{}' of {}",
                         offset, end, total_bytes(), name_, file_->path);
  if (length == 0) return Status::Ok();
  return path_ == ReadPath::kDirect ? ReadDirect(offset, length, dst)
                                    : ReadBlocks(offset, length, dst);
}

Status ByteStore::ReadDirect(uint64_t offset, uint64_t length, uint8_t* dst) const {
  const uint64_t block = block_bytes();
  while (length > 0) {
    const uint64_t b = offset / block, in = offset - b * block;
    const uint64_t n = std::min(length, run_bytes_[size_t(b)] - in);
    BC_RETURN_IF_ERROR(PreadFull(*file_, address_[size_t(b)] + in, n, dst));
    offset += n;
    dst += n;
    length -= n;
  }
  return Status::Ok();
}

Status ByteStore::ReadBlocks(uint64_t offset, uint64_t length, uint8_t* dst) const {
  const uint64_t block = block_bytes();
  while (length > 0) {
    const uint64_t b = offset / block, in = offset - b * block;
    BC_ASSIGN_OR_RETURN(auto bytes, Block(b));
    const uint64_t n = std::min(length, uint64_t(bytes->size()) - in);
    std::memcpy(dst, bytes->data() + in, size_t(n));
    offset += n;
    dst += n;
    length -= n;
  }
  return Status::Ok();
}

// Block b from the cache, or read through HDF5 (under the lock) and cached. Two threads
// that miss the same block both read it; the first to finish keeps it.
Result<std::shared_ptr<const std::vector<uint8_t>>> ByteStore::Block(uint64_t b) const {
  std::mutex& stripe = stripes_[b % stripes_.size()];
  {
    std::lock_guard lock(stripe);
    if (blocks_[size_t(b)] != nullptr) return blocks_[size_t(b)];
  }
  auto loaded = std::make_shared<std::vector<uint8_t>>();
  BC_RETURN_IF_ERROR(LoadBlock(b, loaded.get()));
  {
    std::lock_guard lock(stripe);
    if (blocks_[size_t(b)] != nullptr) return blocks_[size_t(b)];
    blocks_[size_t(b)] = loaded;
  }
  if (cached_bytes_.fetch_add(int64_t(loaded->size())) + int64_t(loaded->size()) > cache_budget_)
    Evict(b);
  return std::shared_ptr<const std::vector<uint8_t>>(std::move(loaded));
}

// Block b: inflated from the file by zlib (no lock), or read through HDF5 under the lock.
Status ByteStore::LoadBlock(uint64_t b, std::vector<uint8_t>* out) const {
  if (path_ == ReadPath::kInflate) return Inflate(b, out);
  const uint64_t first = b * block_rows_;
  const uint64_t rows = std::min(block_rows_, rows_ - first);
  out->resize(size_t(rows * row_bytes_));
  Hdf5Guard lock;
  H5Id space(H5Dget_space(dataset_));
  hsize_t dims[H5S_MAX_RANK] = {}, off[H5S_MAX_RANK] = {hsize_t(first)};
  hsize_t count[H5S_MAX_RANK] = {hsize_t(rows)};
  H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  for (int i = 1; i < rank_; ++i) count[i] = dims[i];
  H5Id mem(H5Screate_simple(rank_, count, nullptr));
  if (H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, off, nullptr, count, nullptr) < 0 ||
      H5Dread(dataset_, H5T_NATIVE_UINT8, mem.get(), space.get(), H5P_DEFAULT,
              out->data()) < 0)
    return Hdf5Error(StatusCode::kCorruptData,
                     fmt::format("cannot read rows [{}, {}) of dataset '{}' of {}", first,
                                 first + rows, name_, file_->path));
  return Status::Ok();
}

// A gzip chunk: its stored bytes by pread, inflated to exactly the chunk's bytes (a stream
// that inflates to more or less, or fails its Adler-32, is a damaged chunk). The edge chunk
// is stored whole; the block keeps the bytes the dataset uses.
Status ByteStore::Inflate(uint64_t b, std::vector<uint8_t>* out) const {
  const uint64_t chunk = block_bytes();
  const uint64_t used = std::min(chunk, total_bytes() - b * chunk);
  const uint64_t stored = stored_bytes_[size_t(b)];
  if (unfiltered_[size_t(b)]) {
    out->resize(size_t(used));
    return PreadFull(*file_, address_[size_t(b)], used, out->data());
  }
  thread_local std::vector<uint8_t> compressed;  // per thread, reused: one allocation
  compressed.resize(size_t(stored));
  BC_RETURN_IF_ERROR(PreadFull(*file_, address_[size_t(b)], stored, compressed.data()));
  out->resize(size_t(chunk));
  uLongf got = uLongf(chunk);
  const int rc = ::uncompress(out->data(), &got, compressed.data(), uLong(stored));
  if (rc != Z_OK || uint64_t(got) != chunk)
    return CorruptDataError("hdf5: chunk {} of dataset '{}' in {} does not inflate to its {} "
                            "bytes (zlib: {}, {} bytes): the file is damaged; {}", b, name_,
                            file_->path, chunk, rc == Z_OK ? "ok" : zError(rc), got,
                            kRecreateWithConvert);
  out->resize(size_t(used));
  return Status::Ok();
}

// Drops other blocks, in index order from where the last eviction stopped, until the cache
// is within its budget (readers holding a dropped block keep it until they are done).
void ByteStore::Evict(uint64_t keep) const {
  std::lock_guard lock(evict_mu_);
  for (uint64_t tries = 0; tries < num_blocks_ && cached_bytes_.load() > cache_budget_; ++tries) {
    evict_hand_ = (evict_hand_ + 1) % num_blocks_;
    if (evict_hand_ == keep) continue;
    std::shared_ptr<const std::vector<uint8_t>> dropped;
    {
      std::lock_guard s(stripes_[evict_hand_ % stripes_.size()]);
      dropped.swap(blocks_[size_t(evict_hand_)]);
    }
    if (dropped != nullptr) cached_bytes_.fetch_sub(int64_t(dropped->size()));
  }
}

}  // namespace batchcast::data
