// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// A trial for the service tests: attaches to SOCKET, reads EPOCHS epochs of batch B,
// checks every pixel against the synthetic source, and appends to LOG (flushed per line,
// so a SIGKILLed trial leaves a consistent prefix):
//   attached <pid>
//   epoch <e> first_batch <k> samples <unique> dups <d> missing <m> bad_pixels <x>
//   end ok <epochs>      |   error <message>
// With LOG "-" it writes to stdout and also one line per batch (the resume tests):
//   batch <epoch> <index> <id,id,...> <bad_pixels> <next epoch> <next batch>
//         <image checksum> <next run epoch>
//   service_consumer SOCKET B EPOCHS SAMPLES LOG [BATCH_US] [HEARTBEAT_MS]
//                    [START_EPOCH START_BATCH [RANK WORLD [START_RUN_EPOCH]]]
//   (resume; mode=shard when WORLD > 1; START_RUN_EPOCH -1: start_epoch)
// SAMPLES "real:N": a real dataset of N samples (no synthetic pixels to check). In the
// per-batch mode an acknowledgement byte 'q' instead of 'a' stops the trial cleanly (it
// detaches and exits 0: a trial stopped with its checkpoint saved).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "batchcast/consumer.h"
#include "tests/unit/node/synthetic_source.h"

using namespace batchcast;

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: service_consumer SOCKET B EPOCHS SAMPLES LOG [BATCH_US] [HB_MS]\n");
    return 2;
  }
  const std::string samples = argv[4];
  const bool synthetic = samples.rfind("real:", 0) != 0;
  const int64_t n = std::atoll(synthetic ? samples.c_str() : samples.c_str() + 5);
  const bool per_batch = std::string(argv[5]) == "-";
  FILE* log = per_batch ? stdout : std::fopen(argv[5], "a");
  if (log == nullptr) return 2;
  setvbuf(log, nullptr, _IOLBF, 0);
  Options o;
  o.batch_size = std::atoi(argv[2]);
  o.epochs = std::atoi(argv[3]);
  o.buffer_depth = 2;
  const int64_t batch_us = argc > 6 ? std::atoll(argv[6]) : 0;
  o.heartbeat_ms = argc > 7 ? std::atoll(argv[7]) : 1000;
  if (argc > 9) {
    o.start_epoch = std::atoi(argv[8]);
    o.start_batch = std::atoll(argv[9]);
  }
  if (argc > 11 && std::atoi(argv[11]) > 1) {
    o.mode = "shard";
    o.rank = std::atoi(argv[10]);
    o.world_size = std::atoi(argv[11]);
  }
  if (argc > 12) o.start_run_epoch = std::atoi(argv[12]);
  auto c = Consumer::Attach(argv[1], o, -1, "trial-" + std::to_string(getpid()));
  if (!c.ok()) {
    std::fprintf(log, "error %s\n", c.status().ToString().c_str());
    return 3;
  }
  std::fprintf(log, "attached %d\n", getpid());
  (*c)->SetErrorHandler(nullptr);
  std::vector<int> seen(static_cast<size_t>(n), 0);
  int64_t bad = 0, first_batch = -1, epochs = 0;
  uint64_t epoch = ~0ULL;
  Batch b;
  for (;;) {
    Status st = (*c)->Next(&b);
    if (st.code() == StatusCode::kEndOfStream) break;
    if (!st.ok()) {
      std::fprintf(log, "error %s\n", st.ToString().c_str());
      return 4;
    }
    const BatchInfo& info = b.info();
    if (info.epoch != epoch) {
      epoch = info.epoch;
      first_batch = static_cast<int64_t>(info.producer_batch);
      std::fill(seen.begin(), seen.end(), 0);
    }
    const auto* img = static_cast<const uint8_t*>(b.images().data);
    const size_t sb = b.images().nbytes / b.images().shape[0];
    const int64_t fresh = b.images().shape[0] - info.repeats;
    std::string ids;
    for (int64_t i = 0; i < b.images().shape[0]; ++i) {
      const int64_t id = b.sample_ids()[i];
      ids += (i ? "," : "") + std::to_string(id);
      if (id < 0 || id >= n) { ++bad; continue; }
      for (size_t k = 0; synthetic && k < sb; ++k)
        if (img[i * sb + k] != node::SyntheticPixel(id, k)) { ++bad; break; }
      if (i < fresh) seen[static_cast<size_t>(id)] += 1;
    }
    if (per_batch) {
      const StreamPosition next = (*c)->Position();
      uint64_t sum = 1469598103934665603ULL;  // FNV-1a over the batch's image bytes
      for (size_t k = 0; k < b.images().nbytes; ++k) sum = (sum ^ img[k]) * 1099511628211ULL;
      std::fprintf(log, "batch %llu %llu %s %lld %llu %llu %llx %lld\n",
                   (unsigned long long)info.epoch, (unsigned long long)info.index, ids.c_str(),
                   (long long)bad, (unsigned long long)next.epoch,
                   (unsigned long long)next.batch, (unsigned long long)sum,
                   (long long)next.run_epoch);
      char ack = 0;  // the test reads each line before this trial goes on: a kill is exact
      if (read(0, &ack, 1) != 1) return 5;
      if (ack == 'q') {  // stopped: detaches with nothing taken after this batch
        std::fprintf(log, "end stopped\n");
        return 0;
      }
    }
    if (info.last_in_epoch) {
      int64_t uniq = 0, dups = 0, missing = 0;
      for (int v : seen) {
        if (v == 0) ++missing;
        else ++uniq;
        if (v > 1) dups += v - 1;
      }
      std::fprintf(log, "epoch %llu first_batch %lld samples %lld dups %lld missing %lld "
                   "bad_pixels %lld\n", (unsigned long long)epoch, (long long)first_batch,
                   (long long)uniq, (long long)dups, (long long)missing, (long long)bad);
      ++epochs;
    }
    if (batch_us > 0) usleep(static_cast<useconds_t>(batch_us));  // the "training step"
  }
  std::fprintf(log, "end ok %lld\n", (long long)epochs);
  return 0;
}
