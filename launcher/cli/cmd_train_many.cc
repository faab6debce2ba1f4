// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// `batchcast train-many CONFIG.json [--address ADDR] [options]`: several TorchScript models
// in one process on one node stream (docs/multi-model.md). The trainer needs LibTorch, and
// the `batchcast` CLI does not link it (it is built and sanitized without it), so this
// subcommand runs `batchcast-train-many` from beside this binary with the same arguments.
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace batchcast::cli {

void RegisterTrainMany(CLI::App& app, int* exit_code) {
  CLI::App* cmd =
      app.add_subcommand("train-many",
                         "train several TorchScript models in one process on one batch stream "
                         "(docs/multi-model.md; runs batchcast-train-many)");
  cmd->prefix_command();  // every word goes to batchcast-train-many, --help included
  cmd->set_help_flag();
  cmd->callback([cmd, exit_code] {
    char self[PATH_MAX] = {0};
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    std::string dir = n > 0 ? std::string(self, size_t(n)) : std::string();
    dir = dir.substr(0, dir.rfind('/') + 1);
    const std::string program = dir + "batchcast-train-many";
    std::vector<std::string> words = cmd->remaining();
    std::vector<char*> argv = {const_cast<char*>(program.c_str())};
    for (std::string& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    std::fflush(stdout);
    execv(program.c_str(), argv.data());
    std::fprintf(stderr,
                 "batchcast train-many: cannot run %s (%s); it is built only with LibTorch: "
                 "apt-get install libtorch-dev, configure with -DBATCHCAST_TORCH=ON and build "
                 "the target batchcast_train_many\n",
                 program.c_str(), std::strerror(errno));
    *exit_code = 1;
  });
}

}  // namespace batchcast::cli
