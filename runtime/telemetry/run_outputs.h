// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Where a run's outputs go, decided and checked when the run starts (docs/telemetry.md
// "Run directory" and "Outputs are checked at the start"):
//
//   - One run, one directory: with `telemetry=dir:RUN` every process of the run, whatever its
//     front door, writes RUN/<kind>-<host>-<pid>.h5 (RunFileStem: the one naming rule; a
//     second collector of the same kind in a process adds -2, -3, ...). The file is created,
//     empty, when the process starts, so a process killed before it wrote shows up as an
//     empty file (`batchcast report RUN` lists it) and no two processes claim one name.
//   - Explicit paths (hdf5=run.h5, ...) keep working: %h, %p and %r are expanded, and a
//     process that writes alone inserts its tag (run.h5 -> run.<tag>.h5; TaggedPath).
//   - Every output path of a run (telemetry sinks, trace, report, checkpoint directory) is
//     created or refused at the start, with a message naming what it is for, the path and the
//     cause, instead of failing after the run.
#pragma once

#include <string>
#include <string_view>

#include "batchcast/status.h"

namespace batchcast::telemetry {

struct Sinks;
struct TelemetrySpec;

// What kind of process writes the files (the first part of a run-directory file name).
enum class ProcessKind : int {
  kJob = 0,    // the MPI Runtime (and the multi-node leader): rank 0 writes every rank
  kLeader,     // a leader alone: batchcast-run's leader task, Python Leader, C API leader
  kService,    // batchcast serve
  kConsumer,   // a consumer alone: Python Consumer, C API consumer
  kTrainer,    // a trainer under batchcast-run (AttachFromEnvironment)
  kProducer,   // a Python Producer (a DataLoader as the source)
  kTrainMany,  // batchcast train-many attached to a leader or service
};
std::string_view ProcessKindName(ProcessKind kind);  // "job", "leader", ..., "train-many"

// Who is about to write: the process kind and rank, whether the MPI gather writes for it.
struct OutputIdentity {
  ProcessKind kind = ProcessKind::kConsumer;
  int rank = 0;           // %r in explicit paths
  bool gathered = false;  // Finish(comm): rank 0 writes every rank, the others nothing
  std::string tag;        // explicit paths of a process writing alone: run.h5 -> run.<tag>.h5
};

// "<kind>-<host>-<pid>": the one rule that names a process's files in a run directory.
std::string RunFileStem(ProcessKind kind, const std::string& host, int pid);

// "run.h5" + "rank3" -> "run.rank3.h5"; "out/run" -> "out/run.rank3". Empty stays empty.
std::string TaggedPath(const std::string& path, const std::string& tag);

// The sinks `spec` asks for, resolved for `who` on this host and process and checked: the
// run directory and every parent directory are created, each file path is proven writable
// (an existing file is opened for writing without being truncated; a new one is created and
// removed), and a run-directory file is created empty and kept. A path that cannot be
// written is an error naming the output, the path and the cause. A gathered rank other than
// 0 gets empty paths (it writes nothing). `spec.sinks.print_summary`/`summary_to` carry over.
[[nodiscard]] Result<Sinks> PrepareSinks(const TelemetrySpec& spec, const OutputIdentity& who);

// The checks of PrepareSinks for any other output of a run: a file a run writes at its end
// (`what` says what for, e.g. "telemetry trace"), and a directory it writes into (created
// with its parents, then proven writable by creating and removing a file in it).
[[nodiscard]] Status PrepareOutputFile(const std::string& path, std::string_view what);
[[nodiscard]] Status PrepareOutputDir(const std::string& path, std::string_view what);

}  // namespace batchcast::telemetry
