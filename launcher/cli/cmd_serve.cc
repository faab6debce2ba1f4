// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// `batchcast serve`: the always-on per-node service (docs/service.md). Prints its address,
// runs epochs for whoever attaches, and stops cleanly on SIGINT/SIGTERM (attached
// consumers then fail with "service stopped: ...").
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "core/option_scope.h"
#include "batchcast/options.h"
#include "cli/commands.h"
#include "core/log.h"
#include "producer/batch_source.h"
#include "gpu/gpu_runtime.h"
#include "gpu/gpu_stager.h"
#include "node/service.h"
#include "telemetry/spec.h"

namespace batchcast::cli {
namespace {

bool FromDefault(const Options& o, const std::string& key) {
  for (const auto& [k, src] : o.sources)
    if (k == key) return src == "default";
  return true;
}

struct ServeArgs {
  std::vector<std::string> flags;
  std::string socket;
  double late_join_window = 0.02;
  bool join_mid_epoch = false;
  int max_batch = 0;
  int64_t handshake_ms = 5000;
};

int Serve(const ServeArgs& a) {
  auto opts = ResolveOptions(a.flags);
  if (opts.ok()) {
    Status st = CheckLeaderOptions(*opts, "service", "each trial's consumer");
    if (!st.ok()) opts = st;
  }
  if (!opts.ok()) {
    std::fprintf(stderr, "batchcast serve: %s\n", opts.status().ToString().c_str());
    return 2;
  }
  node::ServiceConfig cfg;
  cfg.options = *opts;
  cfg.socket_name = a.socket;
  // Without an explicit --epochs (flag, env or file) the service runs until stopped.
  cfg.epochs = FromDefault(*opts, "epochs") ? 0 : opts->epochs;
  cfg.late_join_window = a.late_join_window;
  cfg.join_mid_epoch = a.join_mid_epoch;
  cfg.max_consumer_batch = static_cast<uint32_t>(a.max_batch);
  cfg.handshake_timeout_ms = a.handshake_ms;
  // Block the stop signals before any thread exists; one thread waits for them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);  // internal: the service finished, end the waiter
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // Telemetry (the `telemetry` option): the service's own series, summary at the end.
  telemetry::Sinks sinks;
  const telemetry::OutputIdentity who{telemetry::ProcessKind::kService, 0, false, ""};
  auto collector = telemetry::CreateCollector(*opts, who, 0, telemetry::Role::kLeader, &sinks);
  if (!collector.ok()) {
    std::fprintf(stderr, "batchcast serve: %s\n", collector.status().ToString().c_str());
    return 2;
  }
  cfg.collector = collector->get();
  auto source = producer::MakePipelineSource(*opts);
  if (!source.ok()) {
    std::fprintf(stderr, "batchcast serve: %s\n", source.status().ToString().c_str());
    return 1;
  }
  auto service = node::Service::Create(cfg, std::move(source).value());
  if (!service.ok()) {
    std::fprintf(stderr, "batchcast serve: %s\n", service.status().ToString().c_str());
    return 1;
  }
  node::Service& svc = **service;
  // The GPU data plane (option gpu, docs/gpu.md): stage on this process's GPU 0 if any.
  std::string gpu_note;
  auto stager = gpu::StageOnGpu(svc.staging_target(), *opts, collector->get(), &gpu_note);
  if (!stager.ok()) {
    std::fprintf(stderr, "batchcast serve: %s\n", stager.status().ToString().c_str());
    return 1;
  }
  if (*stager) std::printf("batchcast serve: gpu: %s\n", gpu_note.c_str());
  else BC_LOG(Info, Cuda, "serve: {}", gpu_note);
  std::printf("batchcast serve: listening on %s (%lld producer batches/epoch, %s); attach with "
              "Consumer::Attach(\"%s\", options)\n",
              svc.address().c_str(), static_cast<long long>(svc.batches_per_epoch()),
              cfg.epochs == 0 ? "until stopped" : (std::to_string(cfg.epochs) + " epochs").c_str(),
              svc.socket_name().c_str());
  std::fflush(stdout);
  std::thread waiter([&svc, set] {
    int sig = 0;
    if (sigwait(&set, &sig) != 0 || sig == SIGUSR1) return;
    svc.Stop(sig == SIGINT ? "SIGINT received" : "SIGTERM received");
  });
  Status st = svc.Run();
  if (*stager) {
    Status gst = (*stager)->Finish();
    if (!gst.ok() && st.ok()) st = gst;
  }
  pthread_kill(waiter.native_handle(), SIGUSR1);
  waiter.join();
  Status telemetry_written;  // a file that cannot be written is the exit status, not a log line
  if (*collector) {
    telemetry_written = (*collector)->Finish(sinks);
    if (!telemetry_written.ok())
      std::fprintf(stderr, "batchcast serve: telemetry: %s\n", telemetry_written.ToString().c_str());
  }
  node::ServiceStats s = svc.stats();
  std::printf("batchcast serve: stopped: %lld epochs started, %lld producer batches (%lld "
              "replayed for late joiners, %lld for %lld resuming consumers), %lld idle pauses; "
              "consumers: %lld detached, %lld lost (died or silent)\n",
              static_cast<long long>(s.epochs_started), static_cast<long long>(s.producer_batches),
              static_cast<long long>(s.replayed_batches),
              static_cast<long long>(s.resume_replayed_batches),
              static_cast<long long>(s.resume_replays), static_cast<long long>(s.idle_waits),
              static_cast<long long>(s.consumers_detached), static_cast<long long>(s.consumers_lost));
  if (!st.ok()) {
    std::fprintf(stderr, "batchcast serve: %s\n", st.ToString().c_str());
    return 1;
  }
  return telemetry_written.ok() ? 0 : 1;
}

}  // namespace

void RegisterServe(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("serve", "run the always-on per-node service (docs/service.md)");
  auto a = std::make_shared<ServeArgs>();  // owned by the callbacks that capture it
  cmd->add_option("--socket", a->socket,
                  "abstract control socket name (default batchcast-<uid>-service)");
  cmd->add_option("--late-join-window", a->late_join_window,
                  "fraction of an epoch within which a joiner is caught up by a replay [0.02]")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--join-mid-epoch", a->join_mid_epoch,
                "later joiners start at once, mid-epoch, instead of at the next epoch");
  cmd->add_option("--max-batch", a->max_batch,
                  "largest consumer batch accepted (default: batch_size)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--handshake-timeout-ms", a->handshake_ms,
                  "close connections that send no join request within this long [5000]")
      ->check(CLI::Range(int64_t(10), int64_t(600000)));
  AddRegistryOptions(cmd, &a->flags);
  cmd->callback([a, exit_code] { *exit_code = Serve(*a); });
}

}  // namespace batchcast::cli
