// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// conformance_consumer --out FILE [--address NAME] [--per-rank R:FLAGS;R:FLAGS]
//                      [--notify-attached FIFO] [--notify-first FIFO] [--wait FIFO]
//                      [Batchcast options...]
// One consumer of the front-door conformance test (conformance.py): attaches to NAME (or, with
// no --address, from the environment as a trainer under batchcast-run does), reads the whole
// stream and writes one digest line per batch (digest.h) to FILE (%r: its RANK). The FIFOs
// order a late join without timing: it writes a byte to --notify-attached once attached and
// to --notify-first after its first batch, then waits for a byte on --wait before it goes on.
// --per-rank adds the flags of its RANK (a batchcast-run trainer's own batch size).
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "batchcast/consumer.h"
#include "batchcast/options.h"
#include "tests/conformance/digest.h"

namespace {

std::string Own(std::vector<std::string>& rest, const std::string& flag) {
  for (size_t i = 0; i + 1 < rest.size(); ++i)
    if (rest[i] == flag) {
      std::string v = rest[i + 1];
      rest.erase(rest.begin() + long(i), rest.begin() + long(i) + 2);
      return v;
    }
  return "";
}

void Signal(const std::string& fifo) {
  if (fifo.empty()) return;
  int fd = open(fifo.c_str(), O_WRONLY);
  if (fd < 0 || write(fd, "1", 1) != 1) std::perror(fifo.c_str());
  if (fd >= 0) close(fd);
}

void Await(const std::string& fifo) {
  if (fifo.empty()) return;
  int fd = open(fifo.c_str(), O_RDONLY);
  char c;
  if (fd < 0 || read(fd, &c, 1) != 1) std::perror(fifo.c_str());
  if (fd >= 0) close(fd);
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "conformance_consumer: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> words(argv + 1, argv + argc), rest;
  const char* rank_env = std::getenv("RANK");
  const std::string rank = rank_env != nullptr ? rank_env : "";
  // --per-rank "0:--batch-size=8;1:--batch-size=5": this RANK's flags join the words.
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    if (words[i] != "--per-rank") continue;
    std::string spec = words[i + 1], mine;
    words.erase(words.begin() + long(i), words.begin() + long(i) + 2);
    for (size_t at = 0; at <= spec.size();) {
      size_t end = spec.find(';', at);
      if (end == std::string::npos) end = spec.size();
      const std::string item = spec.substr(at, end - at);
      if (item.rfind(rank + ":", 0) == 0) mine = item.substr(rank.size() + 1);
      at = end + 1;
    }
    for (size_t at = 0; !mine.empty() && at <= mine.size();) {
      size_t end = mine.find(',', at);
      if (end == std::string::npos) end = mine.size();
      words.push_back(mine.substr(at, end - at));
      at = end + 1;
    }
    break;
  }
  auto o = batchcast::ResolveOptions(words, &rest);
  if (!o.ok()) return Fail(o.status().ToString());
  std::string out = Own(rest, "--out"), address = Own(rest, "--address");
  const std::string attached = Own(rest, "--notify-attached"), first = Own(rest, "--notify-first"),
                    wait = Own(rest, "--wait");
  if (out.empty() || !rest.empty()) return Fail("usage: see the header of conformance_consumer.cc");
  if (size_t at = out.find("%r"); at != std::string::npos) out.replace(at, 2, rank);
  auto c = address.empty() ? batchcast::AttachFromEnvironment(*o)
                           : batchcast::Consumer::Attach(address, *o, rank.empty() ? -1 : std::atoi(rank.c_str()));
  if (!c.ok()) return Fail(c.status().ToString());
  Signal(attached);
  std::ofstream file(out);
  batchcast::Batch b;
  for (int64_t n = 0;; ++n) {
    batchcast::Status st = (*c)->Next(&b);
    if (st.code() == batchcast::StatusCode::kEndOfStream) break;
    if (!st.ok()) return Fail(st.ToString());
    file << batchcast::conformance::DigestLine(b) << "\n";
    b.Release();
    if (n == 0) {
      file.flush();
      Signal(first);
      Await(wait);
    }
  }
  file.close();
  if (batchcast::Status st = (*c)->Detach(); !st.ok()) return Fail(st.ToString());
  return file ? 0 : Fail("cannot write " + out);
}
