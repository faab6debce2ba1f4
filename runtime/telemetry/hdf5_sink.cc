// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The HDF5 sink, over the HDF5 support in core/hdf5_util.h (handles, errors, attributes).
#include <hdf5.h>

#include <cmath>
#include <ctime>
#include <mutex>
#include <type_traits>

#include "core/errors.h"
#include "core/hdf5_lock.h"
#include "core/hdf5_util.h"
#include "core/log.h"
#include "telemetry/hdf5_handle.h"
#include "telemetry/sinks.h"

namespace batchcast::telemetry {
namespace {

class Writer {
 public:
  explicit Writer(std::string path) : path_(std::move(path)) {}

  // HDF5 failures of this file: "telemetry: <path>: hdf5: <what>: <HDF5's message>".
  Status Check(bool ok, const std::string& what) const {
    if (ok) return Status::Ok();
    return Hdf5Error(StatusCode::kIoError, what);
  }

  Status StringAttr(hid_t obj, const char* name, const std::string& value) {
    return WriteStringAttribute(obj, name, value, Hdf5String::kVariable);
  }

  template <typename T>
  Status NumberAttr(hid_t obj, const char* name, T value) {
    if constexpr (std::is_floating_point_v<T>) return WriteDoubleAttribute(obj, name, value);
    else return WriteIntAttribute(obj, name, static_cast<int64_t>(value));
  }

  Status Dataset(hid_t group, const std::string& name, hid_t type, const void* data,
                 size_t n) {
    return WriteDataset1D(group, name.c_str(), type, type, data, n, path_);
  }

  // A group `name` in `parent`, or the error naming it.
  Result<H5Id> Group(hid_t parent, const std::string& name) {
    H5Id g(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    BC_RETURN_IF_ERROR(Check(g.valid(), fmt::format("cannot create group '{}'", name)));
    return g;
  }

  Status Series(hid_t group, const RankData& d) {
    int64_t n = d.num_rows();
    std::vector<int64_t> ints(n);
    std::vector<double> reals(n);
    for (int c = 0; c < col::kNum; ++c) {
      if (!ColumnPresent(d, c)) continue;  // absent, not zero
      std::string name = ColumnName(c);
      if (ColumnIsInteger(c) && !ColumnIsGpu(c)) {
        for (int64_t r = 0; r < n; ++r) ints[r] = static_cast<int64_t>(d.At(r, c));
        BC_RETURN_IF_ERROR(Dataset(group, name, H5T_NATIVE_INT64, ints.data(), n));
      } else {
        for (int64_t r = 0; r < n; ++r) reals[r] = d.At(r, c);
        BC_RETURN_IF_ERROR(Dataset(group, name, H5T_NATIVE_DOUBLE, reals.data(), n));
      }
    }
    return Status::Ok();
  }

  // named/<name>: an (n, 2) float64 dataset of (time_s, value) rows per named series; the
  // '/' of a name makes the intermediate groups.
  Status Named(hid_t group, const RankData& d) {
    H5Id lcpl(H5Pcreate(H5P_LINK_CREATE));
    BC_RETURN_IF_ERROR(Check(lcpl.valid() && H5Pset_create_intermediate_group(lcpl.get(), 1) >= 0,
                             "cannot make a link creation property list"));
    std::vector<double> rows;
    for (const NamedSeries& s : d.named) {
      const size_t n = s.time_s.size();
      rows.resize(2 * n);
      for (size_t i = 0; i < n; ++i) rows[2 * i] = s.time_s[i], rows[2 * i + 1] = s.value[i];
      hsize_t dims[2] = {static_cast<hsize_t>(n), 2};
      H5Id space(H5Screate_simple(2, dims, nullptr));
      H5Id ds(H5Dcreate2(group, s.name.c_str(), H5T_NATIVE_DOUBLE, space.get(), lcpl.get(),
                         H5P_DEFAULT, H5P_DEFAULT));
      BC_RETURN_IF_ERROR(Check(
          ds.valid() && (n == 0 || H5Dwrite(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL,
                                            H5P_DEFAULT, rows.data()) >= 0),
          fmt::format("cannot write dataset 'named/{}'", s.name)));
      BC_RETURN_IF_ERROR(StringAttr(ds.get(), "columns", "time_s,value"));
      BC_RETURN_IF_ERROR(NumberAttr(ds.get(), "stride", s.stride));
    }
    return Status::Ok();
  }

  Status Spans(hid_t group, const RankData& d) {
    size_t n = d.spans.size();
    std::vector<int32_t> kind(n), tid(n);
    std::vector<uint64_t> seq(n);
    std::vector<int64_t> begin(n), end(n);
    for (size_t i = 0; i < n; ++i) {
      kind[i] = d.spans[i].kind;
      tid[i] = d.spans[i].tid;
      seq[i] = d.spans[i].seq;
      begin[i] = d.spans[i].begin_ns;
      end[i] = d.spans[i].end_ns;
    }
    BC_RETURN_IF_ERROR(Dataset(group, "kind", H5T_NATIVE_INT32, kind.data(), n));
    BC_RETURN_IF_ERROR(Dataset(group, "tid", H5T_NATIVE_INT32, tid.data(), n));
    BC_RETURN_IF_ERROR(Dataset(group, "seq", H5T_NATIVE_UINT64, seq.data(), n));
    BC_RETURN_IF_ERROR(Dataset(group, "begin_ns", H5T_NATIVE_INT64, begin.data(), n));
    BC_RETURN_IF_ERROR(Dataset(group, "end_ns", H5T_NATIVE_INT64, end.data(), n));
    std::string names;
    for (int k = 0; k < kNumSpanKinds; ++k)
      names += (k ? "," : "") + std::string(SpanKindName(static_cast<SpanKind>(k)));
    BC_RETURN_IF_ERROR(StringAttr(group, "kind_names", names));
    return NumberAttr(group, "dropped", d.spans_dropped);
  }

  Status RankGroup(hid_t file, const RankData& d, const RankStats& s) {
    std::string name = fmt::format("rank_{:05d}", d.tags.rank);
    BC_ASSIGN_OR_RETURN(H5Id g, Group(file, name));
    hid_t id = g.get();
    BC_RETURN_IF_ERROR(StringAttr(id, "experiment", d.tags.experiment));
    BC_RETURN_IF_ERROR(StringAttr(id, "workload", d.tags.workload));
    BC_RETURN_IF_ERROR(StringAttr(id, "run", d.tags.run));
    BC_RETURN_IF_ERROR(StringAttr(id, "host", d.tags.host));
    BC_RETURN_IF_ERROR(StringAttr(id, "role", std::string(RoleName(d.tags.role))));
    BC_RETURN_IF_ERROR(NumberAttr(id, "rank", d.tags.rank));
    BC_RETURN_IF_ERROR(NumberAttr(id, "local_rank", d.tags.local_rank));
    BC_RETURN_IF_ERROR(NumberAttr(id, "pid", d.pid));
    BC_RETURN_IF_ERROR(NumberAttr(id, "start_unix_s", d.start_unix_s));
    BC_RETURN_IF_ERROR(NumberAttr(id, "start_mono_ns", d.start_mono_ns));
    BC_RETURN_IF_ERROR(NumberAttr(id, "interval_s", d.interval_s));
    BC_RETURN_IF_ERROR(NumberAttr(id, "wall_s", d.wall_s));
    BC_RETURN_IF_ERROR(NumberAttr(id, "cpu_seconds", d.cpu_seconds));
    BC_RETURN_IF_ERROR(NumberAttr(id, "peak_rss_bytes", d.peak_rss_bytes));
    BC_RETURN_IF_ERROR(NumberAttr(id, "cores_available", d.cores_available));
    BC_RETURN_IF_ERROR(NumberAttr(id, "gpu_present", d.gpu_present ? 1 : 0));
    if (d.gpu_present) BC_RETURN_IF_ERROR(StringAttr(id, "gpu_name", d.gpu_name));
    if (d.gpu_present) BC_RETURN_IF_ERROR(NumberAttr(id, "gpu_index", d.gpu_index));
    BC_RETURN_IF_ERROR(StringAttr(id, "cpu_energy_source", d.cpu_energy_source));
    BC_RETURN_IF_ERROR(StringAttr(id, "gpu_energy_source", d.gpu_energy_source));
    if (!d.trials.empty())
      BC_RETURN_IF_ERROR(StringAttr(id, "trials", TrialsJson(d.trials, d.trial_totals)));
    if (!d.annotations.empty())
      BC_RETURN_IF_ERROR(StringAttr(id, "annotations", d.annotations));
    BC_RETURN_IF_ERROR(NumberAttr(id, "samples_per_s", s.samples_per_s));
    BC_RETURN_IF_ERROR(NumberAttr(id, "batches_per_s", s.batches_per_s));
    BC_RETURN_IF_ERROR(NumberAttr(id, "data_wait_pct", s.data_wait_pct));
    BC_RETURN_IF_ERROR(NumberAttr(id, "step_ms", s.step_ms));
    BC_RETURN_IF_ERROR(NumberAttr(id, "cpu_cores", s.cpu_cores));
    BC_RETURN_IF_ERROR(NumberAttr(id, "worker_util", s.worker_util));
    BC_ASSIGN_OR_RETURN(H5Id series, Group(id, "series"));
    BC_RETURN_IF_ERROR(Series(series.get(), d));
    BC_ASSIGN_OR_RETURN(H5Id named, Group(id, "named"));
    BC_RETURN_IF_ERROR(Named(named.get(), d));
    BC_ASSIGN_OR_RETURN(H5Id spans, Group(id, "spans"));
    return Spans(spans.get(), d);
  }

  Status Write(const std::vector<RankData>& ranks, const JobSummary& j, const Diagnosis& diag,
               const std::string& text) {
    H5Id file(H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    BC_RETURN_IF_ERROR(Check(file.valid(), "cannot create the file"));
    hid_t f = file.get();
    BC_RETURN_IF_ERROR(StringAttr(f, "format", "batchcast-telemetry"));
    BC_RETURN_IF_ERROR(NumberAttr(f, "format_version", kFormatVersion));
    BC_RETURN_IF_ERROR(StringAttr(f, "experiment", j.experiment));
    BC_RETURN_IF_ERROR(StringAttr(f, "workload", j.workload));
    BC_RETURN_IF_ERROR(StringAttr(f, "run", j.run));
    BC_RETURN_IF_ERROR(NumberAttr(f, "nranks", static_cast<int64_t>(ranks.size())));
    BC_RETURN_IF_ERROR(NumberAttr(f, "created_unix_s", static_cast<double>(std::time(nullptr))));
    BC_RETURN_IF_ERROR(NumberAttr(f, "wall_s", j.wall_s));
    BC_RETURN_IF_ERROR(StringAttr(f, "summary", text));
    BC_RETURN_IF_ERROR(StringAttr(f, "bottleneck", std::string(BottleneckName(diag.bottleneck))));
    BC_RETURN_IF_ERROR(StringAttr(f, "bottleneck_stage", diag.stage));
    std::string diagnosis = diag.headline;
    for (const auto& n : diag.notes) diagnosis += "\n" + n;
    BC_RETURN_IF_ERROR(StringAttr(f, "diagnosis", diagnosis));
    for (const auto& d : ranks) {
      RankStats s = ComputeRankStats(d);
      BC_RETURN_IF_ERROR(RankGroup(f, d, s));
    }
    return Check(H5Fflush(f, H5F_SCOPE_GLOBAL) >= 0, "cannot flush the file");
  }

 private:
  std::string path_;
};

}  // namespace

Status WriteHdf5(const std::string& path, const std::vector<RankData>& ranks,
                 const JobSummary& summary, const Diagnosis& diagnosis,
                 const std::string& summary_text) {
  Hdf5Init();  // HDF5 failures become Status, not a dump on stderr
  std::lock_guard lock(Hdf5Lock());
  Status s = Writer(path).Write(ranks, summary, diagnosis, summary_text)
                 .WithContext(fmt::format("telemetry: {}", path));
  if (!s.ok()) BC_LOG(Error, Telem, "{}", s.message());
  return s;
}

}  // namespace batchcast::telemetry
