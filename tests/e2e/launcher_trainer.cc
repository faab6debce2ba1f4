// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The test trainer batchcast-run starts in the launcher tests (e2e and Slurm): attaches with
// AttachFromEnvironment, checks that every sample arrives exactly once per epoch (plus exactly
// the reported fill repeats), and prints what it was told, one line each:
//   trainer-env RANK=1 LOCAL_RANK=0 WORLD_SIZE=4 ... host=n2
//   trainer-result RANK=1 exactly_once=ok epochs=2 batches=34 samples=1088
// Usage: launcher_trainer --samples N [--fail-rank R] [--kill-rank R] [Batchcast options]
//   --fail-rank R   the trainer with RANK=R exits with status 3 after its first batch
//   --kill-rank R   the trainer with RANK=R is killed (SIGKILL) after its fifth batch, mid-epoch
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "batchcast/batch.h"
#include "batchcast/consumer.h"
#include "batchcast/options.h"

namespace {

std::string Env(const char* k) {
  const char* v = std::getenv(k);
  return v ? v : "-";
}

int Fail(const std::string& why) {
  std::printf("trainer-result RANK=%s exactly_once=FAILED %s\n", Env("RANK").c_str(), why.c_str());
  std::fflush(stdout);
  return 1;
}

// mode=shard: this trainer's part of each epoch goes to shard-ids.<RANK>.txt ("epoch id" per
// sample, repeats included) for the test to check that the ranks' parts are disjoint and
// cover every sample; here: the same count every epoch, no duplicate beyond the repeats.
int ShardResult(const batchcast::Options& o,
                const std::map<uint64_t, std::map<int64_t, int>>& counts, int64_t repeats,
                const char* host) {
  if (static_cast<int>(counts.size()) != o.epochs)
    return Fail("saw " + std::to_string(counts.size()) + " epochs in shard mode");
  FILE* out = std::fopen(("shard-ids." + Env("RANK") + ".txt").c_str(), "w");
  if (out == nullptr) return Fail("cannot write shard-ids");
  int64_t arrivals = 0, distinct = 0;
  for (const auto& [epoch, ids] : counts)
    for (const auto& [id, k] : ids) {
      for (int i = 0; i < k; ++i) std::fprintf(out, "%llu %lld\n", (unsigned long long)epoch,
                                               (long long)id);
      arrivals += k;
      distinct += 1;
    }
  std::fclose(out);
  if (arrivals - distinct != repeats)
    return Fail(std::to_string(arrivals - distinct) + " duplicates but " +
                std::to_string(repeats) + " reported repeats");
  std::printf("trainer-result RANK=%s shard=ok epochs=%zu samples=%lld host=%s\n",
              Env("RANK").c_str(), counts.size(), static_cast<long long>(arrivals), host);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t samples = -1;
  int fail_rank = -1, kill_rank = -1;
  std::vector<std::string> flags;
  for (int i = 1; i < argc; ++i) {
    std::string w = argv[i];
    if (w == "--samples" && i + 1 < argc)
      samples = std::atoll(argv[++i]);
    else if (w == "--fail-rank" && i + 1 < argc)
      fail_rank = std::atoi(argv[++i]);
    else if (w == "--kill-rank" && i + 1 < argc)
      kill_rank = std::atoi(argv[++i]);
    else
      flags.push_back(w);
  }
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::printf(
      "trainer-env RANK=%s LOCAL_RANK=%s WORLD_SIZE=%s LOCAL_WORLD_SIZE=%s GROUP_RANK=%s "
      "MASTER_ADDR=%s MASTER_PORT=%s CUDA_VISIBLE_DEVICES=%s CUDA_MPS_PIPE_DIRECTORY=%s "
      "BATCHCAST_ADDRESS=%s host=%s\n",
      Env("RANK").c_str(), Env("LOCAL_RANK").c_str(), Env("WORLD_SIZE").c_str(),
      Env("LOCAL_WORLD_SIZE").c_str(), Env("GROUP_RANK").c_str(), Env("MASTER_ADDR").c_str(),
      Env("MASTER_PORT").c_str(), Env("CUDA_VISIBLE_DEVICES").c_str(),
      Env("CUDA_MPS_PIPE_DIRECTORY").c_str(), Env("BATCHCAST_ADDRESS").c_str(), host);
  std::fflush(stdout);
  if (samples <= 0) return Fail("--samples N is required");
  auto options = batchcast::ResolveOptions(flags);
  if (!options.ok()) return Fail(options.status().message());
  auto consumer = batchcast::AttachFromEnvironment(options.value());
  if (!consumer.ok()) return Fail(consumer.status().message());
  batchcast::Consumer& c = *consumer.value();

  std::map<uint64_t, std::map<int64_t, int>> counts;  // epoch -> sample id -> arrivals
  int64_t repeats = 0, batches = 0, delivered = 0;
  batchcast::Batch batch;
  for (;;) {
    batchcast::Status st = c.Next(&batch);
    if (st.code() == batchcast::StatusCode::kEndOfStream) break;
    if (!st.ok()) return Fail("stream error: " + st.message());
    for (int64_t i = 0; i < batch.size(); ++i)
      counts[batch.info().epoch][batch.sample_ids()[i]] += 1;
    repeats += batch.info().repeats;
    delivered += batch.size();
    ++batches;
    if (fail_rank >= 0 && Env("RANK") == std::to_string(fail_rank)) {
      std::fprintf(stderr, "launcher_trainer: rank %d failing on purpose after its first batch\n",
                   fail_rank);
      std::_Exit(3);  // no detach: the leader sees a dead trainer
    }
    if (kill_rank >= 0 && batches == 5 && Env("RANK") == std::to_string(kill_rank)) {
      std::fprintf(stderr, "launcher_trainer: rank %d killing itself (SIGKILL) mid-epoch\n",
                   kill_rank);
      std::fflush(stderr);
      raise(SIGKILL);
    }
  }
  if (options.value().mode == "shard") return ShardResult(options.value(), counts, repeats, host);
  if (static_cast<int>(counts.size()) != options.value().epochs)
    return Fail("saw " + std::to_string(counts.size()) + " epochs, expected " +
                std::to_string(options.value().epochs));
  int64_t extra = 0;
  for (const auto& [epoch, ids] : counts) {
    if (static_cast<int64_t>(ids.size()) != samples)
      return Fail("epoch " + std::to_string(epoch) + " had " + std::to_string(ids.size()) +
                  " distinct samples, expected " + std::to_string(samples));
    for (const auto& [id, k] : ids) {
      if (id < 0 || id >= samples) return Fail("sample id " + std::to_string(id) + " out of range");
      extra += k - 1;
    }
  }
  if (extra != repeats)
    return Fail(std::to_string(extra) + " duplicate arrivals but " + std::to_string(repeats) +
                " reported fill repeats");
  std::printf(
      "trainer-result RANK=%s exactly_once=ok epochs=%zu batches=%lld samples=%lld host=%s\n",
      Env("RANK").c_str(), counts.size(), static_cast<long long>(batches),
      static_cast<long long>(delivered), host);
  std::fflush(stdout);
  return 0;
}
