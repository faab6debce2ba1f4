// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "telemetry/run_outputs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/errors.h"
#include "core/log.h"
#include "core/path_pattern.h"
#include "telemetry/sinks.h"
#include "telemetry/spec.h"

namespace batchcast::telemetry {
namespace {

constexpr std::string_view kKindNames[] = {"job",      "leader",   "service",   "consumer",
                                           "trainer",  "producer", "train-many"};

std::string ThisHost() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

Status PathError(int e, std::string_view what, const std::string& path, std::string_view doing) {
  return FailedPreconditionError(
      "{} {}: cannot {}: {} (choose a writable path; it is checked when the run starts so that "
      "no run is lost to it at the end)",
      what, path, doing, std::strerror(e));
}

// mkdir -p of `dir`; the error names the component that failed.
Status MakeDirs(const std::string& dir, std::string_view what) {
  if (dir.empty()) return Status::Ok();
  std::string part;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    part = dir.substr(0, pos);
    if (part.empty() || part == "/") continue;
    struct stat st {};
    if (stat(part.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode))
        return PathError(ENOTDIR, what, dir, fmt::format("create it ({} is not a directory)", part));
      continue;
    }
    if (mkdir(part.c_str(), 0777) != 0 && errno != EEXIST)
      return PathError(errno, what, dir, fmt::format("create directory {}", part));
  }
  return Status::Ok();
}

// Proves that `file` can be created: creates it (open flags plus `extra_flags`) and removes it.
Status CreateAndRemove(const std::string& file, int extra_flags, std::string_view what,
                       const std::string& path, std::string_view doing) {
  int fd = RetryEintr([&] {
    return open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | extra_flags, 0666);
  });
  if (fd < 0) return PathError(errno, what, path, doing);
  close(fd);
  unlink(file.c_str());
  return Status::Ok();
}

std::string Parent(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// A file in a run directory, claimed for this process: created exclusively, kept empty.
Result<std::string> ClaimRunFile(const std::string& dir, const std::string& stem,
                                 const std::string& ext, std::string_view what) {
  for (int n = 1; n <= 1000; ++n) {
    const std::string path =
        fmt::format("{}/{}{}{}", dir, stem, n == 1 ? "" : "-" + std::to_string(n), ext);
    int fd = RetryEintr(
        [&] { return open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666); });
    if (fd >= 0) {
      close(fd);
      return path;
    }
    if (errno != EEXIST) return PathError(errno, what, path, "create it");
  }
  return PathError(EEXIST, what, fmt::format("{}/{}{}", dir, stem, ext), "find a free name");
}

std::string Expand(const std::string& path, const OutputIdentity& who) {
  if (path.empty()) return path;
  if (path.find('%') != std::string::npos) return log::ExpandPathPattern(path, who.rank);
  return who.gathered ? path : TaggedPath(path, who.tag);
}

}  // namespace

std::string_view ProcessKindName(ProcessKind kind) { return kKindNames[static_cast<int>(kind)]; }

std::string RunFileStem(ProcessKind kind, const std::string& host, int pid) {
  std::string h = host.empty() ? "unknown" : host;
  for (char& c : h)
    if (c == '/' || c == ' ') c = '_';
  return fmt::format("{}-{}-{}", ProcessKindName(kind), h, pid);
}

std::string TaggedPath(const std::string& path, const std::string& tag) {
  if (path.empty() || tag.empty()) return path;
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos || dot == 0 || (slash != std::string::npos && dot == slash + 1))
    return path + "." + tag;
  return path.substr(0, dot) + "." + tag + path.substr(dot);
}

Status PrepareOutputDir(const std::string& path, std::string_view what) {
  if (path.empty()) return Status::Ok();
  BC_RETURN_IF_ERROR(MakeDirs(path, what));
  // Permissions alone do not tell (root ignores them, a read-only mount does not): write.
  const std::string probe = fmt::format("{}/.batchcast-probe-{}", path, getpid());
  return CreateAndRemove(probe, O_TRUNC, what, path, "write into it");
}

Status PrepareOutputFile(const std::string& path, std::string_view what) {
  if (path.empty() || path.rfind("/dev/", 0) == 0) {
    // /dev/stdout and friends: opened at the end as they are.
    if (!path.empty() && access(path.c_str(), W_OK) != 0)
      return PathError(errno, what, path, "open it for writing");
    return Status::Ok();
  }
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return PathError(EISDIR, what, path, "write it");
    int fd = RetryEintr([&] { return open(path.c_str(), O_WRONLY | O_CLOEXEC); });
    if (fd < 0) return PathError(errno, what, path, "open it for writing");
    close(fd);  // not truncated: the old file stays until the run writes the new one
    return Status::Ok();
  }
  if (errno == ENOTDIR) return PathError(errno, what, path, "create it");
  BC_RETURN_IF_ERROR(MakeDirs(Parent(path), what));
  return CreateAndRemove(path, O_EXCL, what, path, "create it");
}

Result<Sinks> PrepareSinks(const TelemetrySpec& spec, const OutputIdentity& who) {
  Sinks out;
  out.print_summary = spec.sinks.print_summary;
  out.summary_to = spec.sinks.summary_to;
  if (who.gathered && who.rank != 0) return out;  // rank 0 writes the gathered files
  if (!spec.dir.empty()) {
    const std::string dir = log::ExpandPathPattern(spec.dir, who.rank);
    BC_RETURN_IF_ERROR(PrepareOutputDir(dir, "telemetry run directory"));
    const std::string stem = RunFileStem(who.kind, ThisHost(), static_cast<int>(getpid()));
    BC_ASSIGN_OR_RETURN(out.hdf5, ClaimRunFile(dir, stem, ".h5", "telemetry file"));
    // The other outputs share the claimed name (stem-N.h5 -> stem-N.json).
    const std::string base = out.hdf5.substr(0, out.hdf5.size() - 3);
    if (!spec.sinks.csv.empty()) out.csv = base + ".csv";
    if (!spec.sinks.json.empty()) out.json = base + ".json";
    if (!spec.sinks.trace.empty()) out.trace = base + ".trace.json";
  } else {
    out.hdf5 = Expand(spec.sinks.hdf5, who);
    out.csv = Expand(spec.sinks.csv, who);
    out.json = Expand(spec.sinks.json, who);
    out.trace = Expand(spec.sinks.trace, who);
  }
  BC_RETURN_IF_ERROR(PrepareOutputFile(out.hdf5, "telemetry hdf5 file"));
  BC_RETURN_IF_ERROR(PrepareOutputFile(out.csv, "telemetry csv file"));
  if (!out.csv.empty() && out.csv.rfind("/dev/", 0) != 0)
    BC_RETURN_IF_ERROR(PrepareOutputFile(NamedCsvPath(out.csv), "telemetry named-series csv"));
  BC_RETURN_IF_ERROR(PrepareOutputFile(out.json, "telemetry json file"));
  BC_RETURN_IF_ERROR(PrepareOutputFile(out.trace, "telemetry trace"));
  return out;
}

}  // namespace batchcast::telemetry
