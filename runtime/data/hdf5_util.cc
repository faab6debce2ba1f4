// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "data/hdf5_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "data/hdf5_lock.h"

namespace batchcast::data {

// ------------------------------------------------------------------ superblock check
// The layouts are those of the HDF5 file format specification (superblock versions 0-3,
// version 1 and 2 object header prefixes, the driver information block). Every address is
// relative to the superblock; HDF5 rebases a file whose stored base address differs.
namespace {

constexpr uint8_t kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
constexpr uint64_t kUndefined = UINT64_MAX;     // an address with every bit set
constexpr uint64_t kTooLarge = UINT64_MAX - 1;  // an address that needs more than 64 bits
constexpr char kSuperblockFix[] =
    "the file is truncated (a copy or a conversion that did not finish) or damaged: copy it "
    "again, or re-create it with `batchcast convert` (`batchcast inspect --verify FILE` checks "
    "a copy)";

uint64_t DecodeLe(const uint8_t* p, int bytes) {  // bytes <= 8
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

uint64_t DecodeAddress(const uint8_t* p, int size) {
  if (std::all_of(p, p + size, [](uint8_t b) { return b == 0xff; })) return kUndefined;
  if (size > 8 && !std::all_of(p + 8, p + size, [](uint8_t b) { return b == 0; }))
    return kTooLarge;
  return DecodeLe(p, std::min(size, 8));
}

bool ValidFieldSize(int n) { return n == 2 || n == 4 || n == 8 || n == 16 || n == 32; }

class SuperblockCheck {
 public:
  SuperblockCheck(int fd, const std::string& path, uint64_t size)
      : fd_(fd), path_(path), size_(size) {}
  Status Run();

 private:
  // Reads up to n bytes at pos, zero past the end of the file; returns the bytes read.
  Result<size_t> Read(uint64_t pos, uint8_t* buf, size_t n) const;
  template <typename... Args>
  Status Bad(fmt::format_string<Args...> f, Args&&... args) const {
    return CorruptDataError("hdf5: {} is damaged: its superblock (version {}, at byte {}) {}; {}",
                            path_, version_, super_, fmt::format(f, std::forward<Args>(args)...),
                            kSuperblockFix);
  }
  Status CheckVersion01(const uint8_t* sb, size_t avail);
  Status CheckVersion23(const uint8_t* sb, size_t avail);
  Status CheckSizes(int offsets, int lengths);
  Status CheckEnd(size_t avail, size_t sb_size, uint64_t base, uint64_t stored_eof);
  Status CheckAddress(const char* field, uint64_t addr, uint64_t need) const;
  Status CheckObjectHeader(const char* field, uint64_t addr) const;
  Status CheckContinuations(const char* field, uint64_t header, bool order,
                            std::pair<uint64_t, uint64_t> first, bool v2) const;
  Status CheckDriverInfo(uint64_t addr) const;

  const int fd_;
  const std::string& path_;
  const uint64_t size_;  // the file's real size
  uint64_t super_ = 0;   // byte offset of the superblock
  int version_ = 0;
  uint64_t sb_size_ = 0;
  int offsets_ = 8, lengths_ = 8;  // sizes of addresses and lengths in bytes
  uint64_t eof_ = 0;  // end of the HDF5 data, relative to the superblock
};

Result<size_t> SuperblockCheck::Read(uint64_t pos, uint8_t* buf, size_t n) const {
  size_t got = 0;
  while (got < n) {
    const ssize_t r =
        RetryEintr([&] { return pread(fd_, buf + got, n - got, static_cast<off_t>(pos + got)); });
    if (r < 0) return ErrnoError(errno, "hdf5: cannot read dataset file {}", path_);
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  std::fill(buf + got, buf + n, uint8_t{0});
  return got;
}

Status SuperblockCheck::Run() {
  bool found = false;
  // HDF5 looks at byte 0, then at 512, 1024, 2048, ... (after a user block).
  for (uint64_t at = 0; !found && at + sizeof(kSignature) <= size_; at = at == 0 ? 512 : 2 * at) {
    uint8_t sig[sizeof(kSignature)];
    BC_ASSIGN_OR_RETURN(const size_t got, Read(at, sig, sizeof(sig)));
    found = got == sizeof(sig) && std::memcmp(sig, kSignature, sizeof(sig)) == 0;
    if (found) super_ = at;
  }
  if (!found)
    return CorruptDataError("hdf5: {} is not an HDF5 file (no HDF5 signature at byte 0, 512, "
                            "1024, ...); re-create it with `batchcast convert`", path_);
  uint8_t sb[256];  // the largest superblock (version 1, 32-byte offsets) has 244 bytes
  BC_ASSIGN_OR_RETURN(const size_t avail, Read(super_, sb, sizeof(sb)));
  version_ = sb[8];
  if (avail < 12) return Bad("is cut short: the file ends after {} of its bytes", avail);
  if (version_ <= 1) return CheckVersion01(sb, avail);
  if (version_ <= 3) return CheckVersion23(sb, avail);
  return Bad("has a version this HDF5 cannot read (it reads versions 0 to 3)");
}

Status SuperblockCheck::CheckSizes(int offsets, int lengths) {
  if (!ValidFieldSize(offsets))
    return Bad("has 'size of offsets' {}, expected 2, 4, 8, 16 or 32", offsets);
  if (!ValidFieldSize(lengths))
    return Bad("has 'size of lengths' {}, expected 2, 4, 8, 16 or 32", lengths);
  offsets_ = offsets;
  lengths_ = lengths;
  return Status::Ok();
}

// Version 0/1: signature, versions (superblock, free space, root entry, reserved, shared
// header), sizes of offsets and lengths, reserved, group leaf and internal K (2 + 2), flags
// (4), [version 1: indexed storage K (2), reserved (2)], then base, free-space, end-of-file
// and driver-block addresses and the root group's symbol table entry (link name offset,
// object header address, cache type (4), reserved (4), scratch pad (16)).
Status SuperblockCheck::CheckVersion01(const uint8_t* sb, size_t avail) {
  const size_t fixed = version_ == 0 ? 24 : 28;
  if (avail < fixed) return Bad("is cut short: the file ends after {} of its bytes", avail);
  if (sb[9] != 0) return Bad("has free-space storage version {}, expected 0", sb[9]);
  if (sb[10] != 0) return Bad("has root group symbol table entry version {}, expected 0", sb[10]);
  if (sb[12] != 0) return Bad("has shared header message format version {}, expected 0", sb[12]);
  const int o = sb[13];
  BC_RETURN_IF_ERROR(CheckSizes(o, sb[14]));
  if (DecodeLe(sb + 16, 2) == 0 || DecodeLe(sb + 18, 2) == 0)
    return Bad("has a group leaf or internal node K of 0");
  if (version_ == 1 && DecodeLe(sb + 24, 2) == 0) return Bad("has an indexed storage K of 0");
  BC_RETURN_IF_ERROR(CheckEnd(avail, fixed + 6 * size_t(o) + 24, DecodeAddress(sb + fixed, o),
                              DecodeAddress(sb + fixed + 2 * o, o)));
  const uint64_t driver = DecodeAddress(sb + fixed + 3 * o, o);
  if (driver != kUndefined) BC_RETURN_IF_ERROR(CheckDriverInfo(driver));
  const uint8_t* root = sb + fixed + 4 * o;
  const uint64_t cache = DecodeLe(root + 2 * o, 4);
  if (cache > 2) return Bad("has root group cache type {}, expected 0, 1 or 2", cache);
  if (cache == 1 && o <= 8) {  // the scratch pad caches the root's B-tree and local heap
    const uint8_t* scratch = root + 2 * o + 8;
    BC_RETURN_IF_ERROR(CheckAddress("root group B-tree address", DecodeAddress(scratch, o), 1));
    BC_RETURN_IF_ERROR(
        CheckAddress("root group local heap address", DecodeAddress(scratch + o, o), 1));
  }
  return CheckObjectHeader("root group object header address", DecodeAddress(root + o, o));
}

// Version 2/3: signature, version, sizes of offsets and lengths, flags, then base,
// superblock-extension, end-of-file and root object header addresses, and a checksum
// (which HDF5 verifies itself).
Status SuperblockCheck::CheckVersion23(const uint8_t* sb, size_t avail) {
  const int o = sb[9];
  BC_RETURN_IF_ERROR(CheckSizes(o, sb[10]));
  BC_RETURN_IF_ERROR(CheckEnd(avail, 16 + 4 * size_t(o), DecodeAddress(sb + 12, o),
                              DecodeAddress(sb + 12 + 2 * o, o)));
  const uint64_t extension = DecodeAddress(sb + 12 + o, o);
  if (extension != kUndefined)
    BC_RETURN_IF_ERROR(CheckObjectHeader("superblock extension address", extension));
  return CheckObjectHeader("root group object header address", DecodeAddress(sb + 12 + 3 * o, o));
}

// The superblock must be whole, and the end of file address (absolute, after HDF5 rebases
// a moved superblock) must lie between its end and the file's real size.
Status SuperblockCheck::CheckEnd(size_t avail, size_t sb_size, uint64_t base,
                                 uint64_t stored_eof) {
  sb_size_ = sb_size;
  if (avail < sb_size)
    return Bad("is cut short: the file ends after {} of its {} bytes", avail, sb_size);
  if (base >= kTooLarge) return Bad("has an undefined or out-of-range 'base address'");
  if (stored_eof >= kTooLarge) return Bad("has an undefined or out-of-range 'end of file address'");
  uint64_t end = 0;  // absolute
  if (base > super_ ? stored_eof < base - super_
                    : __builtin_add_overflow(stored_eof, super_ - base, &end))
    return Bad("has 'end of file address' {} out of range for 'base address' {}", stored_eof, base);
  if (base > super_) end = stored_eof - (base - super_);
  if (end > size_)
    return Bad("has 'end of file address' {}, past the file's real end ({} bytes)", end, size_);
  if (end < super_ + sb_size)
    return Bad("has 'end of file address' {}, inside the superblock itself ({} bytes)", end,
               sb_size);
  eof_ = end - super_;
  return Status::Ok();
}

// `need` bytes at addr, after the superblock and before the end of the file's data.
Status SuperblockCheck::CheckAddress(const char* field, uint64_t addr, uint64_t need) const {
  if (addr == kUndefined) return Bad("has an undefined '{}'", field);
  if (addr < sb_size_ || addr > eof_ || eof_ - addr < need)
    return Bad("has '{}' {}, outside the file's data (bytes {} to {} after the superblock)",
               field, addr, sb_size_, eof_);
  return Status::Ok();
}

// An object header (version 1, or "OHDR" version 2) whose chunks end inside the file's
// data: the first, and every continuation chunk its messages name (HDF5 loads them all
// when it first reads the header, allocating each declared size before reading it).
Status SuperblockCheck::CheckObjectHeader(const char* field, uint64_t addr) const {
  BC_RETURN_IF_ERROR(CheckAddress(field, addr, 16));
  uint8_t h[40];
  BC_RETURN_IF_ERROR(Read(super_ + addr, h, sizeof(h)).status());
  uint64_t prefix = 16, chunk = 0;
  const bool v2 = std::memcmp(h, "OHDR", 4) == 0 && h[4] == 2;
  if (v2) {
    prefix = 6 + ((h[5] & 0x20) != 0 ? 16 : 0) + ((h[5] & 0x10) != 0 ? 4 : 0);
    const int width = 1 << (h[5] & 3);
    chunk = DecodeLe(h + prefix, width);
    prefix += uint64_t(width);
  } else if (h[0] == 1) {
    chunk = DecodeLe(h + 8, 4);
  } else {
    return Bad("has '{}' {}, which does not point at an object header", field, addr);
  }
  const uint64_t tail = v2 ? 4 : 0;  // the checksum after a version 2 chunk
  if (prefix + tail > eof_ - addr || chunk > eof_ - addr - prefix - tail)
    return Bad("has '{}' {}, whose object header declares {} bytes past the end of the file's "
               "data", field, addr, chunk);
  return CheckContinuations(field, addr, v2 && (h[5] & 0x04) != 0, {addr + prefix, chunk}, v2);
}

// Walks the messages of an object header's chunks (data start, size), from the first, for
// continuation messages (type 0x10: address, length); each continuation chunk must lie inside
// the file's data and is walked in turn (at most kMaxChunks chunks, each of at most 1 MiB
// read: a larger one is inside the file, its messages are left to HDF5).
Status SuperblockCheck::CheckContinuations(const char* field, uint64_t header, bool order,
                                           std::pair<uint64_t, uint64_t> first, bool v2) const {
  constexpr size_t kMaxChunks = 64;
  constexpr uint64_t kMaxRead = 1 << 20;
  const size_t message_header = v2 ? 4 + (order ? 2 : 0) : 8;
  std::vector<std::pair<uint64_t, uint64_t>> chunks = {first};
  std::vector<uint8_t> c;
  for (size_t i = 0; i < chunks.size() && i < kMaxChunks; ++i) {
    const auto [at, len] = chunks[i];
    if (len > kMaxRead) continue;
    c.resize(len);
    BC_RETURN_IF_ERROR(Read(super_ + at, c.data(), len).status());
    for (uint64_t pos = 0; pos + message_header <= len;) {
      const uint64_t type = v2 ? c[pos] : DecodeLe(&c[pos], 2);
      const uint64_t size = DecodeLe(&c[pos + (v2 ? 1 : 2)], 2);
      const uint64_t data = pos + message_header;
      if (size > len - data) break;  // a malformed message: HDF5 refuses it
      // HDF5 1.10 decodes a continuation's address and length whatever its size says, even
      // past the end of the chunk (an out-of-bounds read there).
      if (type == 0x10 && uint64_t(offsets_ + lengths_) > len - data)
        return Bad("has '{}' {}, whose object header has a continuation message cut short by "
                   "the end of its chunk", field, header);
      if (type == 0x10) {
        const uint64_t where = DecodeAddress(&c[data], offsets_);
        const uint64_t bytes = DecodeAddress(&c[data + uint64_t(offsets_)], lengths_);
        if (where == kUndefined || where < sb_size_ || where > eof_ || bytes > eof_ - where ||
            (v2 && bytes < 8))
          return Bad("has '{}' {}, whose object header continues at {} with {} bytes, outside "
                     "the file's data ({} bytes after the superblock)", field, header, where,
                     bytes, eof_);
        if (v2) chunks.emplace_back(where + 4, bytes - 8);  // "OCHK", messages, checksum
        else chunks.emplace_back(where, bytes);
      }
      pos = data + size;
    }
  }
  return Status::Ok();
}

// Driver information block: version (0), reserved (3), information size (4), driver id (8).
Status SuperblockCheck::CheckDriverInfo(uint64_t addr) const {
  BC_RETURN_IF_ERROR(CheckAddress("driver information block address", addr, 16));
  uint8_t h[16];
  BC_RETURN_IF_ERROR(Read(super_ + addr, h, sizeof(h)).status());
  if (h[0] != 0) return Bad("has a driver information block of version {}, expected 0", h[0]);
  const uint64_t info = DecodeLe(h + 4, 4);
  if (info > eof_ - addr - 16)
    return Bad("has a driver information block declaring {} bytes past the end of the file's "
               "data", info);
  return Status::Ok();
}

}  // namespace

Status CheckHdf5Superblock(const std::string& path) {
  const int fd = RetryEintr([&] { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC); });
  if (fd < 0) return ErrnoError(errno, "hdf5: cannot open dataset file {}", path);
  struct stat st {};
  Status status = fstat(fd, &st) != 0
                      ? ErrnoError(errno, "hdf5: cannot access dataset file {}", path)
                      : SuperblockCheck(fd, path, static_cast<uint64_t>(st.st_size)).Run();
  ::close(fd);
  return status;
}

Status CheckFilterAvailable(int id, const std::string& what) {
  if (H5Zfilter_avail(static_cast<H5Z_filter_t>(id)) > 0) return Status::Ok();
  H5Eclear2(H5E_DEFAULT);
  const char* name = id == kLz4FilterId ? "lz4" : "an unknown filter";
  return MakeError(StatusCode::kFailedPrecondition,
                   "hdf5: {} needs the HDF5 filter {} ({}), which this HDF5 cannot load: install "
                   "the Debian package hdf5-filter-plugin (scripts/deps.sh installs it), or set "
                   "HDF5_PLUGIN_PATH to the directory of the filter's plugin",
                   what, id, name);
}

}  // namespace batchcast::data
