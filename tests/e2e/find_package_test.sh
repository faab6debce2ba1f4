#!/usr/bin/env bash
# Installs Batchcast into a temporary prefix and builds a tiny external CMake project
# against it with find_package(Batchcast CONFIG): proves the exported package works.
# Usage: find_package_test.sh BUILD_DIR
set -euo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
mkdir -p "$tmp/app"
cat > "$tmp/app/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(trainer LANGUAGES C CXX)
find_package(Batchcast CONFIG REQUIRED)
add_executable(trainer main.cc)
target_link_libraries(trainer PRIVATE Batchcast::batchcast)
CMAKE
cat > "$tmp/app/main.cc" <<'CC'
#include <batchcast/batchcast.h>
#include <cstdio>
int main() {
  auto opts = batchcast::ResolveOptions({"--batch-size=32", "--epochs=2", "--connect-timeout=0"});
  if (!opts.ok()) { std::printf("%s\n", opts.status().ToString().c_str()); return 1; }
  auto bad = batchcast::ResolveOptions({"--batch-size=zero"});
  // A consumer with no leader must fail with a clear message, not crash.
  auto c = batchcast::Consumer::Attach("batchcast-find-package-test-nobody", *opts);
  std::printf("batch_size=%d epochs=%d bad=%s attach=%s\n", opts->batch_size, opts->epochs,
              bad.ok() ? "accepted" : "refused", c.ok() ? "ok" : c.status().ToString().c_str());
  return (opts->batch_size == 32 && !bad.ok() && !c.ok()) ? 0 : 1;
}
CC
cmake -S "$tmp/app" -B "$tmp/app/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/app/build" >/dev/null
out=$(LD_LIBRARY_PATH="$tmp/prefix/lib:${LD_LIBRARY_PATH:-}" "$tmp/app/build/trainer")
echo "$out"
grep -q "batch_size=32 epochs=2 bad=refused attach=unavailable: consumer: waited .*connect_timeout=0ms.*no Batchcast leader listens" <<<"$out"
# Only the public API is exported from the shared library.
if nm -D --defined-only "$tmp"/prefix/lib/libbatchcast.so | c++filt | grep -q 'batchcast::shm::'; then
  echo "libbatchcast.so exports internal symbols"; exit 1
fi
echo "find_package test: PASS"
