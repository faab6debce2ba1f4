// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// `batchcast report RUN.h5 [--out DIR]`: renders a telemetry file to PNG/SVG plots and one
// self-contained HTML page by running batchcast_report.py (matplotlib) with /usr/bin/python3.
// `batchcast report A.h5 B.h5 [--labels a,b]` compares runs (accuracy over time, ...).
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace batchcast::cli {
namespace {

namespace fs = std::filesystem;

// The script next to the binary (build tree), or in <prefix>/share/batchcast (install).
std::string FindReportScript() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  fs::path dir = exe.parent_path();
  for (const fs::path& p : {dir / "batchcast_report.py",
                            dir.parent_path() / "share" / "batchcast" / "batchcast_report.py"})
    if (fs::exists(p, ec)) return p.string();
  return "";
}

// Runs argv without a shell and returns its exit code (127 if it could not start).
int RunProgram(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    std::fprintf(stderr, "batchcast report: fork failed: %s\n", std::strerror(errno));
    return 1;
  }
  if (pid == 0) {
    execv(argv[0], argv.data());
    std::fprintf(stderr, "batchcast report: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace

void RegisterReport(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "report", "render a telemetry HDF5 file as PNG/SVG plots and one HTML page (several "
                "files: compare the runs)");
  auto files = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  auto labels = std::make_shared<std::string>();
  auto python = std::make_shared<std::string>("/usr/bin/python3");
  auto script = std::make_shared<std::string>();
  cmd->add_option("file", *files, "telemetry file(s) written by telemetry(hdf5=...)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out,-o", *out, "output directory (default: <first file>_report)");
  cmd->add_option("--labels", *labels, "comma-separated run names when comparing files");
  cmd->add_option("--python", *python, "Python with h5py, numpy and matplotlib")
      ->capture_default_str();
  cmd->add_option("--script", *script, "report script (default: found next to the binary)");
  cmd->callback([=] {
    std::string path = script->empty() ? FindReportScript() : *script;
    if (path.empty()) {
      std::fprintf(stderr,
                   "batchcast report: batchcast_report.py not found next to the binary or in "
                   "../share/batchcast (pass --script)\n");
      *exit_code = 2;
      return;
    }
    std::vector<std::string> args = {*python, path};
    args.insert(args.end(), files->begin(), files->end());
    if (!out->empty()) args.insert(args.end(), {"--out", *out});
    if (!labels->empty()) args.insert(args.end(), {"--labels", *labels});
    *exit_code = RunProgram(args);
  });
}

}  // namespace batchcast::cli
