// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// `batchcast info --config`: the resolved configuration as JSON (like ucx_info -c).
#include <cstdio>
#include <memory>

#include "batchcast/options.h"
#include "cli/commands.h"

namespace batchcast::cli {

void RegisterInfo(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("info", "print build and configuration information");
  auto flags = std::make_shared<std::vector<std::string>>();  // owned by the callbacks that capture it
  auto config = std::make_shared<bool>(false);
  cmd->add_flag("--config-json,-c", *config, "print every option with its value and source as JSON");
  AddRegistryOptions(cmd, flags.get());
  cmd->callback([=] {
    auto opts = ResolveOptions(*flags);
    if (!opts.ok()) {
      std::fprintf(stderr, "batchcast info: %s\n", opts.status().ToString().c_str());
      *exit_code = 2;
      return;
    }
    if (*config) {
      std::printf("%s\n", OptionsToJson(*opts).c_str());
      return;
    }
    std::printf("batchcast %s\n", BATCHCAST_VERSION);
#ifdef BATCHCAST_HAVE_CUDA
    std::printf("cuda: compiled in\n");
#else
    std::printf("cuda: not compiled in\n");
#endif
    std::printf("options: %zu (batchcast info -c lists them)\n", ListOptions().size());
  });
}

}  // namespace batchcast::cli
