// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// `batchcast serve`: the always-on per-node service (docs/service.md): a producer::Producer
// (node::CreateNodeProducer) that runs epochs for whoever attaches, until stopped. What is its
// own: its socket name, SIGINT/SIGTERM stopping it cleanly (attached consumers then fail with
// "service stopped: ..."), and its report.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "batchcast/options.h"
#include "cli/commands.h"
#include "core/option_scope.h"
#include "node/front_door.h"

namespace batchcast::cli {
namespace {

struct ServeArgs {
  std::vector<std::string> flags;
  std::string socket;
  int max_batch = 0;
  int64_t handshake_ms = 5000;
};

void PrintStats(const producer::ProducerStats& s) {
  std::printf("batchcast serve: stopped: %lld epochs started, %lld producer batches (%lld "
              "replayed for late joiners, %lld for %lld caught up after the window (%lld "
              "deferred), %lld for %lld resuming consumers), %lld idle pauses; consumers: %lld "
              "detached, %lld lost (died or silent)\n",
              static_cast<long long>(s.epochs_started), static_cast<long long>(s.producer_batches),
              static_cast<long long>(s.replayed_batches),
              static_cast<long long>(s.catch_up_replayed_batches),
              static_cast<long long>(s.catch_ups), static_cast<long long>(s.catch_up_deferrals),
              static_cast<long long>(s.resume_replayed_batches),
              static_cast<long long>(s.resume_replays), static_cast<long long>(s.idle_waits),
              static_cast<long long>(s.consumers_detached), static_cast<long long>(s.consumers_lost));
}

int Serve(const ServeArgs& a) {
  auto opts = ResolveOptions(a.flags);
  if (!opts.ok()) {
    std::fprintf(stderr, "batchcast serve: %s\n", opts.status().ToString().c_str());
    return 2;
  }
  producer::ProducerConfig cfg;
  cfg.front_door = FrontDoor::kServe;
  cfg.options = *opts;
  cfg.who = "service";
  cfg.socket_name = a.socket.empty() ? node::DefaultServiceSocket() : a.socket;
  cfg.job = "service";
  // Without an explicit epochs (flag, environment or file) the service runs until stopped.
  cfg.until_stopped = OptionSource(*opts, "epochs") == "default";
  cfg.end_when_empty = false;  // nobody attached: decoding pauses until someone joins
  cfg.max_consumer_batch = static_cast<uint32_t>(a.max_batch);
  cfg.handshake_timeout_ms = a.handshake_ms;
  // Block the stop signals before any thread exists; one thread waits for them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);  // internal: the service finished, end the waiter
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::string gpu_note;
  bool refused = false;  // an option or an output path: a usage error (exit status 2)
  auto service = node::CreateNodeProducer(cfg, &gpu_note, &refused);
  if (!service.ok()) {
    const bool usage = refused || service.status().code() == StatusCode::kInvalidArgument;
    std::fprintf(stderr, "batchcast serve: %s\n", service.status().ToString().c_str());
    return usage ? 2 : 1;
  }
  producer::Producer& svc = **service;
  if (!gpu_note.empty()) std::printf("batchcast serve: gpu: %s\n", gpu_note.c_str());
  std::printf("batchcast serve: listening on %s (%lld producer batches/epoch, %s); attach with "
              "Consumer::Attach(\"%s\", options)\n",
              svc.display_address().c_str(), static_cast<long long>(svc.batches_per_epoch()),
              cfg.until_stopped ? "until stopped" : (std::to_string(opts->epochs) + " epochs").c_str(),
              svc.address().c_str());
  std::fflush(stdout);
  std::thread waiter([&svc, set] {
    int sig = 0;
    if (sigwait(&set, &sig) != 0 || sig == SIGUSR1) return;
    svc.Stop(sig == SIGINT ? "SIGINT received" : "SIGTERM received");
  });
  Status st = svc.Run();
  pthread_kill(waiter.native_handle(), SIGUSR1);
  waiter.join();
  PrintStats(svc.stats());
  if (!st.ok()) {
    std::fprintf(stderr, "batchcast serve: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

void RegisterServe(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("serve", "run the always-on per-node service (docs/service.md)");
  auto a = std::make_shared<ServeArgs>();  // owned by the callbacks that capture it
  cmd->add_option("--socket", a->socket,
                  "abstract control socket name (default batchcast-<uid>-service)");
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
