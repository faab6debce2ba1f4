// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// batchcast-train-many (what `batchcast train-many` runs): n TorchScript models from one
// JSON file, trained in this process on one node stream (docs/multi-model.md).
//
//   batchcast train-many CONFIG.json [--address=ADDR] [--torch-threads=N] [--KEY=VALUE ...]
//
// The leader is found like any trainer's: --address (a leader's or `batchcast serve`'s
// address), else BATCHCAST_ADDRESS (set by batchcast-run), else the node's default service
// socket. Other --KEY=VALUE flags are batchcast options for the consumers (buffer_depth,
// connect_timeout, telemetry, ...); batch_size and epochs come from each model's settings.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "batchcast/options.h"
#include "core/errors.h"
#include "multimodel/config.h"
#include "multimodel/trainer.h"
#include "node/service.h"
#include "node/task_telemetry.h"

namespace {

using batchcast::Status;
using batchcast::StatusCode;

constexpr const char* kUsage =
    "usage: batchcast train-many CONFIG.json [--address=ADDR] [--torch-threads=N] "
    "[--KEY=VALUE batchcast options]\n"
    "  trains the models of CONFIG.json (docs/multi-model.md) on the node stream of ADDR\n"
    "  (default: BATCHCAST_ADDRESS under batchcast-run, else the node's batchcast serve)\n"
    "Exit codes: 0 ok, 1 runtime error, 2 usage error (docs/troubleshooting.md).\n";

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

struct Args {
  std::string config, address;
  int torch_threads = 1;
  std::vector<std::string> flags;  // batchcast options
};

// 0: parsed; 2: usage error (printed); 3: --help (printed).
int ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string w = argv[i];
    if (w == "-h" || w == "--help") {
      std::printf("%s", kUsage);
      return 3;
    }
    if (w.rfind("--address=", 0) == 0) {
      a->address = w.substr(10);
    } else if (w.rfind("--torch-threads=", 0) == 0) {
      a->torch_threads = std::atoi(w.c_str() + 16);
      if (a->torch_threads < 1) {
        std::fprintf(stderr, "batchcast train-many: --torch-threads=%s is not a positive count\n",
                     w.c_str() + 16);
        return 2;
      }
    } else if (w.rfind("--", 0) == 0) {
      a->flags.push_back(w);
    } else if (a->config.empty()) {
      a->config = w;
    } else {
      std::fprintf(stderr, "batchcast train-many: unexpected argument '%s' (one CONFIG.json)\n%s",
                   w.c_str(), kUsage);
      return 2;
    }
  }
  if (a->config.empty()) {
    std::fprintf(stderr, "batchcast train-many: no CONFIG.json given\n%s", kUsage);
    return 2;
  }
  return 0;
}

// The leader's address, or a refusal under mpirun (the MPI Runtime gives a rank one consumer).
batchcast::Result<std::string> LeaderAddress(const Args& a) {
  auto bare = [](std::string s) {
    return s.rfind('@', 0) == 0 ? s.substr(1) : s;
  };  // "@name" as printed
  if (!a.address.empty()) return bare(a.address);
  if (std::string env = Env("BATCHCAST_ADDRESS"); !env.empty()) return bare(env);
  if (!Env("OMPI_COMM_WORLD_SIZE").empty() || !Env("PMI_SIZE").empty() || !Env("PMIX_RANK").empty())
    return batchcast::FailedPreconditionError(
        "train-many runs one consumer per model, and an MPI job's Runtime gives each rank one "
        "consumer; start the node's leader with `batchcast serve` (or run train-many under "
        "batchcast-run) and pass --address=ADDR");
  return batchcast::node::DefaultServiceSocket();
}

int Fail(const Status& st) {
  std::fprintf(stderr, "batchcast train-many: %s\n", st.ToString().c_str());
  return st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kNotFound ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (int rc = ParseArgs(argc, argv, &a); rc != 0) return rc == 3 ? 0 : rc;
  auto config = batchcast::multimodel::LoadTrainManyConfig(a.config);
  if (!config.ok()) return Fail(config.status());
  auto options = batchcast::ResolveOptions(a.flags);
  if (!options.ok()) return Fail(options.status());
  auto address = LeaderAddress(a);
  if (!address.ok()) return Fail(address.status());
  auto telemetry =
      batchcast::node::TaskTelemetry::Start(*options, -1, -1, batchcast::telemetry::Role::kConsumer,
                                            "train-many-" + std::to_string(getpid()));
  if (!telemetry.ok()) return Fail(telemetry.status());
  batchcast::multimodel::TrainManyOptions to;
  to.stream = *options;
  to.address = *address;
  to.torch_threads = a.torch_threads;
  to.collector = *telemetry ? (*telemetry)->collector() : nullptr;  // null: telemetry off
  auto trainer = batchcast::multimodel::MultiModelTrainer::Create(*config, to);
  if (!trainer.ok()) return Fail(trainer.status());
  if (Status st = (*trainer)->Run(); !st.ok()) return Fail(st);
  if (*telemetry) {
    if (Status st = (*telemetry)->Finish(); !st.ok()) return Fail(st);
  }
  std::printf("train-many: done; results in %s/results.json\n", config->output_dir.c_str());
  return 0;
}
