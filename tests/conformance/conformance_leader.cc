// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// conformance_leader --socket NAME --expect N [Batchcast options...]
// The reference of the front-door conformance test: a producer::Producer of the native
// pipeline built directly (as a C++ program links it), against which every front door's
// consumers must see the same batches byte for byte. Prints "ready NAME" once it listens.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "batchcast/options.h"
#include "producer/batch_source.h"
#include "producer/producer.h"

int main(int argc, char** argv) {
  std::vector<std::string> words(argv + 1, argv + argc), rest;
  auto o = batchcast::ResolveOptions(words, &rest);
  if (!o.ok()) {
    std::fprintf(stderr, "conformance_leader: %s\n", o.status().ToString().c_str());
    return 2;
  }
  batchcast::producer::ProducerConfig cfg;
  cfg.options = *o;
  cfg.join_timeout_ms = 120000;
  for (size_t i = 0; i + 1 < rest.size(); i += 2) {
    if (rest[i] == "--socket") cfg.socket_name = rest[i + 1];
    else if (rest[i] == "--expect") cfg.expected_consumers = std::atoi(rest[i + 1].c_str());
  }
  auto source = batchcast::producer::MakePipelineSource(*o);
  auto p = source.ok() ? batchcast::producer::Producer::Create(cfg, std::move(source).value())
                       : batchcast::Result<std::unique_ptr<batchcast::producer::Producer>>(
                             source.status());
  if (!p.ok()) {
    std::fprintf(stderr, "conformance_leader: %s\n", p.status().ToString().c_str());
    return 1;
  }
  std::printf("ready %s\n", (*p)->address().c_str());
  std::fflush(stdout);
  batchcast::Status st = (*p)->Run();
  if (!st.ok()) std::fprintf(stderr, "conformance_leader: %s\n", st.ToString().c_str());
  return st.ok() ? 0 : 1;
}
