// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// `batchcast convert idx|imagefolder`: build a dataset file in the Batchcast HDF5 layout.
// Output is atomic: written to OUT.partial-<pid>, renamed on success; SIGINT/SIGTERM remove
// the partial file; after SIGKILL it stays (delete it) and the reader refuses it.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"
#include "data/convert.h"
#include "data/dataset_writer.h"

namespace batchcast::cli {
namespace {

char g_partial[4096];  // file-local: the signal handler may only touch static storage

void RemovePartialAndDie(int sig) {
  if (g_partial[0] != '\0') ::unlink(g_partial);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void ArmCleanup(const std::string& out) {
  std::string partial = data::PartialPath(out);
  std::snprintf(g_partial, sizeof(g_partial), "%s", partial.c_str());
  ::signal(SIGINT, RemovePartialAndDie);
  ::signal(SIGTERM, RemovePartialAndDie);
}

// A progress bar on stderr, only when stderr is a terminal; redrawn at most every 100 ms.
data::ProgressFn MakeProgress(const std::string& label) {
  if (!::isatty(STDERR_FILENO)) return nullptr;
  auto last = std::make_shared<std::chrono::steady_clock::time_point>();
  return [label, last](int64_t done, int64_t total) {
    auto now = std::chrono::steady_clock::now();
    if (done != total && now - *last < std::chrono::milliseconds(100)) return;
    *last = now;
    constexpr int kWidth = 40;
    int filled = total > 0 ? int(done * kWidth / total) : kWidth;
    std::fprintf(stderr, "\r%s [%.*s%*s] %lld/%lld", label.c_str(), filled,
                 "########################################", kWidth - filled, "",
                 static_cast<long long>(done), static_cast<long long>(total));
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

void Report(const Result<data::ConvertReport>& r, const std::string& out, int* exit_code) {
  if (!r.ok()) {
    std::fprintf(stderr, "batchcast convert: %s\n", r.status().message().c_str());
    *exit_code = 1;
    return;
  }
  for (const auto& s : r->skipped) std::fprintf(stderr, "skipped: %s\n", s.c_str());
  std::printf("wrote %s: %lld samples, %lld stored bytes, %zu skipped, %lld ignored files, "
              "%.2f s\n", out.c_str(), static_cast<long long>(r->samples),
              static_cast<long long>(r->stored_bytes), r->skipped.size(),
              static_cast<long long>(r->ignored_files), r->seconds);
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

void RegisterIdx(CLI::App* convert, int* exit_code) {
  auto* cmd = convert->add_subcommand("idx", "convert MNIST / Fashion-MNIST IDX files (.gz or plain)");
  auto* o = new data::IdxConvertOptions();  // lives as long as the app
  auto* names = new std::string();
  auto* fashion = new bool(false);
  auto* no_compress = new bool(false);
  cmd->add_option("--images", o->images_path, "IDX image file (N x H x W [x C] unsigned bytes)")
      ->required();
  cmd->add_option("--labels", o->labels_path, "IDX label file (N unsigned bytes)")->required();
  cmd->add_option("--out", o->out_path, "output HDF5 file")->required();
  cmd->add_option("--encode", o->encode, "how samples are stored: raw pixels, png or jpeg bytes")
      ->check(CLI::IsMember({"raw", "png", "jpeg"}))
      ->capture_default_str();
  cmd->add_option("--quality", o->quality, "JPEG quality (1-100)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  auto* cn = cmd->add_option("--class-names", *names, "class names in label order, comma separated");
  cmd->add_flag("--fashion-mnist-classes", *fashion, "use Fashion-MNIST's ten class names")
      ->excludes(cn);
  cmd->add_option("--threads", o->threads, "encoding threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-compress", *no_compress, "raw: store chunks without gzip");
  cmd->add_flag("--force", o->overwrite, "replace OUT if it exists");
  cmd->callback([=] {
    if (*fashion) o->class_names = data::FashionMnistClassNames();
    if (!names->empty()) o->class_names = SplitCommas(*names);
    o->compress = !*no_compress;
    ArmCleanup(o->out_path);
    Report(data::ConvertIdx(*o, MakeProgress("convert")), o->out_path, exit_code);
  });
}

void RegisterImageFolder(CLI::App* convert, int* exit_code) {
  auto* cmd = convert->add_subcommand(
      "imagefolder", "convert ROOT/<class>/<image>.jpg|jpeg|png (classes sorted by name); the "
                     "original file bytes are stored");
  auto* o = new data::ImageFolderConvertOptions();
  cmd->add_option("root", o->root, "the ImageFolder root directory")->required();
  cmd->add_option("--out", o->out_path, "output HDF5 file")->required();
  cmd->add_option("--threads", o->threads, "reading/probing threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--skip-bad", o->skip_bad,
                "skip unreadable or corrupt images (each is reported) instead of failing");
  cmd->add_flag("--force", o->overwrite, "replace OUT if it exists");
  cmd->callback([=] {
    ArmCleanup(o->out_path);
    Report(data::ConvertImageFolder(*o, MakeProgress("convert")), o->out_path, exit_code);
  });
}

}  // namespace

void RegisterConvert(CLI::App& app, int* exit_code) {
  auto* convert = app.add_subcommand(
      "convert", "convert a dataset into the Batchcast HDF5 layout (docs/dataset-format.md)");
  convert->require_subcommand(1);
  RegisterIdx(convert, exit_code);
  RegisterImageFolder(convert, exit_code);
}

}  // namespace batchcast::cli
