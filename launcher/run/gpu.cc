// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "run/gpu.h"

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "core/log.h"

namespace batchcast::run {
namespace {

std::string UuidIn(const std::string& line) {
  size_t p = line.find("(UUID: ");
  if (p == std::string::npos) return "";
  size_t end = line.find(')', p);
  return end == std::string::npos ? "" : line.substr(p + 7, end - p - 7);
}

}  // namespace

std::vector<GpuDevice> ParseNvidiaSmiList(const std::string& text) {
  std::vector<GpuDevice> gpus;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    std::string t = line.substr(first);
    if (t.rfind("GPU ", 0) == 0) {
      GpuDevice g;
      g.index = std::atoi(t.c_str() + 4);
      size_t colon = t.find(": ");
      size_t paren = t.find(" (UUID: ");
      if (colon != std::string::npos && paren != std::string::npos && paren > colon)
        g.name = t.substr(colon + 2, paren - colon - 2);
      g.uuid = UuidIn(t);
      gpus.push_back(g);
    } else if (t.rfind("MIG ", 0) == 0 && !gpus.empty()) {
      std::string uuid = UuidIn(t);
      if (!uuid.empty()) gpus.back().mig_uuids.push_back(uuid);
    }
  }
  return gpus;
}

std::vector<GpuDevice> DetectGpus(const std::string& nvidia_smi) {
  std::string cmd =
      (nvidia_smi.empty() ? std::string("nvidia-smi") : "'" + nvidia_smi + "'") + " -L 2>/dev/null";
  std::string text;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[512];
    while (fgets(buf, sizeof(buf), p) != nullptr) text += buf;
    int rc = pclose(p);
    if (rc == 0) return ParseNvidiaSmiList(text);
    BC_LOG(Debug, Init, "batchcast-run: '{}' failed (status {}); trying /proc/driver/nvidia", cmd,
           rc);
  }
  std::vector<GpuDevice> gpus;
  std::error_code ec;
  const std::filesystem::path dir("/proc/driver/nvidia/gpus");
  if (!std::filesystem::is_directory(dir, ec)) return gpus;
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    (void)entry;
    GpuDevice g;
    g.index = n++;
    gpus.push_back(g);
  }
  return gpus;
}

}  // namespace batchcast::run
