// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The RAPL reader against a fake powercap tree (this machine has none): package zones only,
// counter wraps, unreadable counters and a missing tree say why; the collector's energy
// column follows the counters exactly; without a tree the column is absent with the reason.
#include "telemetry/energy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "telemetry/collector.h"
#include "tests/unit/telemetry/scratch_dir.h"

namespace batchcast::telemetry {
namespace {

namespace fs = std::filesystem;

class EnergyTest : public ScratchDirTest {
 protected:
  void Write(const std::string& rel, const std::string& text) {
    fs::create_directories((dir_ / rel).parent_path());
    std::ofstream(dir_ / rel) << text << "\n";
  }
  // A zone directory with a name, a counter and its range.
  void Zone(const std::string& dir, const std::string& name, uint64_t uj, uint64_t range) {
    Write(dir + "/name", name);
    Write(dir + "/energy_uj", std::to_string(uj));
    Write(dir + "/max_energy_range_uj", std::to_string(range));
  }
};

TEST_F(EnergyTest, SumsPackageZonesOnlyAndHandlesTheWrap) {
  Zone("intel-rapl:0", "package-0", 1000000, 10000000);
  Zone("intel-rapl:1", "package-1", 9500000, 10000000);
  Zone("intel-rapl:0:0", "core", 5, 10000000);          // part of package 0: not added again
  Zone("intel-rapl-mmio:0", "package-0", 7, 10000000);   // the same package again: ignored
  Zone("intel-rapl:2", "psys", 3, 10000000);             // not a package
  std::string why;
  auto r = RaplReader::Open(dir_.string(), &why);
  ASSERT_NE(r, nullptr) << why;
  EXPECT_NE(r->description().find("package-0, package-1"), std::string::npos) << r->description();
  double j = -1;
  ASSERT_TRUE(r->Read(&j, &why)) << why;
  EXPECT_EQ(j, 0.0);  // nothing since Open
  Write("intel-rapl:0/energy_uj", "3500000");  // +2.5 J
  Write("intel-rapl:1/energy_uj", "500000");   // wrapped: +0.5 J to the range, +0.5 J after
  Write("intel-rapl:0:0/energy_uj", "9999999");
  ASSERT_TRUE(r->Read(&j, &why)) << why;
  EXPECT_NEAR(j, 3.5, 1e-9);
  Write("intel-rapl:0/energy_uj", "4500000");  // +1 J
  ASSERT_TRUE(r->Read(&j, &why));
  EXPECT_NEAR(j, 4.5, 1e-9);
}

TEST_F(EnergyTest, SaysWhyWhenNothingCanBeRead) {
  std::string why;
  EXPECT_EQ(RaplReader::Open((dir_ / "absent").string(), &why), nullptr);
  EXPECT_NE(why.find("no " + (dir_ / "absent").string()), std::string::npos) << why;
  EXPECT_NE(why.find("virtual machine"), std::string::npos) << why;
  Zone("intel-rapl:0:0", "core", 1, 10);  // sub-zones alone are no package
  EXPECT_EQ(RaplReader::Open(dir_.string(), &why), nullptr);
  EXPECT_NE(why.find("no RAPL package zone"), std::string::npos) << why;
  Zone("intel-rapl:0", "package-0", 1, 10);
  fs::remove(dir_ / "intel-rapl:0/energy_uj");
  fs::create_directory(dir_ / "intel-rapl:0/energy_uj");  // unreadable as a number
  EXPECT_EQ(RaplReader::Open(dir_.string(), &why), nullptr);
  EXPECT_NE(why.find("intel-rapl:0/energy_uj"), std::string::npos) << why;
}

TEST_F(EnergyTest, ACounterThatBecomesUnreadableKeepsTheTotalAndSaysSo) {
  Zone("intel-rapl:0", "package-0", 100, 1000000);
  std::string why;
  auto r = RaplReader::Open(dir_.string(), &why);
  ASSERT_NE(r, nullptr);
  double j = 0;
  Write("intel-rapl:0/energy_uj", "2000100");  // beyond the range: not an increment
  ASSERT_TRUE(r->Read(&j, &why));
  EXPECT_EQ(j, 0.0);
  Write("intel-rapl:0/energy_uj", "garbage");
  EXPECT_FALSE(r->Read(&j, &why));
  EXPECT_NE(why.find("energy_uj"), std::string::npos) << why;
  EXPECT_EQ(j, 0.0);
}

TEST_F(EnergyTest, CollectorRecordsThePackageEnergyColumnFromTheTree) {
  Zone("intel-rapl:0", "package-0", 0, 1000000000);
  CollectorOptions o;
  o.gpu = false;
  o.interval_ms = 60000;  // rows only when asked (Snapshot)
  o.powercap_root = dir_.string();
  Tags tags;
  tags.role = Role::kLeader;
  auto c = std::move(Collector::Create(tags, o)).value();
  Write("intel-rapl:0/energy_uj", "7250000");
  RankData d = c->Snapshot();
  ASSERT_TRUE(d.cpu_energy_present);
  EXPECT_NE(d.cpu_energy_source.find("RAPL powercap: package-0"), std::string::npos);
  EXPECT_NEAR(d.Total(col::kCpuEnergy), 7.25, 1e-9);
  EXPECT_TRUE(ColumnPresent(d, col::kCpuEnergy));
  EXPECT_FALSE(ColumnPresent(d, col::kGpuEnergy));
  EXPECT_EQ(d.gpu_energy_source, "n/a: telemetry gpu=off");
  Write("intel-rapl:0/energy_uj", "8250000");
  d = c->Snapshot();
  EXPECT_NEAR(d.Total(col::kCpuEnergy), 8.25, 1e-9);
}

TEST_F(EnergyTest, WithoutATreeTheColumnIsAbsentAndTheReasonKept) {
  CollectorOptions o;
  o.gpu = false;
  o.interval_ms = 60000;
  o.powercap_root = (dir_ / "absent").string();
  auto c = std::move(Collector::Create(Tags{}, o)).value();
  RankData d = c->Snapshot();
  EXPECT_FALSE(d.cpu_energy_present);
  EXPECT_FALSE(ColumnPresent(d, col::kCpuEnergy));
  EXPECT_TRUE(std::isnan(d.Total(col::kCpuEnergy)));
  EXPECT_EQ(d.cpu_energy_source.rfind("n/a: no ", 0), 0u) << d.cpu_energy_source;
}

}  // namespace
}  // namespace batchcast::telemetry
