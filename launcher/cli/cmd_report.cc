// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// `batchcast report RUN [--out DIR]`: a run directory (telemetry=dir:RUN) or one telemetry
// file, merged, summarised and diagnosed by the runtime's own code (telemetry/run_report.h),
// rendered to PNG/SVG plots and one self-contained HTML page by batchcast_report.py
// (matplotlib) with /usr/bin/python3. `batchcast report RUN_A RUN_B [--labels a,b]` compares
// runs side by side (throughput, data wait, CPU, RSS, GPU, energy, cost per trial).
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
#include "telemetry/run_outputs.h"
#include "telemetry/run_report.h"

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

// "a,b" -> {"a", "b"}; empty: each run's file or directory name.
std::vector<std::string> RunLabels(const std::string& labels, const std::vector<std::string>& runs) {
  std::vector<std::string> out;
  if (!labels.empty()) {
    size_t start = 0;
    for (size_t comma; (comma = labels.find(',', start)) != std::string::npos; start = comma + 1)
      out.push_back(labels.substr(start, comma - start));
    out.push_back(labels.substr(start));
    return out;
  }
  for (const std::string& r : runs) {
    fs::path p(r);
    if (p.filename().empty()) p = p.parent_path();  // "run/" -> "run"
    out.push_back(p.has_extension() && p.extension() == ".h5" ? p.stem().string()
                                                              : p.filename().string());
  }
  return out;
}

// Every run read, summarised and diagnosed; the data the page renders goes to `data_path`
// and each run's summary is printed. Returns the exit code (0: all read).
int WriteReportData(const std::vector<std::string>& runs, const std::vector<std::string>& labels,
                    const std::string& data_path) {
  std::string json = "[";
  for (size_t i = 0; i < runs.size(); ++i) {
    auto run = telemetry::LoadRun(runs[i], labels[i]);
    if (!run.ok()) {
      std::fprintf(stderr, "batchcast report: %s\n", run.status().message().c_str());
      return 2;
    }
    std::string summary;
    const std::string data = telemetry::RunReportJson(*run, &summary);
    json += (i ? ",\n" : "") + data;
    const std::string unfinished =
        run->unfinished.empty() ? std::string()
                                : ", " + std::to_string(run->unfinished.size()) +
                                      " empty file(s) of processes that never finished";
    std::printf("== %s (%s): %zu file(s), %zu rank(s)%s\n%s", labels[i].c_str(),
                runs[i].c_str(), run->files.size(), run->ranks.size(), unfinished.c_str(),
                summary.c_str());
  }
  json += "]\n";
  std::fflush(stdout);  // the summaries before what the script prints
  FILE* f = std::fopen(data_path.c_str(), "w");
  if (f == nullptr || std::fputs(json.c_str(), f) < 0 || std::fclose(f) != 0) {
    std::fprintf(stderr, "batchcast report: cannot write %s: %s\n", data_path.c_str(),
                 std::strerror(errno));
    return 1;
  }
  return 0;
}

bool IsProfileJson(const std::vector<std::string>& files) {
  return files.size() == 1 && fs::path(files[0]).extension() == ".json";
}

}  // namespace

void RegisterReport(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "report", "merge a run directory (telemetry=dir:RUN) or telemetry file into per-rank, "
                "per-trial, per-node and per-job tables, PNG/SVG plots and one HTML page "
                "(several runs: compared side by side)");
  auto files = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  auto labels = std::make_shared<std::string>();
  auto python = std::make_shared<std::string>("/usr/bin/python3");
  auto script = std::make_shared<std::string>();
  cmd->add_option("run", *files,
                  "run directories (telemetry=dir:RUN) or telemetry files (telemetry(hdf5=...)); "
                  "or one `batchcast profile --json` file")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("--out,-o", *out, "output directory (default: <first run>_report)");
  cmd->add_option("--labels", *labels, "comma-separated run names when comparing runs");
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
    std::string dir = *out;
    if (dir.empty()) {
      fs::path first((*files)[0]);
      if (first.filename().empty()) first = first.parent_path();
      dir = (first.parent_path() / first.stem()).string() + "_report";
    }
    // The output directory is checked before any work (docs/telemetry.md "Outputs").
    if (Status st = telemetry::PrepareOutputDir(dir, "report directory"); !st.ok()) {
      std::fprintf(stderr, "batchcast report: %s\n", st.message().c_str());
      *exit_code = 2;
      return;
    }
    args.insert(args.end(), {"--out", dir});
    if (!labels->empty()) args.insert(args.end(), {"--labels", *labels});
    if (!IsProfileJson(*files)) {
      const std::vector<std::string> names = RunLabels(*labels, *files);
      if (names.size() != files->size()) {
        std::fprintf(stderr, "batchcast report: %zu labels for %zu runs; give one label per run\n",
                     names.size(), files->size());
        *exit_code = 2;
        return;
      }
      const std::string data = dir + "/report-data.json";
      if ((*exit_code = WriteReportData(*files, names, data)) != 0) return;
      args.insert(args.end(), {"--data", data});
    }
    *exit_code = RunProgram(args);
  });
}

}  // namespace batchcast::cli
