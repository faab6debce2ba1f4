// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Energy where the machine tells it (docs/telemetry.md "Energy"): the CPU packages' RAPL
// counters through the kernel's powercap interface, read from sysfs without any library.
// (GPU energy comes from NVML, process_stats.h.) When no counter can be read the reader is
// absent and says why: the outputs then hold no energy column and a note, never a number
// that was not measured.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace batchcast::telemetry {

inline constexpr const char* kPowercapRoot = "/sys/class/powercap";

// The package zones of RAPL under a powercap root: the directories `intel-rapl:<N>` (one
// colon; `intel-rapl:<N>:<M>` are parts of package N, already inside its count, and the
// `intel-rapl-mmio` zones repeat the same packages) whose `name` starts with "package"
// (AMD CPUs use the same driver and names). Each counter (`energy_uj`, microjoules) wraps at
// its `max_energy_range_uj`; Read() adds the increments since Open, across wraps, as long as
// it is called at least once per wrap period (minutes at full power; the sampler reads every
// interval). DRAM zones are not counted.
class RaplReader {
 public:
  // Null when no package zone can be read; *why then names the path and the cause (no
  // powercap tree, no package zone, energy_uj readable by root only, ...).
  static std::unique_ptr<RaplReader> Open(const std::string& root, std::string* why);
  // Joules used by all packages since Open. False (and *why) when a counter could not be
  // read this time; the total stays where it was.
  bool Read(double* joules, std::string* why);
  // "RAPL powercap: package-0, package-1 (/sys/class/powercap)".
  const std::string& description() const { return description_; }

 private:
  struct Zone {
    std::string energy_path;
    std::string name;
    uint64_t max_range_uj = 0;
    uint64_t last_uj = 0;
  };
  RaplReader() = default;
  std::vector<Zone> zones_;
  double total_j_ = 0;
  std::string description_;
};

// Reads one unsigned decimal number from a sysfs file; false and *error_no on failure
// (ENODATA for a file that does not hold a number).
bool ReadSysfsNumber(const std::string& path, uint64_t* value, int* error_no);

}  // namespace batchcast::telemetry
