// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The C++ side of `make bench B=python`: a native Consumer that attaches to a leader,
// reads every batch (one byte per sample and every label, the same touch the Python
// consumer does) and prints one JSON line: samples, seconds, wait_ns.
//   bench_python_consumer ADDRESS BATCH_SIZE
#include <cstdio>
#include <cstdlib>
#include <string>

#include "batchcast/consumer.h"
#include "harness.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_python_consumer ADDRESS BATCH_SIZE\n");
    return 2;
  }
  batchcast::Options o;
  o.batch_size = std::atoi(argv[2]);
  o.epochs = 1 << 30;  // follow the leader to the end of its stream
  auto c = batchcast::Consumer::Attach(argv[1], o);
  if (!c.ok()) {
    std::fprintf(stderr, "bench_python_consumer: %s\n", c.status().ToString().c_str());
    return 1;
  }
  batchcast::Batch batch;
  int64_t samples = 0, checksum = 0;
  double t0 = 0;
  int64_t wait0 = 0;  // waiting for the first batch is the leader's start-up, not ours
  for (;;) {
    batchcast::Status st = (*c)->Next(&batch);
    if (st.code() == batchcast::StatusCode::kEndOfStream) break;
    if (!st.ok()) {
      std::fprintf(stderr, "bench_python_consumer: %s\n", st.ToString().c_str());
      return 1;
    }
    if (samples == 0) {  // from the first batch on
      t0 = batchcast::bench::NowSeconds();
      wait0 = (*c)->stats().wait_ns;
    }
    const auto* px = static_cast<const uint8_t*>(batch.images().data);
    const auto* labels = static_cast<const int64_t*>(batch.labels().data);
    size_t sb = batch.images().nbytes / size_t(batch.size());
    for (int64_t i = 0; i < batch.size(); ++i) checksum += px[size_t(i) * sb] + labels[i];
    samples += batch.size();
  }
  double secs = batchcast::bench::NowSeconds() - t0;
  std::printf("{\"samples\": %lld, \"seconds\": %.6f, \"wait_ns\": %lld, \"checksum\": %lld}\n",
              static_cast<long long>(samples), secs,
              static_cast<long long>((*c)->stats().wait_ns - wait0), static_cast<long long>(checksum));
  return 0;
}
