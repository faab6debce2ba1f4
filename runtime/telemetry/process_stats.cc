// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "telemetry/process_stats.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/environment.h"
#include "core/errors.h"
#include "core/log.h"

namespace batchcast::telemetry {

double ProcessCpuSeconds() {
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  auto sec = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec * 1e-6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

int64_t ProcessRssBytes() {
  int fd = RetryEintr([] { return open("/proc/self/statm", O_RDONLY | O_CLOEXEC); });
  if (fd < 0) return 0;
  char buf[128] = {0};
  ssize_t n = RetryEintr([&] { return read(fd, buf, sizeof(buf) - 1); });
  close(fd);
  if (n <= 0) return 0;
  // "size resident shared text lib data dt", in pages.
  long long size = 0, resident = 0;
  if (std::sscanf(buf, "%lld %lld", &size, &resident) != 2) return 0;
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

int64_t ProcessPeakRssBytes() {
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux reports kilobytes
}


int PickGpuIndex(int requested, int local_rank) {
  if (requested >= 0) return requested;
  if (const std::optional<std::string> devices = env::Get(env::Var::kCudaVisibleDevices)) {
    const char* v = devices->c_str();
    char* end = nullptr;
    long first = std::strtol(v, &end, 10);
    if (end != v && (*end == '\0' || *end == ',') && first >= 0) return static_cast<int>(first);
    return 0;  // UUIDs or MIG names: NVML index unknown, take the first device
  }
  return local_rank;
}

namespace {

// The few NVML types used, declared by hand with NVML's layout (nvml.h, API v2).
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr int kNvmlSuccess = 0;

template <typename F>
bool Resolve(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

}  // namespace

std::unique_ptr<Nvml> Nvml::Open(int device_index) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    BC_LOG(Info, Telem, "nvml: libnvidia-ml.so.1 not loadable ({}): gpu metrics absent",
           dlerror());
    return nullptr;
  }
  auto n = std::make_unique<Nvml>();
  n->lib = lib;
  n->index = device_index;
  int (*init)() = nullptr;
  int (*count)(unsigned int*) = nullptr;
  int (*handle)(unsigned int, void**) = nullptr;
  int (*get_name)(void*, char*, unsigned int) = nullptr;
  if (!Resolve(lib, "nvmlInit_v2", &init) || !Resolve(lib, "nvmlShutdown", &n->shutdown) ||
      !Resolve(lib, "nvmlDeviceGetCount_v2", &count) ||
      !Resolve(lib, "nvmlDeviceGetHandleByIndex_v2", &handle) ||
      !Resolve(lib, "nvmlDeviceGetName", &get_name) ||
      !Resolve(lib, "nvmlDeviceGetUtilizationRates", &n->get_util) ||
      !Resolve(lib, "nvmlDeviceGetMemoryInfo", &n->get_mem)) {
    BC_LOG(Warn, Telem, "nvml: libnvidia-ml.so.1 lacks an expected symbol: gpu metrics absent");
    n->shutdown = nullptr;  // not initialised: the destructor only closes the library
    return nullptr;
  }
  if (int rc = init(); rc != kNvmlSuccess) {
    BC_LOG(Info, Telem, "nvml: nvmlInit_v2 failed (nvml error {}): gpu metrics absent", rc);
    n->shutdown = nullptr;
    return nullptr;
  }
  unsigned int devices = 0;
  if (count(&devices) != kNvmlSuccess || devices == 0) {
    BC_LOG(Info, Telem, "nvml: no gpu devices: gpu metrics absent");
    return nullptr;
  }
  if (device_index < 0 || static_cast<unsigned>(device_index) >= devices) device_index = 0;
  n->index = device_index;
  if (handle(static_cast<unsigned>(device_index), &n->device) != kNvmlSuccess) {
    BC_LOG(Warn, Telem, "nvml: no handle for gpu {}: gpu metrics absent", device_index);
    return nullptr;
  }
  char name[96] = {0};
  if (get_name(n->device, name, sizeof(name) - 1) == kNvmlSuccess) n->name = name;
  BC_LOG(Info, Telem, "nvml: sampling gpu {} ({})", device_index, n->name);
  return n;
}

Nvml::~Nvml() {
  if (shutdown != nullptr) shutdown();
  if (lib != nullptr) dlclose(lib);
}

bool Nvml::Read(GpuReading* out) {
  NvmlUtilization u{};
  NvmlMemory m{};
  if (get_util(device, &u) != kNvmlSuccess || get_mem(device, &m) != kNvmlSuccess) return false;
  out->util_pct = u.gpu;
  out->mem_used = static_cast<int64_t>(m.used);
  return true;
}

}  // namespace batchcast::telemetry
