// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Which front doors read which options: one table (the registry in options.cc names, for
// every option, the front doors that read it), one check. Every front door runs
// CheckFrontDoorOptions on its resolved options; an option it does not read is refused with
// a message naming the option, where it was set, the front door, and who reads it instead,
// never accepted and ignored. Which sources are refused follows from who else could read
// the value:
//   - a value set explicitly (in code or on the command line) is meant for this front door:
//     refused when it does not read it;
//   - a value from the environment or a config file is job-wide: a leader's front door
//     refuses it only when no consumer reads it either (nobody in the job would), and a
//     consumer's front door leaves a leader option to the job's leader.
// docs/configuration.md is generated from the table (scripts/gen_docs.py, `batchcast info
// -c`); `batchcast info` lists the front doors; tests/conformance checks every front door's
// refusals against it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "batchcast/options.h"
#include "batchcast/status.h"

namespace batchcast {

// The front doors. A new one is added here, to kFrontDoors (options.cc) and to every
// registry entry that it reads; the conformance test refuses a front door it does not run.
enum class FrontDoor : uint32_t {
  kMpiRuntime = 0,  // batchcast::Runtime on one node (its leader rank and its trainers)
  kMultinode,       // the MPI Runtime across nodes or with mode=shard (the multi-node leader)
  kServe,           // `batchcast serve`
  kPythonLeader,    // batchcast.Leader
  kPythonProducer,  // batchcast.Producer (batches from a Python iterable)
  kLauncher,        // batchcast-run (its leader task, and what it exports to its trainers)
  kCApiLeader,      // bc_leader_start
  kConsumer,        // batchcast.Consumer: a Python consumer's own options
  kCount
};

struct FrontDoorInfo {
  FrontDoor door;
  const char* key;      // "serve": for `batchcast info`, docs and tests
  const char* name;     // "batchcast serve": in messages
  bool leader;          // it runs a producer (else it is a consumer's front door)
  const char* what;     // one line: what it is
  const char* instead;  // what to do with an option it refuses
  const char* consumers;  // where its consumers' own options go ("" : it makes them itself)
  // How its user admits a larger consumer batch than it allows (the end of that refusal;
  // "": the ring's generic advice).
  const char* larger_batch;
};

// Every front door, in FrontDoor order.
const std::vector<FrontDoorInfo>& FrontDoors();
const FrontDoorInfo& FrontDoorOf(FrontDoor door);
// The front door whose key is `key` (nullptr: none).
const FrontDoorInfo* FindFrontDoor(std::string_view key);

// Whether `door` reads registry option `key` (false for an unknown key).
bool FrontDoorReads(FrontDoor door, std::string_view key);
// The keys of the front doors that read `key`, comma separated ("mpi, serve, ...").
std::string FrontDoorsReading(std::string_view key);
// Whether a consumer reads option `key` (FrontDoor::kConsumer); whether any leader does.
bool ConsumerReadsOption(std::string_view key);
bool LeaderReadsOption(std::string_view key);

// Where option `key` of `options` was set: "default", "file", "env", "flag" or "code".
std::string OptionSource(const Options& options, std::string_view key);

// `bytes` as the value of a size option, rounded up to whole MiB ("64m"): what a message
// tells the user to set (cache=, view_bytes=).
std::string SizeOptionValue(double bytes);

// The first option `door` does not read, set where the rule above refuses it, as an error
// naming the option, where it was set, `door`, and the front doors that read it. Ok when
// there is none. `as` names the front door in the message instead of its table name.
Status CheckFrontDoorOptions(const Options& options, FrontDoor door, std::string_view as = {});

}  // namespace batchcast
