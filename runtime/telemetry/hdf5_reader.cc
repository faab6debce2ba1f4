// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "telemetry/hdf5_reader.h"

#include <hdf5.h>

#include <cmath>
#include <limits>
#include <mutex>

#include "core/errors.h"
#include "core/hdf5_lock.h"
#include "telemetry/hdf5_handle.h"

namespace batchcast::telemetry {
namespace {

constexpr double kAbsentValue = std::numeric_limits<double>::quiet_NaN();

bool HasAttr(hid_t obj, const char* name) { return H5Aexists(obj, name) > 0; }

// A numeric attribute (any integer or float type, converted), or `fallback` when absent.
double NumberAttr(hid_t obj, const char* name, double fallback) {
  if (!HasAttr(obj, name)) return fallback;
  H5Handle a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  double v = fallback;
  if (!a.ok() || H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) < 0) return fallback;
  return v;
}

// A variable-length string attribute, or "" when absent.
std::string StringAttr(hid_t obj, const char* name) {
  if (!HasAttr(obj, name)) return "";
  H5Handle a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!a.ok()) return "";
  H5Handle type(H5Aget_type(a.get()), H5Tclose);
  if (!type.ok() || H5Tget_class(type.get()) != H5T_STRING) return "";
  std::string out;
  if (H5Tis_variable_str(type.get()) > 0) {
    char* p = nullptr;
    H5Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    if (H5Aread(a.get(), mem.get(), &p) < 0) return "";
    if (p != nullptr) out = p;
    H5Handle space(H5Aget_space(a.get()), H5Sclose);
    H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, &p);
  } else {
    out.resize(H5Tget_size(type.get()));
    if (H5Aread(a.get(), type.get(), out.data()) < 0) return "";
    out.resize(std::strlen(out.c_str()));
  }
  return out;
}

// series/<column> as doubles, or false when absent.
bool ReadColumn(hid_t series, const std::string& name, std::vector<double>* out) {
  if (H5Lexists(series, name.c_str(), H5P_DEFAULT) <= 0) return false;
  H5Handle ds(H5Dopen2(series, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) return false;
  H5Handle space(H5Dget_space(ds.get()), H5Sclose);
  if (H5Sget_simple_extent_ndims(space.get()) != 1) return false;
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space.get(), &n, nullptr);
  out->assign(static_cast<size_t>(n), 0.0);
  return n == 0 ||
         H5Dread(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out->data()) >= 0;
}

Result<RankData> ReadRank(hid_t file, const std::string& group, const std::string& path) {
  H5Handle g(H5Gopen2(file, group.c_str(), H5P_DEFAULT), H5Gclose);
  if (!g.ok()) return CorruptDataError("telemetry: {}: cannot open group {}", path, group);
  const hid_t id = g.get();
  RankData d;
  d.tags.experiment = StringAttr(id, "experiment");
  d.tags.workload = StringAttr(id, "workload");
  d.tags.run = StringAttr(id, "run");
  d.tags.host = StringAttr(id, "host");
  if (!ParseRole(StringAttr(id, "role"), &d.tags.role))
    return CorruptDataError("telemetry: {}: {} has no role attribute (leader|consumer|both)",
                            path, group);
  d.tags.rank = static_cast<int>(NumberAttr(id, "rank", 0));
  d.tags.local_rank = static_cast<int>(NumberAttr(id, "local_rank", 0));
  d.pid = static_cast<int>(NumberAttr(id, "pid", 0));
  d.start_unix_s = NumberAttr(id, "start_unix_s", 0);
  d.start_mono_ns = static_cast<int64_t>(NumberAttr(id, "start_mono_ns", 0));
  d.interval_s = NumberAttr(id, "interval_s", 1);
  d.wall_s = NumberAttr(id, "wall_s", 0);
  d.cpu_seconds = NumberAttr(id, "cpu_seconds", 0);
  d.peak_rss_bytes = static_cast<int64_t>(NumberAttr(id, "peak_rss_bytes", 0));
  d.cores_available = static_cast<int>(NumberAttr(id, "cores_available", 1));
  d.gpu_present = NumberAttr(id, "gpu_present", 0) != 0;
  d.gpu_name = StringAttr(id, "gpu_name");
  d.gpu_index = static_cast<int>(NumberAttr(id, "gpu_index", -1));
  d.annotations = StringAttr(id, "annotations");
  d.cpu_energy_source = StringAttr(id, "cpu_energy_source");
  d.gpu_energy_source = StringAttr(id, "gpu_energy_source");
  if (std::string trials = StringAttr(id, "trials"); !trials.empty())
    BC_RETURN_IF_ERROR(ParseTrialsJson(trials, &d.trials, &d.trial_totals)
                           .WithContext(fmt::format("{}: {}", path, group)));
  H5Handle series(H5Gopen2(id, "series", H5P_DEFAULT), H5Gclose);
  if (!series.ok()) return CorruptDataError("telemetry: {}: {} has no series group", path, group);
  std::vector<double> time;
  if (!ReadColumn(series.get(), "time_s", &time))
    return CorruptDataError("telemetry: {}: {}/series has no time_s", path, group);
  const size_t n = time.size();
  d.rows.assign(n * col::kNum, kAbsentValue);
  std::vector<double> v;
  for (int c = 0; c < col::kNum; ++c) {
    if (!ReadColumn(series.get(), ColumnName(c), &v) || v.size() != n) continue;  // NaN
    for (size_t r = 0; r < n; ++r) d.rows[r * col::kNum + c] = v[r];
    if (c == col::kCpuEnergy) d.cpu_energy_present = true;
    if (c == col::kGpuEnergy) d.gpu_energy_present = true;
  }
  return d;
}

}  // namespace

Result<std::vector<RankData>> ReadTelemetryFile(const std::string& path) {
  std::lock_guard lock(Hdf5Lock());
  H5E_auto2_t old_func = nullptr;
  void* old_data = nullptr;
  H5Eget_auto2(H5E_DEFAULT, &old_func, &old_data);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // failures become Status
  auto read = [&]() -> Result<std::vector<RankData>> {
    if (H5Fis_hdf5(path.c_str()) <= 0)
      return CorruptDataError("telemetry: {} is not an HDF5 file", path);
    H5Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!f.ok()) return IoError("telemetry: cannot open {}", path);
    if (StringAttr(f.get(), "format") != "batchcast-telemetry")
      return CorruptDataError("telemetry: {} is not a batchcast telemetry file (no format "
                              "attribute 'batchcast-telemetry')", path);
    std::vector<std::string> groups;
    H5Literate(
        f.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr,
        [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
          if (std::string(name).rfind("rank_", 0) == 0)
            static_cast<std::vector<std::string>*>(out)->push_back(name);
          return 0;
        },
        &groups);
    std::vector<RankData> ranks;
    for (const std::string& g : groups) {
      BC_ASSIGN_OR_RETURN(RankData d, ReadRank(f.get(), g, path));
      ranks.push_back(std::move(d));
    }
    return ranks;
  };
  auto result = read();
  H5Eset_auto2(H5E_DEFAULT, old_func, old_data);
  return result;
}

}  // namespace batchcast::telemetry
