// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// A `batchcast serve` over a synthetic source (tests/unit/node/synthetic_source.h), so the
// service tests need no dataset and can check every byte. Prints "ready <address>" when
// listening and one "stats {...}" line at the end; SIGTERM/SIGINT stop it like the CLI.
//   service_server SOCKET SAMPLES PRODUCER_BATCH MAX_BATCH HEARTBEAT_MS WINDOW EPOCHS
//                  [SLOTS] [HANDSHAKE_MS] [mid|next] [CATCH_UPS] [TELEMETRY]
// (CATCH_UPS: option late_join_catch_ups; absent or -1: its default. TELEMETRY: option
// telemetry, written when the service stops)
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "producer/producer.h"
#include "tests/unit/node/synthetic_source.h"

using namespace batchcast;

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: service_server SOCKET SAMPLES P MAX_B HB_MS WINDOW EPOCHS "
                 "[SLOTS] [HANDSHAKE_MS]\n");
    return 2;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // `batchcast serve`'s configuration (launcher/cli/cmd_serve.cc) over a synthetic source.
  producer::ProducerConfig cfg;
  cfg.who = "service";
  cfg.job = "service";
  cfg.socket_name = argv[1];
  cfg.end_when_empty = false;
  cfg.options.producer_batch = std::atoll(argv[3]);
  cfg.options.batch_size = std::atoi(argv[4]);
  cfg.options.heartbeat_ms = std::atoll(argv[5]);
  cfg.options.late_join_window = std::atof(argv[6]);
  const int64_t epochs = std::atoll(argv[7]);
  cfg.until_stopped = epochs == 0;
  if (epochs > 0) cfg.options.epochs = static_cast<int>(epochs);
  cfg.options.ring_slots = argc > 8 ? std::atoi(argv[8]) : 6;
  cfg.options.seed = 7;
  cfg.options.shuffle = true;
  if (argc > 9) cfg.handshake_timeout_ms = std::atoll(argv[9]);
  cfg.options.join_mid_epoch = argc > 10 && std::string(argv[10]) == "mid";
  if (argc > 11 && std::atoi(argv[11]) >= 0) cfg.options.late_join_catch_ups = std::atoi(argv[11]);
  if (argc > 12 && std::string(argv[12]) != "-") cfg.options.telemetry = argv[12];
  // Joins to wait for before the first batch (a test that needs its consumers to start
  // together at position 0, whatever the machine's load; `batchcast serve` starts with the
  // first).
  if (argc > 13) cfg.expected_consumers = std::atoi(argv[13]);
  auto svc = producer::Producer::Create(
      cfg, std::make_unique<node::SyntheticSource>(std::atoll(argv[2]), 8, 3));
  if (!svc.ok()) {
    std::fprintf(stderr, "service_server: %s\n", svc.status().ToString().c_str());
    return 1;
  }
  producer::Producer& s = **svc;
  std::printf("ready %s\n", s.display_address().c_str());
  std::fflush(stdout);
  std::thread waiter([&s, set] {
    int sig = 0;
    if (sigwait(&set, &sig) != 0 || sig == SIGUSR1) return;
    s.Stop(sig == SIGINT ? "SIGINT received" : "SIGTERM received");
  });
  Status st = s.Run();
  pthread_kill(waiter.native_handle(), SIGUSR1);
  waiter.join();
  const producer::ProducerStats x = s.stats();
  std::printf("stats {\"epochs\":%lld,\"produced\":%lld,\"replayed\":%lld,\"late_joins\":%lld,"
              "\"skipped\":%lld,\"idle_waits\":%lld,\"max_slot_wait_ms\":%lld,"
              "\"detached\":%lld,\"lost\":%lld,\"resume_replays\":%lld,"
              "\"resume_replayed\":%lld,\"catch_ups\":%lld,\"catch_up_replayed\":%lld,"
              "\"catch_up_deferrals\":%lld}\n",
              (long long)x.epochs_started, (long long)x.producer_batches,
              (long long)x.replayed_batches, (long long)x.late_joins,
              (long long)x.empty_positions, (long long)x.idle_waits,
              (long long)(x.max_slot_wait_ns / 1000000), (long long)x.consumers_detached,
              (long long)x.consumers_lost, (long long)x.resume_replays,
              (long long)x.resume_replayed_batches, (long long)x.catch_ups,
              (long long)x.catch_up_replayed_batches, (long long)x.catch_up_deferrals);
  std::fflush(stdout);
  if (!st.ok()) std::fprintf(stderr, "service_server: %s\n", st.ToString().c_str());
  return st.ok() ? 0 : 1;
}
