// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The libFuzzer harnesses without libFuzzer: replays every file of a corpus through one
// harness (the normal build's ctests fuzz_corpus_<target>, label fuzz), so the seed and
// regression inputs of tests/fuzz/corpus/ run with the compiler and flags users build with.
//
//   fuzz_replay TARGET DIR|FILE...   TARGET: fuzz_image fuzz_hdf5 fuzz_idx fuzz_spec fuzz_control
//
// tests/CMakeLists.txt compiles each harness with its LLVMFuzzer* entry points renamed
// (BcFuzz<Name>One / BcFuzz<Name>Init) so that all of them link into this one executable.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" {
int BcFuzzImageOne(const uint8_t*, size_t);
int BcFuzzHdf5One(const uint8_t*, size_t);
int BcFuzzHdf5Init(int*, char***);
int BcFuzzIdxOne(const uint8_t*, size_t);
int BcFuzzSpecOne(const uint8_t*, size_t);
int BcFuzzControlOne(const uint8_t*, size_t);
int BcFuzzControlInit(int*, char***);
}

namespace {

struct Target {
  const char* name;
  int (*init)(int*, char***);
  int (*one)(const uint8_t*, size_t);
};

constexpr Target kTargets[] = {
    {"fuzz_image", nullptr, BcFuzzImageOne},     {"fuzz_hdf5", BcFuzzHdf5Init, BcFuzzHdf5One},
    {"fuzz_idx", nullptr, BcFuzzIdxOne},         {"fuzz_spec", nullptr, BcFuzzSpecOne},
    {"fuzz_control", BcFuzzControlInit, BcFuzzControlOne},
};

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const Target* target = nullptr;
  for (const Target& t : kTargets)
    if (argc > 1 && std::strcmp(argv[1], t.name) == 0) target = &t;
  if (target == nullptr || argc < 3) {
    std::fprintf(stderr, "usage: fuzz_replay fuzz_image|fuzz_hdf5|fuzz_idx|fuzz_spec|fuzz_control "
                         "DIR|FILE...\n");
    return 2;
  }
  std::vector<fs::path> inputs;
  for (int i = 2; i < argc; ++i) {
    std::error_code ec;
    if (fs::is_directory(argv[i], ec)) {
      for (const auto& e : fs::directory_iterator(argv[i])) inputs.push_back(e.path());
    } else if (fs::is_regular_file(argv[i], ec)) {
      inputs.emplace_back(argv[i]);
    } else {
      std::fprintf(stderr, "fuzz_replay: %s is neither a corpus directory nor a file\n", argv[i]);
      return 2;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "fuzz_replay: %s: the corpus is empty\n", target->name);
    return 1;
  }
  if (target->init != nullptr) target->init(&argc, &argv);
  for (const fs::path& p : inputs) {
    std::ifstream f(p, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)),
                               std::istreambuf_iterator<char>());
    std::fprintf(stderr, "fuzz_replay: %s %s (%zu bytes)\n", target->name, p.c_str(), bytes.size());
    target->one(bytes.data(), bytes.size());  // a finding aborts (fuzz::Check) or crashes
  }
  std::printf("fuzz_replay: %s: %zu inputs replayed, no finding\n", target->name, inputs.size());
  return 0;
}
