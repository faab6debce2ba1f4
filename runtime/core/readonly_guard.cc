// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "core/readonly_guard.h"

#include "core/sanitizers.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "core/errors.h"
#include "core/log.h"

namespace batchcast {
namespace {

constexpr char kPrefix[] = "batchcast: this process wrote into a shared batch (";
constexpr char kSuffix[] =
    ", read-only: every trainer on the node reads it); copy it before modifying in place, "
    "e.g. images = images.clone() (torch) / np.array(view) (numpy) / std::memcpy to your own "
    "buffer (C++)\n";
constexpr size_t kMessageCapacity = 768;
constexpr size_t kMaxWhat = kMessageCapacity - (sizeof(kPrefix) - 1) - (sizeof(kSuffix) - 1);

// One registered region. Writers (under g_writer_mu) bracket every change with `seq`
// (odd while changing); the handler reads a slot without locks and retries or skips it
// when `seq` moved underneath (a seqlock), so it never sees a half-written message.
struct Region {
  std::atomic<uint32_t> seq{0};
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};  // 0: the slot is free
  std::atomic<size_t> message_len{0};
  char message[kMessageCapacity];
};

Region g_regions[kMaxReadOnlyRegions];
std::mutex g_writer_mu;          // registrations only; the handler never takes it
struct sigaction g_previous;     // written once, before our handler is installed
std::atomic<bool> g_installed{false};

void WriteAll(const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(STDERR_FILENO, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// "0x" + hex of v into out (at least 19 bytes); returns the length. Async-signal-safe.
size_t FormatHex(uintptr_t v, char* out) {
  char digits[16];
  size_t n = 0;
  do {
    digits[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v != 0 && n < sizeof(digits));
  out[0] = '0', out[1] = 'x';
  for (size_t i = 0; i < n; ++i) out[2 + i] = digits[n - 1 - i];
  return n + 2;
}

size_t FormatDecimal(uintptr_t v, char* out) {
  char digits[24];
  size_t n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (size_t i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
  return n;
}

// The seqlock's fences. GCC refuses atomic_thread_fence under ThreadSanitizer (which
// cannot model fences); there, the fences compile away: only the handler reads the table,
// and only when a registered region faults, so the sanitizer build loses nothing it checks.
inline void SeqlockFence(std::memory_order order) {
#if BC_SANITIZE_THREAD
  (void)order;
#else
  std::atomic_thread_fence(order);
#endif
}

// Copies the message of the region holding `addr` into `out`; false when none does.
bool FindRegion(uintptr_t addr, char* out, size_t* len, uintptr_t* begin) {
  for (Region& r : g_regions) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      uint32_t s1 = r.seq.load(std::memory_order_acquire);
      if (s1 & 1u) continue;  // being written by a registration right now
      uintptr_t b = r.begin.load(std::memory_order_relaxed);
      uintptr_t e = r.end.load(std::memory_order_relaxed);
      if (e == 0 || addr < b || addr >= e) break;
      size_t n = r.message_len.load(std::memory_order_relaxed);
      if (n > kMessageCapacity) n = kMessageCapacity;
      std::memcpy(out, r.message, n);
      SeqlockFence(std::memory_order_acquire);
      if (r.seq.load(std::memory_order_relaxed) != s1) continue;
      *len = n;
      *begin = b;
      return true;
    }
  }
  return false;
}

void CallPrevious(int sig, siginfo_t* info, void* context) {
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) {
      g_previous.sa_sigaction(sig, info, context);
      return;
    }
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  // No previous handler: the default action. For a real fault the write repeats on
  // return and the kernel kills the process; for a raised/queued SIGSEGV, raise it again.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) raise(sig);
}

void OnSegv(int sig, siginfo_t* info, void* context) {
  int saved_errno = errno;
  char message[kMessageCapacity];
  size_t len = 0;
  uintptr_t begin = 0;
  if (info != nullptr && info->si_code == SEGV_ACCERR &&
      FindRegion(reinterpret_cast<uintptr_t>(info->si_addr), message, &len, &begin)) {
    WriteAll(message, len);
    char line[96];
    static constexpr char kAt[] = "batchcast: the faulting write was at ";
    static constexpr char kInto[] = ", byte ";
    static constexpr char kTail[] = " of that region\n";
    uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
    size_t n = 0;
    std::memcpy(line + n, kAt, sizeof(kAt) - 1), n += sizeof(kAt) - 1;
    n += FormatHex(addr, line + n);
    std::memcpy(line + n, kInto, sizeof(kInto) - 1), n += sizeof(kInto) - 1;
    n += FormatDecimal(addr - begin, line + n);
    std::memcpy(line + n, kTail, sizeof(kTail) - 1), n += sizeof(kTail) - 1;
    WriteAll(line, n);
    // Hand the fault on with the previous handler's own flags and mask: reinstall it and
    // return. The write repeats, faults again and reaches it (Python's faulthandler prints
    // the traceback), or, with none, the default action: SIGSEGV, core dump.
    sigaction(sig, &g_previous, nullptr);
    errno = saved_errno;
    return;
  }
  CallPrevious(sig, info, context);
  errno = saved_errno;
}

Status InstallHandlerLocked() {
  if (g_installed.load(std::memory_order_relaxed)) return Status::Ok();
  struct sigaction current;
  if (sigaction(SIGSEGV, nullptr, &current) != 0)
    return ErrnoError(errno, "readonly guard: sigaction(SIGSEGV) query");
  g_previous = current;
  struct sigaction ours;
  std::memset(&ours, 0, sizeof(ours));
  ours.sa_sigaction = OnSegv;
  ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&ours.sa_mask);
  if (sigaction(SIGSEGV, &ours, nullptr) != 0)
    return ErrnoError(errno, "readonly guard: sigaction(SIGSEGV) install");
  g_installed.store(true, std::memory_order_release);
  BC_LOG(Debug, Init, "readonly guard: SIGSEGV handler installed (previous: {})",
         (current.sa_flags & SA_SIGINFO) || (current.sa_handler != SIG_DFL &&
                                              current.sa_handler != SIG_IGN)
             ? "a handler, chained"
             : "default");
  return Status::Ok();
}

}  // namespace

std::string ReadOnlyWriteMessage(const std::string& what) {
  std::string w = what.size() > kMaxWhat ? what.substr(0, kMaxWhat - 3) + "..." : what;
  return std::string(kPrefix) + w + kSuffix;
}

Status RegisterReadOnlyRegion(const void* base, size_t len, const std::string& what) {
  if (base == nullptr || len == 0)
    return InvalidArgumentError("readonly guard: region '{}' at {} has length {}; need a "
                                "mapped range", what, base, len);
  std::string message = ReadOnlyWriteMessage(what);
  auto b = reinterpret_cast<uintptr_t>(base);
  std::lock_guard<std::mutex> lock(g_writer_mu);
  BC_RETURN_IF_ERROR(InstallHandlerLocked());
  Region* free_slot = nullptr;
  for (Region& r : g_regions) {
    uintptr_t e = r.end.load(std::memory_order_relaxed);
    if (e == 0) {
      if (free_slot == nullptr) free_slot = &r;
    } else if (r.begin.load(std::memory_order_relaxed) == b) {
      return FailedPreconditionError("readonly guard: region at {} ('{}') is already "
                                     "registered; unregister it first", base, what);
    }
  }
  if (free_slot == nullptr)
    return ResourceExhaustedError("readonly guard: {} read-only regions are registered "
                                  "already; cannot add '{}'", kMaxReadOnlyRegions, what);
  Region& r = *free_slot;
  r.seq.fetch_add(1, std::memory_order_relaxed);  // odd: being written
  SeqlockFence(std::memory_order_release);
  std::memcpy(r.message, message.data(), message.size());
  r.message_len.store(message.size(), std::memory_order_relaxed);
  r.begin.store(b, std::memory_order_relaxed);
  r.end.store(b + len, std::memory_order_relaxed);
  r.seq.fetch_add(1, std::memory_order_release);  // even: stable
  return Status::Ok();
}

void UnregisterReadOnlyRegion(const void* base) {
  auto b = reinterpret_cast<uintptr_t>(base);
  std::lock_guard<std::mutex> lock(g_writer_mu);
  for (Region& r : g_regions) {
    if (r.end.load(std::memory_order_relaxed) == 0 ||
        r.begin.load(std::memory_order_relaxed) != b)
      continue;
    r.seq.fetch_add(1, std::memory_order_relaxed);
    SeqlockFence(std::memory_order_release);
    r.end.store(0, std::memory_order_relaxed);
    r.begin.store(0, std::memory_order_relaxed);
    r.message_len.store(0, std::memory_order_relaxed);
    r.seq.fetch_add(1, std::memory_order_release);
    return;
  }
}

}  // namespace batchcast
