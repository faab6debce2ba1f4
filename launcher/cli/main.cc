// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// `batchcast`: one CLI with subcommands (convert, inspect, info, ...). `--help` everywhere,
// `--version`, "did you mean" for a mistyped subcommand or flag, and three exit codes
// (docs/troubleshooting.md "Exit codes"): 0 ok, 1 runtime error, 2 usage error.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "batchcast/options.h"
#include "batchcast/version.h"
#include "cli/commands.h"
#include "core/suggest.h"

namespace batchcast::cli {

// The registry's options are not CLI11 options: the words CLI11 does not take are handed, in
// order, to ResolveOptions, the one parser of every command line (batchcast-run, a trainer's
// ResolveOptions, `batchcast serve`, `batchcast info`): a bare boolean flag (`--flip`) is true,
// `--key value` and `--key=value` both work, and a mistyped option gets a "did you mean".
namespace {

// "--batch-size", ... and "--config": the registry's flags.
std::vector<std::string> RegistryFlags() {
  std::vector<std::string> names = {"--config"};
  for (const auto& o : ListOptions()) {
    std::string name = "--" + o.key;
    for (auto& c : name)
      if (c == '_') c = '-';
    names.push_back(name);
  }
  return names;
}

// A `--word` that is neither the command's own flag nor a registry option.
class UnknownFlag : public CLI::ParseError {
 public:
  explicit UnknownFlag(const std::string& word)
      : CLI::ParseError("UnknownFlag", word, CLI::ExitCodes::ExtrasError) {}
};

}  // namespace

void AddRegistryOptions(CLI::App* cmd, std::vector<std::string>* flags) {
  cmd->allow_extras();
  cmd->parse_complete_callback([cmd, flags] {
    *flags = cmd->remaining();
    const std::vector<std::string> known = RegistryFlags();
    for (const std::string& w : *flags) {
      if (w == "--" || w.rfind("--", 0) != 0) continue;
      std::string name = w.substr(0, w.find('='));
      for (auto& c : name)
        if (c == '_') c = '-';
      if (std::find(known.begin(), known.end(), name) == known.end()) throw UnknownFlag(w);
    }
  });
  std::string help =
      "Batchcast options (also BATCHCAST_<KEY> or a --config file of 'key = value' lines; "
      "batchcast info -c prints them with their values): --KEY VALUE, --KEY=VALUE, or a bare "
      "--KEY for a boolean:\n";
  for (const auto& o : ListOptions()) {
    std::string name = "--" + o.key;
    for (auto& c : name)
      if (c == '_') c = '-';
    help += "  " + name + " [" + o.type + ", default " + o.default_value + "]\n";
  }
  cmd->footer(help);
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
    if (cmd->get_allow_extras())  // it takes the registry's options (AddRegistryOptions)
      for (const std::string& n : RegistryFlags()) names.push_back(n);
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
  // Words nobody took (CLI11 may report them as extras or as a missing subcommand); a command
  // that takes the registry's options hands its other words to ResolveOptions, which says
  // what is wrong with them, except a flag that is nobody's (UnknownFlag).
  std::vector<std::string> words = cmd->remaining();
  if (dynamic_cast<const UnknownFlag*>(&e) != nullptr) words = {e.what()};
  else if (cmd->get_allow_extras()) words.clear();
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
