// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "telemetry/energy.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/errors.h"
#include "core/log.h"

namespace batchcast::telemetry {
namespace {

bool ReadSysfsText(const std::string& path, std::string* out, int* error_no) {
  int fd = RetryEintr([&] { return open(path.c_str(), O_RDONLY | O_CLOEXEC); });
  if (fd < 0) {
    *error_no = errno;
    return false;
  }
  char buf[128] = {0};
  ssize_t n = RetryEintr([&] { return read(fd, buf, sizeof(buf) - 1); });
  int saved = errno;
  close(fd);
  if (n < 0) {
    *error_no = saved;
    return false;
  }
  out->assign(buf, static_cast<size_t>(n));
  while (!out->empty() && (out->back() == '\n' || out->back() == ' ')) out->pop_back();
  return true;
}

// "intel-rapl:3" -> true (a package zone directory); "intel-rapl:0:1", "intel-rapl-mmio:0"
// and anything else -> false.
bool IsPackageZoneDir(const std::string& name) {
  const std::string prefix = "intel-rapl:";
  if (name.compare(0, prefix.size(), prefix) != 0 || name.size() == prefix.size()) return false;
  return std::all_of(name.begin() + static_cast<long>(prefix.size()), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

std::string ErrnoText(int e) { return std::strerror(e); }

std::string UnreadableWhy(const std::string& path, int e) {
  if (e == EACCES || e == EPERM)
    return fmt::format(
        "{} is readable by root only (kernels since 5.10 restrict RAPL counters, "
        "CVE-2020-8694): run as root, or let a udev rule or chmod make it readable",
        path);
  return fmt::format("cannot read {}: {}", path, ErrnoText(e));
}

}  // namespace

bool ReadSysfsNumber(const std::string& path, uint64_t* value, int* error_no) {
  std::string text;
  if (!ReadSysfsText(path, &text, error_no)) return false;
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
    *error_no = ENODATA;
    return false;
  }
  errno = 0;
  *value = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE) {
    *error_no = ERANGE;
    return false;
  }
  return true;
}

std::unique_ptr<RaplReader> RaplReader::Open(const std::string& root, std::string* why) {
  DIR* dir = opendir(root.c_str());
  if (dir == nullptr) {
    *why = errno == ENOENT
               ? fmt::format("no {} (the kernel exposes no powercap interface: a virtual "
                             "machine, a CPU without RAPL, or the intel_rapl driver not loaded)",
                             root)
               : fmt::format("cannot list {}: {}", root, ErrnoText(errno));
    return nullptr;
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    if (IsPackageZoneDir(e->d_name)) names.emplace_back(e->d_name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  std::unique_ptr<RaplReader> r(new RaplReader());
  std::string first_problem;
  for (const std::string& n : names) {
    const std::string zone = root + "/" + n;
    std::string zone_name;
    int e = 0;
    if (!ReadSysfsText(zone + "/name", &zone_name, &e) || zone_name.rfind("package", 0) != 0)
      continue;  // not a package (psys, dram at the top level on some machines)
    Zone z;
    z.name = zone_name;
    z.energy_path = zone + "/energy_uj";
    if (!ReadSysfsNumber(z.energy_path, &z.last_uj, &e)) {
      if (first_problem.empty()) first_problem = UnreadableWhy(z.energy_path, e);
      continue;
    }
    if (!ReadSysfsNumber(zone + "/max_energy_range_uj", &z.max_range_uj, &e) ||
        z.max_range_uj == 0) {
      if (first_problem.empty())
        first_problem = fmt::format("{}/max_energy_range_uj is missing or 0: the counter's "
                                    "wrap cannot be handled", zone);
      continue;
    }
    r->zones_.push_back(std::move(z));
  }
  if (r->zones_.empty()) {
    *why = !first_problem.empty()
               ? first_problem
               : fmt::format("{} has no RAPL package zone (intel-rapl:<N> named package-<N>)",
                             root);
    return nullptr;
  }
  std::string list;
  for (const Zone& z : r->zones_) list += (list.empty() ? "" : ", ") + z.name;
  r->description_ = fmt::format("RAPL powercap: {} ({})", list, root);
  return r;
}

bool RaplReader::Read(double* joules, std::string* why) {
  bool ok = true;
  for (Zone& z : zones_) {
    uint64_t now = 0;
    int e = 0;
    if (!ReadSysfsNumber(z.energy_path, &now, &e)) {
      if (ok) *why = UnreadableWhy(z.energy_path, e);
      ok = false;
      continue;
    }
    // The counter runs from 0 to max_energy_range_uj and starts again at 0.
    uint64_t delta = now >= z.last_uj ? now - z.last_uj : (z.max_range_uj - z.last_uj) + now;
    if (delta > z.max_range_uj) delta = 0;  // a value out of range: not an increment
    z.last_uj = now;
    total_j_ += static_cast<double>(delta) * 1e-6;
  }
  *joules = total_j_;
  return ok;
}

}  // namespace batchcast::telemetry
