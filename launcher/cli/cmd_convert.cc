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
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/errors.h"
#include "data/convert.h"
#include "data/dataset_writer.h"
#include "data/image_encode.h"
#include "pipeline/decode.h"
#include "pipeline/transform.h"

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

// One offline bucket image: decode (DCT-scaled to at least the target), resize so the
// shorter side is `size` (never upscaled), encode. Thread-safe (a decoder per thread).
Result<std::vector<uint8_t>> MakeBucketImage(const std::string& encoding, int quality,
                                             std::span<const uint8_t> sample, int width,
                                             int height, int channels, int size) {
  thread_local std::unique_ptr<pipeline::ImageDecoder> decoder;
  pipeline::DecodedImage decoded;
  pipeline::PixelView view;
  if (channels > 0) {  // raw pixels
    if (channels != 1 && channels != 3)
      return InvalidArgumentError("raw samples with {} channels cannot be bucketed (1 or 3)",
                                  channels);
    view = pipeline::PixelView{sample.data(), size_t(width) * channels, width, height, channels};
  } else {
    if (!decoder) {
      BC_ASSIGN_OR_RETURN(pipeline::ImageDecoder d, pipeline::ImageDecoder::Create());
      decoder = std::make_unique<pipeline::ImageDecoder>(std::move(d));
    }
    BC_ASSIGN_OR_RETURN(pipeline::ImageHeader header,
                        decoder->ReadHeader(sample, int64_t(1) << 31));
    width = header.width;
    height = header.height;
    const double f = std::min(1.0, double(size) / std::min(width, height));
    const int tw = std::max(1, int(width * f + 0.5)), th = std::max(1, int(height * f + 0.5));
    int scale = pipeline::kScaleDenom;
    if (header.format == pipeline::ImageFormat::kJpeg)
      scale = pipeline::ChooseScaleNum(width, height, tw, th);
    BC_RETURN_IF_ERROR(decoder->Decode(sample, header, scale, header.channels == 1 ? 1 : 3,
                                       &decoded));
    view = pipeline::PixelView{decoded.data(), decoded.stride(), decoded.width, decoded.height,
                               decoded.channels};
  }
  const double f = std::min(1.0, double(size) / std::min(width, height));
  const int tw = std::max(1, int(width * f + 0.5)), th = std::max(1, int(height * f + 0.5));
  std::vector<uint8_t> resized(size_t(tw) * th * view.channels);
  pipeline::ResizeBox(view, pipeline::FullBox(view.width, view.height), tw, th, resized.data(),
                      size_t(tw) * view.channels);
  if (encoding == "png") return data::EncodePng(resized, tw, th, view.channels);
  return data::EncodeJpeg(resized, tw, th, view.channels, quality);
}

// --buckets 96,128,160 [--bucket-encoding jpeg|png] [--bucket-quality 90]
void AddBucketOptions(CLI::App* cmd, data::OfflineBuckets* b) {
  auto text = std::make_shared<std::string>();
  auto quality = std::make_shared<int>(90);
  cmd->add_option("--buckets", *text,
                  "also store every image pre-resized (shorter side) per size, e.g. "
                  "96,128,160,224: offline progressive-resizing buckets");
  cmd->add_option("--bucket-encoding", b->encoding, "how bucket images are stored")
      ->check(CLI::IsMember({"jpeg", "png"}))
      ->capture_default_str();
  cmd->add_option("--bucket-quality", *quality, "JPEG quality of bucket images (1-100)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->parse_complete_callback([=] {
    b->sizes.clear();
    if (text->empty()) return;
    size_t start = 0;
    while (start <= text->size()) {
      size_t end = text->find(',', start);
      if (end == std::string::npos) end = text->size();
      std::string item = text->substr(start, end - start);
      try {
        size_t used = 0;
        int v = std::stoi(item, &used);
        if (used != item.size()) throw std::invalid_argument(item);
        b->sizes.push_back(v);
      } catch (const std::exception&) {
        throw CLI::ValidationError("--buckets", "'" + item + "' is not a size in pixels (e.g. "
                                   "--buckets 96,128,160)");
      }
      start = end + 1;
    }
    const std::string enc = b->encoding;
    const int q = *quality;
    b->encoder = [enc, q](std::span<const uint8_t> s, int w, int h, int c, int size) {
      return MakeBucketImage(enc, q, s, w, h, c, size);
    };
  });
}

// Every file the conversion did not store, each once: bad ones (`bad` names them "skipped"
// or "bad"), ignored ones with the reason, and empty classes.
void PrintListed(const data::ConvertReport& r, const char* bad) {
  for (const auto& s : r.skipped) std::fprintf(stderr, "%s: %s\n", bad, s.c_str());
  for (const auto& s : r.ignored) std::fprintf(stderr, "ignored: %s\n", s.c_str());
  for (const auto& c : r.empty_classes) std::fprintf(stderr, "empty class: %s\n", c.c_str());
}

// --check: lists everything, writes nothing; exit status 1 when a conversion with the same
// flags would fail.
void ReportCheck(const Result<data::ConvertReport>& r, const data::ImageFolderConvertOptions& o,
                 int* exit_code) {
  if (!r.ok()) {
    std::fprintf(stderr, "batchcast convert: %s\n", r.status().message().c_str());
    *exit_code = 1;
    return;
  }
  PrintListed(r.value(), "bad");
  std::printf("checked %s: %zu bad images, %zu ignored files, %zu empty classes, %.2f s\n",
              o.root.c_str(), r->skipped.size(), r->ignored.size(), r->empty_classes.size(),
              r->seconds);
  if (std::string problems = data::ImageFolderProblems(o, r.value()); !problems.empty()) {
    std::fprintf(stderr, "batchcast convert: %s\n", problems.substr(0, problems.find('\n')).c_str());
    *exit_code = 1;
  }
}

void Report(const Result<data::ConvertReport>& r, const std::string& out, int* exit_code) {
  if (!r.ok()) {
    std::fprintf(stderr, "batchcast convert: %s\n", r.status().message().c_str());
    *exit_code = 1;
    return;
  }
  PrintListed(r.value(), "skipped");
  std::printf("wrote %s: %lld samples, %lld stored bytes, %zu skipped, %zu ignored files, "
              "%.2f s\n", out.c_str(), static_cast<long long>(r->samples),
              static_cast<long long>(r->stored_bytes), r->skipped.size(), r->ignored.size(),
              r->seconds);
  if (r->chunk_samples > 0 && r->samples > 0)
    std::printf("images: %.1f KiB per stored sample on average, HDF5 chunks of %lld samples, "
                "compression %s; file %.1f MiB (%.3fx the stored bytes)\n",
                r->stored_bytes / 1024.0 / double(r->samples),
                static_cast<long long>(r->chunk_samples), r->compression.c_str(),
                r->file_bytes / 1048576.0,
                r->stored_bytes ? double(r->file_bytes) / r->stored_bytes : 0.0);
  if (r->bucket_sizes.empty()) return;
  int64_t total = 0;
  std::string per;
  for (size_t i = 0; i < r->bucket_sizes.size(); ++i) {
    total += r->bucket_bytes[i];
    per += fmt::format("{}{}: {:.1f} MiB ({:.3f}x)", i ? ", " : "", r->bucket_sizes[i],
                       r->bucket_bytes[i] / 1048576.0,
                       r->stored_bytes ? double(r->bucket_bytes[i]) / r->stored_bytes : 0.0);
  }
  std::printf("offline buckets: %s; storage %.1f MiB for the images + %.1f MiB for the buckets "
              "= %.3fx the images alone\n", per.c_str(), r->stored_bytes / 1048576.0,
              total / 1048576.0,
              r->stored_bytes ? double(r->stored_bytes + total) / r->stored_bytes : 0.0);
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
  auto o = std::make_shared<data::IdxConvertOptions>();  // owned by the callbacks that capture it
  auto names = std::make_shared<std::string>();
  auto fashion = std::make_shared<bool>(false);
  auto no_compress = std::make_shared<bool>(false);
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
  auto* nc = cmd->add_flag("--no-compress", *no_compress, "raw: store chunks without gzip");
  cmd->add_option("--compression", o->compression,
                  "raw: chunk compression none | gzip[:1-9] | lz4 (default gzip:1; lz4 needs "
                  "hdf5-filter-plugin; zstd is refused: Debian's plugins have none)")
      ->excludes(nc);
  cmd->add_flag("--force", o->overwrite, "replace OUT if it exists");
  AddBucketOptions(cmd, &o->buckets);
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
  auto o = std::make_shared<data::ImageFolderConvertOptions>();
  cmd->add_option("root", o->root, "the ImageFolder root directory")->required();
  cmd->add_option("--out", o->out_path, "output HDF5 file (required unless --check)");
  cmd->add_option("--threads", o->threads, "reading/probing threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--skip-bad", o->skip_bad,
                "skip unreadable or corrupt images (each is reported) instead of failing; "
                "without it, every bad image is listed and nothing is written");
  cmd->add_flag("--allow-empty-classes", o->allow_empty_classes,
                "keep class directories that hold no image (refused by default, as torchvision "
                "does)");
  cmd->add_flag("--check", o->check_only,
                "read and check every file, list every bad or ignored file and empty class with "
                "its cause, write nothing (--out is not needed)");
  cmd->add_flag("--force", o->overwrite, "replace OUT if it exists");
  AddBucketOptions(cmd, &o->buckets);
  cmd->callback([=] {
    if (o->check_only) {
      ReportCheck(data::ConvertImageFolder(*o, MakeProgress("check")), *o, exit_code);
      return;
    }
    if (o->out_path.empty()) {
      std::fprintf(stderr, "batchcast convert: imagefolder needs --out FILE.h5 (or --check to "
                   "only check the files)\n");
      *exit_code = 1;
      return;
    }
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
