// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// Subcommands of the `batchcast` CLI. Each lives in its own cmd_<name>.cc and adds itself
// to the app through its Register function (listed once in main.cc). A subcommand's
// callback returns the process exit code through *exit_code.
#pragma once

#include <CLI/CLI.hpp>

namespace batchcast::cli {

void RegisterInfo(CLI::App& app, int* exit_code);
void RegisterConvert(CLI::App& app, int* exit_code);
void RegisterInspect(CLI::App& app, int* exit_code);
void RegisterReport(CLI::App& app, int* exit_code);
void RegisterServe(CLI::App& app, int* exit_code);
void RegisterStatus(CLI::App& app, int* exit_code);
void RegisterTrainMany(CLI::App& app, int* exit_code);
void RegisterProfile(CLI::App& app, int* exit_code);

// "a,b,,c" -> {"a", "b", "", "c"}.
std::vector<std::string> SplitCommas(const std::string& text);

// Lets `cmd` take the registry's options (batchcast/options.h): the words it does not parse
// itself are collected, in order, into *flags for ResolveOptions(), the one parser of every
// command line; `--help` lists them.
void AddRegistryOptions(CLI::App* cmd, std::vector<std::string>* flags);

}  // namespace batchcast::cli
