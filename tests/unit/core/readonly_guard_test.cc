// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "core/readonly_guard.h"

#include "core/sanitizers.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace batchcast {
namespace {

constexpr char kWhat[] = "batch memory of the leader at @batchcast-0-service (pid 123)";

// One read-only anonymous page (what a consumer's PROT_READ batch mapping is to a writer).
struct ReadOnlyPage {
  ReadOnlyPage() {
    size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    data = p == MAP_FAILED ? nullptr : static_cast<unsigned char*>(p);
  }
  ~ReadOnlyPage() {
    if (data != nullptr) munmap(data, size);
  }
  unsigned char* data = nullptr;
  size_t size = 0;
};

// Inside a death-test child: no core file for the deliberate fault.
void NoCoreDump() {
  struct rlimit none = {0, 0};
  setrlimit(RLIMIT_CORE, &none);
}

void WriteByte(unsigned char* p) { *static_cast<volatile unsigned char*>(p) = 255; }

// A previously installed SIGSEGV handler, as Python's faulthandler or a JVM would have.
void PreviousHandler(int, siginfo_t* info, void*) {
  static constexpr char kSeen[] = "previous handler saw the fault\n";
  (void)!write(STDERR_FILENO, kSeen, sizeof(kSeen) - 1);
  _exit(info->si_code == SEGV_ACCERR ? 42 : 43);
}

void InstallPreviousHandler() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = PreviousHandler;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, nullptr);
}

// AddressSanitizer and ThreadSanitizer install their own SIGSEGV handlers in every process
// they run (and report the expected fault as a finding): the death tests run in the normal
// build only.
#if BC_SANITIZED
#define SKIP_UNDER_ASAN() GTEST_SKIP() << "the sanitizer owns SIGSEGV; run in the normal build"
#else
#define SKIP_UNDER_ASAN() (void)0
#endif

TEST(ReadOnlyGuardTest, MessageNamesTheBatchAndTheFix) {
  std::string m = ReadOnlyWriteMessage(kWhat);
  EXPECT_NE(m.find("wrote into a shared batch (batch memory of the leader at "
                   "@batchcast-0-service (pid 123), read-only"), std::string::npos) << m;
  EXPECT_NE(m.find("images = images.clone()"), std::string::npos);
  EXPECT_NE(m.find("np.array(view)"), std::string::npos);
  EXPECT_NE(m.find("std::memcpy"), std::string::npos);
  // A very long description is cut, the fix is kept.
  std::string long_what(5000, 'x');
  std::string cut = ReadOnlyWriteMessage(long_what);
  EXPECT_LT(cut.size(), 1000u);
  EXPECT_NE(cut.find("images.clone()"), std::string::npos);
}

TEST(ReadOnlyGuardTest, RejectsEmptyAndDuplicateRegions) {
  ReadOnlyPage page;
  ASSERT_NE(page.data, nullptr);
  EXPECT_EQ(RegisterReadOnlyRegion(nullptr, 10, "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RegisterReadOnlyRegion(page.data, 0, "x").code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(RegisterReadOnlyRegion(page.data, page.size, "x").ok());
  Status dup = RegisterReadOnlyRegion(page.data, page.size, "x");
  EXPECT_EQ(dup.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(dup.message().find("already registered"), std::string::npos);
  UnregisterReadOnlyRegion(page.data);
  EXPECT_TRUE(RegisterReadOnlyRegion(page.data, page.size, "x").ok());
  UnregisterReadOnlyRegion(page.data);
  UnregisterReadOnlyRegion(page.data);  // twice: a no-op
}

TEST(ReadOnlyGuardTest, TableHoldsExactlyMaxRegions) {
  std::vector<char> bytes(kMaxReadOnlyRegions + 1);
  for (int i = 0; i < kMaxReadOnlyRegions; ++i)
    ASSERT_TRUE(RegisterReadOnlyRegion(&bytes[i], 1, "r").ok()) << i;
  Status full = RegisterReadOnlyRegion(&bytes[kMaxReadOnlyRegions], 1, "r");
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  for (int i = 0; i < kMaxReadOnlyRegions; ++i) UnregisterReadOnlyRegion(&bytes[i]);
  EXPECT_TRUE(RegisterReadOnlyRegion(&bytes[kMaxReadOnlyRegions], 1, "r").ok());
  UnregisterReadOnlyRegion(&bytes[kMaxReadOnlyRegions]);
}

TEST(ReadOnlyGuardTest, ConcurrentRegistrationsDoNotCollide) {
  constexpr int kThreads = 4, kPerThread = 60;  // 240 <= kMaxReadOnlyRegions at once
  std::vector<char> bytes(kThreads * kPerThread);
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (int i = 0; i < kPerThread; ++i)
          if (!RegisterReadOnlyRegion(&bytes[t * kPerThread + i], 1, "r").ok()) ++failures[t];
        for (int i = 0; i < kPerThread; ++i) UnregisterReadOnlyRegion(&bytes[t * kPerThread + i]);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0);
}

TEST(ReadOnlyGuardDeathTest, WriteIntoRegionDiesWithTheMessage) {
  SKIP_UNDER_ASAN();
  ReadOnlyPage page;
  ASSERT_NE(page.data, nullptr);
  ASSERT_TRUE(RegisterReadOnlyRegion(page.data, page.size, kWhat).ok());
  EXPECT_EXIT(
      {
        NoCoreDump();
        WriteByte(page.data + 17);
      },
      ::testing::KilledBySignal(SIGSEGV),
      "batchcast: this process wrote into a shared batch \\(batch memory of the leader at "
      "@batchcast-0-service \\(pid 123\\), read-only: every trainer on the node reads it\\); "
      "copy it before modifying in place, e.g. images = images.clone\\(\\) \\(torch\\) / "
      "np.array\\(view\\) \\(numpy\\) / std::memcpy to your own buffer \\(C\\+\\+\\)\n"
      "batchcast: the faulting write was at 0x[0-9a-f]+, byte 17 of that region");
  UnregisterReadOnlyRegion(page.data);
}

TEST(ReadOnlyGuardDeathTest, WriteFromAnotherThreadDiesWithTheMessage) {
  SKIP_UNDER_ASAN();
  ReadOnlyPage page;
  ASSERT_NE(page.data, nullptr);
  ASSERT_TRUE(RegisterReadOnlyRegion(page.data, page.size, kWhat).ok());
  EXPECT_EXIT(
      {
        NoCoreDump();
        std::thread([&] { WriteByte(page.data + page.size - 1); }).join();
      },
      ::testing::KilledBySignal(SIGSEGV), "wrote into a shared batch \\(batch memory");
  UnregisterReadOnlyRegion(page.data);
}

TEST(ReadOnlyGuardDeathTest, UnregisteredRegionGetsNoMessage) {
  SKIP_UNDER_ASAN();
  ReadOnlyPage page;
  ASSERT_NE(page.data, nullptr);
  ASSERT_TRUE(RegisterReadOnlyRegion(page.data, page.size, kWhat).ok());
  UnregisterReadOnlyRegion(page.data);
  EXPECT_EXIT(
      {
        NoCoreDump();
        WriteByte(page.data);
        // Only reached if the write did not fault: make that a failure with its own text.
        static constexpr char kNo[] = "no fault\n";
        (void)!write(STDERR_FILENO, kNo, sizeof(kNo) - 1);
        _exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "^$");
}

TEST(ReadOnlyGuardDeathTest, RaisedSigsegvStillKills) {
  SKIP_UNDER_ASAN();
  ReadOnlyPage page;
  ASSERT_NE(page.data, nullptr);
  ASSERT_TRUE(RegisterReadOnlyRegion(page.data, page.size, kWhat).ok());
  EXPECT_EXIT(
      {
        NoCoreDump();
        raise(SIGSEGV);  // no fault address: not a write into a region, the default action
        _exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "^$");
  UnregisterReadOnlyRegion(page.data);
}

// The guard is installed once per process, so these run in a fresh process each
// ("threadsafe" style re-executes the test binary for the death statement), where the
// "previous" handler is installed before the guard's first registration.
TEST(ReadOnlyGuardDeathTest, FaultOutsideRegionsReachesPreviousHandler) {
  SKIP_UNDER_ASAN();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        NoCoreDump();
        InstallPreviousHandler();
        ReadOnlyPage registered;
        ReadOnlyPage other;
        if (!RegisterReadOnlyRegion(registered.data, registered.size, kWhat).ok()) _exit(3);
        WriteByte(other.data);
      },
      ::testing::ExitedWithCode(42), "^previous handler saw the fault\n$");
}

TEST(ReadOnlyGuardDeathTest, FaultInsideRegionPrintsThenReachesPreviousHandler) {
  SKIP_UNDER_ASAN();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        NoCoreDump();
        InstallPreviousHandler();
        ReadOnlyPage page;
        if (!RegisterReadOnlyRegion(page.data, page.size, kWhat).ok()) _exit(3);
        WriteByte(page.data);
      },
      ::testing::ExitedWithCode(42),
      "wrote into a shared batch \\(batch memory[^\n]*\n[^\n]*byte 0 of that region\n"
      "previous handler saw the fault\n$");
}

}  // namespace
}  // namespace batchcast
