// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// `batchcast`: one CLI with subcommands (convert, inspect, info, ...). `--help` everywhere,
// `--version`, "did you mean" for a mistyped subcommand or flag, and three exit codes
// (docs/troubleshooting.md "Exit codes"): 0 ok, 1 runtime error, 2 usage error.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "batchcast/options.h"
#include "batchcast/version.h"
#include "cli/commands.h"
#include "core/suggest.h"

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

namespace {

// The innermost subcommand the words selected (the app itself if none).
CLI::App* Selected(CLI::App* app) {
  for (CLI::App* sub : app->get_subcommands()) return Selected(sub);
  return app;
}

// " (did you mean 'X'?)" for `word` among the subcommands and long flags of `cmd`.
std::string Hint(CLI::App* cmd, const std::string& word) {
  std::vector<std::string> names;
  bool flag = word.rfind("--", 0) == 0;
  if (flag) {
    for (const CLI::Option* o : cmd->get_options())
      for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
  } else {
    for (const CLI::App* sub : cmd->get_subcommands([](CLI::App*) { return true; }))
      names.push_back(sub->get_name());
  }
  std::string key = flag ? word.substr(0, word.find('=')) : word;
  std::string best = ClosestMatch(key, names);
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

// A parse error as one line that names the command, the cause and a hint; exit code 2.
int UsageError(CLI::App& app, const CLI::ParseError& e) {
  CLI::App* cmd = Selected(&app);
  std::string where = cmd == &app ? "batchcast" : "batchcast " + cmd->get_name();
  // Words nobody took (CLI11 may report them as extras or as a missing subcommand).
  std::vector<std::string> words = cmd->remaining();
  if (!words.empty()) {
    const std::string& w = words.front();
    const char* what = w.rfind("-", 0) == 0 ? "unknown flag" : "unknown subcommand or argument";
    std::fprintf(stderr, "%s: %s '%s'%s; see %s --help\n", where.c_str(), what, w.c_str(),
                 Hint(cmd, w).c_str(), where.c_str());
    return 2;
  }
  std::fprintf(stderr, "%s: %s; see %s --help\n", where.c_str(), e.what(), where.c_str());
  return 2;
}

}  // namespace
}  // namespace batchcast::cli

int main(int argc, char** argv) {
  CLI::App app{"batchcast: decode once per node, train everywhere"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("batchcast ") + batchcast::Version());
  app.footer("Exit codes: 0 ok, 1 runtime error, 2 usage error (docs/troubleshooting.md).");
  int exit_code = 0;
  batchcast::cli::RegisterInfo(app, &exit_code);
  batchcast::cli::RegisterConvert(app, &exit_code);
  batchcast::cli::RegisterInspect(app, &exit_code);
  batchcast::cli::RegisterReport(app, &exit_code);
  batchcast::cli::RegisterServe(app, &exit_code);
  batchcast::cli::RegisterStatus(app, &exit_code);
  batchcast::cli::RegisterTrainMany(app, &exit_code);
  batchcast::cli::RegisterProfile(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return batchcast::cli::UsageError(app, e);
  }
  // The documented codes only: a subcommand's other failure is a runtime error.
  return exit_code == 0 || exit_code == 2 ? exit_code : 1;
}
