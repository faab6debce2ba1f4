// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// The protocol test's leader process: one producer (producers.h) over content.h's
// synthetic samples. Prints "ready <address> pid=<pid>" once listening and "done <status>" at the
// end; SIGTERM stops it (the stream fails with "stopped by the protocol test driver").
//   protocol_leader producer=leader|service|external|multinode socket=NAME [samples=N]
//                   [p=P] [max_b=B] [slots=K] [depth=D] [hb=MS] [epochs=E] [expect=C]
//                   [seed=S] [window=W] [end_when_empty=0|1]
#include <mpi.h>
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>

#include "tests/protocol/producers.h"

using namespace batchcast;
using namespace batchcast::protocol_test;

int main(int argc, char** argv) {
  std::map<std::string, std::string> kv;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto eq = a.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "protocol_leader: argument '%s' is not key=value\n", argv[i]);
      return 2;
    }
    kv[a.substr(0, eq)] = a.substr(eq + 1);
  }
  auto num = [&](const char* k, int64_t def) {
    return kv.count(k) ? std::atoll(kv[k].c_str()) : def;
  };
  ProducerSpec s;
  if (!ParseProducer(kv["producer"], &s.kind) || kv["socket"].empty()) {
    std::fprintf(stderr, "usage: protocol_leader producer=leader|service|external|multinode "
                         "socket=NAME [samples= p= max_b= slots= depth= hb= epochs= expect= "
                         "seed= window= end_when_empty= views_max=]\n");
    return 2;
  }
  s.socket = kv["socket"];
  s.samples = num("samples", s.samples);
  s.producer_batch = num("p", s.producer_batch);
  s.max_batch = static_cast<uint32_t>(num("max_b", s.max_batch));
  s.ring_slots = static_cast<int>(num("slots", s.ring_slots));
  s.buffer_depth = static_cast<int>(num("depth", s.buffer_depth));
  s.heartbeat_ms = num("hb", s.heartbeat_ms);
  s.epochs = static_cast<int>(num("epochs", s.epochs));
  s.expect = static_cast<int>(num("expect", s.expect));
  s.seed = static_cast<uint64_t>(num("seed", int64_t(s.seed)));
  if (kv.count("window")) s.late_join_window = std::atof(kv["window"].c_str());
  s.end_when_empty = num("end_when_empty", 1) != 0;
  s.views_max = static_cast<int>(num("views_max", s.views_max));

  const bool mpi = s.kind == ProducerKind::kMultinode;
  if (mpi) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto created = CreateProducer(s);
  if (!created.ok()) {
    std::printf("create-error %s\n", created.status().ToString().c_str());
    std::fflush(stdout);
    if (mpi) MPI_Finalize();
    return 3;
  }
  Producer& p = **created;
  // The pid: under mpirun the harness signals this process, not mpirun (SIGSTOP of a leader).
  std::printf("ready %s pid=%d\n", p.address().c_str(), int(getpid()));
  std::fflush(stdout);
  std::thread waiter([&p, set] {
    int sig = 0;
    if (sigwait(&set, &sig) != 0 || sig == SIGUSR1) return;
    p.Stop("stopped by the protocol test driver");
  });
  Status st = p.Run();
  pthread_kill(waiter.native_handle(), SIGUSR1);
  waiter.join();
  std::printf("done %s\n", st.ok() ? "ok" : st.ToString().c_str());
  std::fflush(stdout);
  created->reset();
  if (mpi) MPI_Finalize();
  return st.ok() ? 0 : 1;
}
