// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "telemetry/process_stats.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

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


double NodeBusyCpuSeconds() {
  int fd = RetryEintr([] { return open("/proc/stat", O_RDONLY | O_CLOEXEC); });
  if (fd < 0) return std::numeric_limits<double>::quiet_NaN();
  char buf[512] = {0};
  ssize_t n = RetryEintr([&] { return read(fd, buf, sizeof(buf) - 1); });
  close(fd);
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0,
                     softirq = 0, steal = 0;
  if (n <= 0 || std::sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice,
                            &system, &idle, &iowait, &irq, &softirq, &steal) != 8)
    return std::numeric_limits<double>::quiet_NaN();
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  return static_cast<double>(user + nice + system + irq + softirq + steal) / ticks;
}

bool ReadOtherProcess(int pid, OtherProcess* out) {
  if (pid <= 0) return false;
  const std::string dir = "/proc/" + std::to_string(pid);
  int fd = RetryEintr([&] { return open((dir + "/stat").c_str(), O_RDONLY | O_CLOEXEC); });
  if (fd < 0) return false;
  char buf[1024] = {0};
  ssize_t n = RetryEintr([&] { return read(fd, buf, sizeof(buf) - 1); });
  close(fd);
  if (n <= 0) return false;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses; fields after the
  // last ')' are fixed: utime and stime are fields 14 and 15, starttime 22.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return false;
  unsigned long long utime = 0, stime = 0, start = 0;
  if (std::sscanf(p + 2,
                  "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d "
                  "%*d %llu",
                  &utime, &stime, &start) != 3)
    return false;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  out->cpu_s = static_cast<double>(utime + stime) / ticks;
  out->start_ticks = start;
  out->rss_bytes = 0;
  fd = RetryEintr([&] { return open((dir + "/statm").c_str(), O_RDONLY | O_CLOEXEC); });
  if (fd >= 0) {
    char m[128] = {0};
    n = RetryEintr([&] { return read(fd, m, sizeof(m) - 1); });
    close(fd);
    long long size = 0, resident = 0;
    if (n > 0 && std::sscanf(m, "%lld %lld", &size, &resident) == 2)
      out->rss_bytes = static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
  }
  return true;
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
  // Energy: optional entry points (the total-energy counter needs Volta or later).
  if (!Resolve(lib, "nvmlDeviceGetTotalEnergyConsumption", &n->get_energy)) n->get_energy = nullptr;
  if (!Resolve(lib, "nvmlDeviceGetPowerUsage", &n->get_power)) n->get_power = nullptr;
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
  unsigned long long mj = 0;
  unsigned int mw = 0;
  out->energy_mj = get_energy != nullptr && get_energy(device, &mj) == kNvmlSuccess
                       ? static_cast<int64_t>(mj) : -1;
  out->power_mw = get_power != nullptr && get_power(device, &mw) == kNvmlSuccess
                      ? static_cast<int64_t>(mw) : -1;
  return true;
}

}  // namespace batchcast::telemetry
