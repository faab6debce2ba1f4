// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// `batchcast`: one CLI with subcommands (convert, inspect, info, ...). `--help` everywhere.
#include <CLI/CLI.hpp>

#include "batchcast/options.h"
#include "cli/commands.h"

namespace batchcast::cli {

void AddRegistryOptions(CLI::App* cmd, std::vector<std::string>* flags) {
  for (const auto& o : ListOptions()) {
    std::string name = "--" + o.key;
    for (auto& c : name)
      if (c == '_') c = '-';
    std::string key = o.key;
    cmd->add_option_function<std::string>(
           name, [flags, key](const std::string& v) { flags->push_back("--" + key + "=" + v); },
           o.help + " [" + o.type + ", default " + o.default_value + "]")
        ->group("Batchcast options (also BATCHCAST_<KEY> or a --config file)");
  }
  cmd->add_option_function<std::string>(
         "--config", [flags](const std::string& v) { flags->push_back("--config=" + v); },
         "config file of 'key = value' lines (below environment and flags in precedence)")
      ->group("Batchcast options (also BATCHCAST_<KEY> or a --config file)");
}

}  // namespace batchcast::cli

int main(int argc, char** argv) {
  CLI::App app{"batchcast: decode once per node, train everywhere"};
  app.require_subcommand(1);
  int exit_code = 0;
  batchcast::cli::RegisterInfo(app, &exit_code);
  batchcast::cli::RegisterConvert(app, &exit_code);
  batchcast::cli::RegisterInspect(app, &exit_code);
  batchcast::cli::RegisterReport(app, &exit_code);
  batchcast::cli::RegisterServe(app, &exit_code);
  batchcast::cli::RegisterStatus(app, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
