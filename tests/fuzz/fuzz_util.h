// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Helpers shared by the libFuzzer harnesses (tests/fuzz/*.cc).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace batchcast::fuzz {

// The fuzz input as a file that the real reader opens by path: a memfd (no disk, no
// cleanup), named through /proc/self/fd. Closed when the object dies.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) {
    fd_ = memfd_create("batchcast-fuzz", MFD_CLOEXEC);
    if (fd_ < 0) Die("memfd_create");
    size_t done = 0;
    while (done < size) {
      ssize_t n = write(fd_, data + done, size - done);
      if (n <= 0) Die("write to memfd");
      done += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  static void Die(const char* what) {
    std::perror(what);  // the harness itself failed: not a finding in the code under test
    std::abort();
  }
  int fd_ = -1;
  std::string path_;
};

// Aborts (a crash libFuzzer reports with the input) when an invariant of the code under
// test does not hold.
inline void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace batchcast::fuzz
