// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// batchcast-train-many (what `batchcast train-many` runs): n TorchScript models from one
// JSON file, trained in this process on one node stream (docs/multi-model.md).
//
//   batchcast train-many CONFIG.json [--address=ADDR] [--torch-threads=N] [--KEY=VALUE ...]
//   mpirun -n 2 batchcast train-many CONFIG.json [--KEY=VALUE ...]
//
// The leader is found like any trainer's: --address (a leader's or `batchcast serve`'s
// address), else BATCHCAST_ADDRESS (set by batchcast-run), else, under mpirun, the MPI
// Runtime (rank 0 leads, rank 1 trains every model), else the node's default service
// socket. Other --KEY=VALUE flags are batchcast options for the consumers (buffer_depth,
// connect_timeout, telemetry, ...) and, under mpirun, the leader (dataset, seed, ...);
// batch_size and epochs come from each model's settings.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "batchcast/options.h"
#include "core/environment.h"
#include "core/errors.h"
#include "multimodel/config.h"
#include "multimodel/progress.h"
#include "multimodel/trainer.h"
#include "node/runtime_internal.h"
#include "node/front_door.h"
#include "node/task_telemetry.h"
#include "core/mpi_status.h"

namespace {

using batchcast::Status;
using batchcast::StatusCode;

constexpr const char* kUsage =
    "usage: batchcast train-many CONFIG.json [--address=ADDR] [--torch-threads=N] "
    "[--KEY=VALUE batchcast options]\n"
    "       mpirun -n 2 batchcast train-many CONFIG.json [--KEY=VALUE batchcast options]\n"
    "  trains the models of CONFIG.json (docs/multi-model.md) on the node stream of ADDR\n"
    "  (default: BATCHCAST_ADDRESS under batchcast-run, else under mpirun the MPI Runtime's\n"
    "  leader on rank 0, else the node's batchcast serve)\n"
    "Exit codes: 0 ok, 1 runtime error, 2 usage error (docs/troubleshooting.md).\n";

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

// The leader's address (empty: the MPI front door).
std::string LeaderAddress(const Args& a) {
  auto bare = [](std::string s) {
    return s.rfind('@', 0) == 0 ? s.substr(1) : s;
  };  // "@name" as printed
  if (!a.address.empty()) return bare(a.address);
  if (std::optional<std::string> env = batchcast::env::LeaderAddress()) return bare(*env);
  if (batchcast::env::UnderMpiLauncher()) return "";
  return batchcast::node::DefaultServiceSocket();
}

int ExitCode(const Status& st) {
  return st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kNotFound ? 2 : 1;
}

int Fail(const Status& st) {
  std::fprintf(stderr, "batchcast train-many: %s\n", st.ToString().c_str());
  return ExitCode(st);
}

// Under mpirun, before the Runtime splits the job into nodes: both ranks on one node (with
// ranks_per_node refused, the Runtime's node is MPI_COMM_TYPE_SHARED), else each rank would
// lead a node of its own and none would train (the caller agrees on the verdict).
Status CheckOneNode(int rank) {
  MPI_Comm node = MPI_COMM_NULL;
  int node_size = 0;
  BC_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
         "MPI_Comm_split_type (node)");
  const int rc = MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  BC_MPI(rc, "MPI_Comm_size (node)");
  return batchcast::multimodel::CheckMpiNode(rank, node_size);
}

// This rank and the job's size, MPI's return codes as Status (MPI_COMM_WORLD returns them).
Status RankAndSize(int* rank, int* size) {
  BC_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  BC_MPI(MPI_Comm_rank(MPI_COMM_WORLD, rank), "MPI_Comm_rank");
  BC_MPI(MPI_Comm_size(MPI_COMM_WORLD, size), "MPI_Comm_size");
  return Status::Ok();
}

// Under mpirun: rank 0 leads the node stream (the MPI Runtime), rank 1 attaches one
// consumer per unfinished model and trains them; a restart resumes every model at the
// stream position of its checkpoint (docs/multi-model.md "Under mpirun").
int RunUnderMpirun(int argc, char** argv, const batchcast::multimodel::TrainManyConfig& config,
                   const batchcast::Options& options, const Args& a) {
  namespace mm = batchcast::multimodel;
  // What the configuration alone rules out is refused before MPI starts.
  if (Status st = mm::CheckMpiFrontDoor(config, options); !st.ok()) return Fail(st);
  int provided = 0, rank = 0, size = 1;
  if (int rc = MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided); rc != MPI_SUCCESS)
    return Fail(batchcast::mpi::FromMpi(rc, "MPI_Init_thread"));
  auto finish = [](int rc) {
    MPI_Finalize();
    return rc;
  };
  Status st = RankAndSize(&rank, &size);
  if (!st.ok()) return finish(Fail(st));
  st = mm::CheckMpiWorld(size);
  if (st.ok()) st = batchcast::mpi::AgreeOnStatus(MPI_COMM_WORLD, CheckOneNode(rank));
  std::vector<mm::ModelProgress> progress;
  for (size_t i = 0; i < config.models.size() && st.ok(); ++i) {
    auto p = mm::ReadModelProgress(config, config.models[i]);
    if (p.ok()) progress.push_back(*p);
    else st = p.status();
  }
  if (!st.ok()) return finish(rank == 0 ? Fail(st) : 1);  // every rank saw the same
  const mm::MpiStream plan = mm::PlanMpiStream(config, progress, options);
  // The trainer loads every model before the leader waits for its consumers.
  std::unique_ptr<mm::MultiModelTrainer> trainer;
  mm::TrainManyOptions to;
  to.stream = options;
  to.stream.gpu = "off";  // as the leader's (PlanMpiStream): the consumers take host batches
  to.torch_threads = a.torch_threads;
  to.resume_mid_epoch = true;
  if (rank == 1) {
    auto t = mm::MultiModelTrainer::Create(config, to);
    st = t.ok() ? Status::Ok() : t.status();
    if (t.ok()) trainer = std::move(t).value();
  }
  if (Status all = batchcast::mpi::AgreeOnStatus(MPI_COMM_WORLD, st); !all.ok())
    return finish(rank == 0 ? Fail(all) : ExitCode(all));  // names the failing rank's cause
  if (plan.consumers == 0)  // every model is finished: the results only
    return finish(rank == 1 && !(st = trainer->Run()).ok() ? Fail(st) : 0);
  auto rt = batchcast::internal::RuntimeAccess::CreateWithOwnConsumers(
      plan.options, MPI_COMM_WORLD, rank == 1 ? plan.consumers : 0);
  if (!rt.ok()) return finish(rank == 0 ? Fail(rt.status()) : 1);
  if ((*rt)->is_leader()) {
    st = (*rt)->Serve();
  } else {
    trainer->SetStream(batchcast::internal::RuntimeAccess::Address(**rt),
                       batchcast::internal::RuntimeAccess::Collector(**rt));
    st = trainer->Run();
  }
  Status fin = (*rt)->Finalize();
  if (st.ok()) st = fin;
  if (!st.ok()) return finish(Fail(st));
  if (rank == 1)
    std::printf("train-many: done; results in %s/results.json\n", config.output_dir.c_str());
  return finish(0);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (int rc = ParseArgs(argc, argv, &a); rc != 0) return rc == 3 ? 0 : rc;
  auto config = batchcast::multimodel::LoadTrainManyConfig(a.config);
  if (!config.ok()) return Fail(config.status());
  auto options = batchcast::ResolveOptions(a.flags);
  if (!options.ok()) return Fail(options.status());
  const std::string address = LeaderAddress(a);
  if (address.empty()) return RunUnderMpirun(argc, argv, *config, *options, a);
  if (config->checkpoint_every > 0)
    return Fail(batchcast::FailedPreconditionError(
        "train-many: 'checkpoint_every' ({}) resumes a model inside an epoch, which needs the MPI "
        "front door (mpirun -n 2 batchcast train-many ...): a service or batchcast-run leader "
        "does not replay the part of an epoch its stream has passed, so a restart against it "
        "trains the interrupted epoch again; remove 'checkpoint_every' from {} (docs/multi-model.md "
        "\"Mid-epoch resume\")",
        config->checkpoint_every, a.config));
  auto telemetry =
      batchcast::producer::ProcessTelemetry::Start(
          *options, batchcast::telemetry::ProcessKind::kTrainMany, -1, -1,
          batchcast::telemetry::Role::kConsumer, "train-many-" + std::to_string(getpid()));
  if (!telemetry.ok()) return Fail(telemetry.status());
  batchcast::multimodel::TrainManyOptions to;
  to.stream = *options;
  to.address = address;
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
