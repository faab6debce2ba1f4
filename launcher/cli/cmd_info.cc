// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// `batchcast info`: the build, the front doors and how many options; `--config`: the resolved
// configuration as JSON with the front doors that read each option (like ucx_info -c).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

#include "batchcast/options.h"
#include "cli/commands.h"
#include "core/option_scope.h"

namespace batchcast::cli {

void RegisterInfo(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("info", "print build and configuration information");
  auto flags = std::make_shared<std::vector<std::string>>();  // owned by the callbacks that capture it
  auto config = std::make_shared<bool>(false);
  auto doors = std::make_shared<bool>(false);
  cmd->add_flag("--config-json,-c", *config,
                "print every option with its value, source and the front doors that read it as "
                "JSON");
  cmd->add_flag("--front-doors", *doors, "print the front doors as JSON");
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
    if (*doors) {
      nlohmann::json arr = nlohmann::json::array();
      for (const FrontDoorInfo& d : FrontDoors())
        arr.push_back({{"key", d.key}, {"name", d.name}, {"leader", d.leader}, {"what", d.what},
                       {"instead", d.instead}});
      std::printf("%s\n", arr.dump(2).c_str());
      return;
    }
    std::printf("batchcast %s\n", BATCHCAST_VERSION);
#ifdef BATCHCAST_HAVE_CUDA
    std::printf("cuda: compiled in\n");
#else
    std::printf("cuda: not compiled in\n");
#endif
    std::printf("options: %zu (batchcast info -c lists them and the front doors that read each)\n",
                ListOptions().size());
    std::printf("front doors (each refuses the options it does not read, docs/configuration.md):\n");
    for (const FrontDoorInfo& d : FrontDoors())
      std::printf("  %-16s %-20s %s\n", d.key, d.name, d.what);
  });
}

}  // namespace batchcast::cli
