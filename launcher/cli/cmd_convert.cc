// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// `batchcast convert idx|imagefolder|h5`: build a dataset file in the Batchcast HDF5 layout;
// `batchcast convert --upgrade FILE`: rewrite an older file in the current layout.
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
#include "pipeline/stored_form.h"

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

// One offline bucket image: the stored form resized:<size> (the same decode and resampler),
// encoded. Thread-safe.
Result<std::vector<uint8_t>> MakeBucketImage(const std::string& encoding, int quality,
                                             std::span<const uint8_t> sample, int width,
                                             int height, int channels, int size) {
  data::StoreForm form;
  form.kind = data::StoreForm::Kind::kResized;
  form.short_side = size;
  BC_ASSIGN_OR_RETURN(data::StoredPixels px,
                      pipeline::MakeStoredPixels(form, sample, width, height, channels));
  const data::StoredShape& sh = px.shape;
  if (encoding == "png") return data::EncodePng(px.pixels, sh.width, sh.height, sh.channels);
  return data::EncodeJpeg(px.pixels, sh.width, sh.height, sh.channels, quality);
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
    const std::string enc = b->encoding;
    const int q = *quality;
    b->encoder = [enc, q](std::span<const uint8_t> s, int w, int h, int c, int size) {
      return MakeBucketImage(enc, q, s, w, h, c, size);
    };
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
  });
}

// --store FORM [--compression C] (docs/dataset-format.md, "Stored forms"). Returns the text
// of --store, parsed by ApplyStoreText once every option is in.
std::shared_ptr<std::string> AddStoreOptions(CLI::App* cmd, data::StoreOptions* st) {
  auto text = std::make_shared<std::string>("encoded");
  cmd->add_option("--store", *text,
                  "what is stored per sample: encoded (the original bytes), decoded (the "
                  "pixels), resized:<S> (shorter side S), resized:<W>x<H> (exactly, as "
                  "crop=none at that size) or buckets:<S1>,<S2>,... (encoded + offline buckets); "
                  "random steps always stay online")
      ->capture_default_str();
  cmd->add_option("--compression", st->compression,
                  "stored pixels: chunk compression none | gzip[:1-9] | lz4 (default none; lz4 "
                  "needs hdf5-filter-plugin; zstd is refused: Debian's plugins have none)");
  return text;
}

// Parses --store into `st` (buckets:<sizes> become offline buckets); false after printing why.
bool ApplyStoreText(const std::string& text, data::StoreOptions* st, data::OfflineBuckets* b) {
  auto form = data::ParseStoreForm(text);
  if (!form.ok()) {
    std::fprintf(stderr, "batchcast %s\n", form.status().message().c_str());
    return false;
  }
  st->form = *form;
  st->make_pixels = pipeline::MakeStoredPixels;
  if (form->kind != data::StoreForm::Kind::kBuckets) return true;
  if (!b->sizes.empty()) {
    std::fprintf(stderr, "batchcast convert: --store %s and --buckets both name offline buckets; "
                 "give the sizes once\n", text.c_str());
    return false;
  }
  b->sizes = form->bucket_sizes;
  st->form = data::StoreForm{};  // the encoded bytes, plus the buckets
  return true;
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
    std::printf("images (%s): %.1f KiB per stored sample on average, HDF5 chunks of %lld "
                "samples (%.1f KiB), compression %s; file %.1f MiB (%.3fx the stored bytes)\n",
                r->store.c_str(), r->stored_bytes / 1024.0 / double(r->samples),
                static_cast<long long>(r->chunk_samples), r->chunk_bytes / 1024.0,
                r->compression.c_str(),
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

}  // namespace

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

namespace {

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
  cmd->add_option("--limit", o->limit,
                  "convert only N files, taken evenly across the sorted listing (0 = all)")
      ->check(CLI::NonNegativeNumber);
  AddBucketOptions(cmd, &o->buckets);
  auto store = AddStoreOptions(cmd, &o->store);
  cmd->callback([=] {
    if (!ApplyStoreText(*store, &o->store, &o->buckets)) {
      *exit_code = 1;
      return;
    }
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

void RegisterStored(CLI::App* convert, int* exit_code) {
  auto* cmd = convert->add_subcommand(
      "h5", "re-store a Batchcast file (encoded or raw) in another stored form (--store)");
  auto o = std::make_shared<data::StoredConvertOptions>();
  cmd->add_option("source", o->source, "the Batchcast HDF5 file to read")->required();
  cmd->add_option("--out", o->out_path, "output HDF5 file")->required();
  cmd->add_option("--limit", o->limit, "convert only the first N samples (0 = all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", o->threads, "decoding threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--skip-bad", o->skip_bad,
                "leave out (and report) samples that cannot be read, fail their checksum or do "
                "not decode, instead of failing");
  cmd->add_flag("--force", o->overwrite, "replace OUT if it exists");
  AddBucketOptions(cmd, &o->buckets);
  auto store = AddStoreOptions(cmd, &o->store);
  cmd->callback([=] {
    if (!ApplyStoreText(*store, &o->store, &o->buckets)) {
      *exit_code = 1;
      return;
    }
    ArmCleanup(o->out_path);
    Report(data::ConvertStored(*o, MakeProgress("convert")), o->out_path, exit_code);
  });
}

// `convert --upgrade FILE [--out OUT] [--force]`: a layout version 1 file rewritten in the
// current layout (in place unless --out); the subcommands exclude it.
void RegisterUpgrade(CLI::App* convert, int* exit_code) {
  auto o = std::make_shared<data::UpgradeOptions>();
  auto* upgrade = convert->add_option(
      "--upgrade", o->source,
      "rewrite FILE in the current layout (version 2: encoded samples read with pread, without "
      "the HDF5 lock), every sample checked against its checksum first; in place unless --out");
  auto* out = convert->add_option("--out", o->out_path,
                                  "with --upgrade: write the upgraded file here instead");
  auto* force = convert->add_flag("--force", o->overwrite,
                                  "with --upgrade --out: replace OUT if it exists");
  for (CLI::App* sub : convert->get_subcommands({})) sub->excludes(upgrade);
  convert->callback([=] {
    if (upgrade->count() == 0) {
      if (out->count() + force->count() > 0) {
        std::fprintf(stderr, "batchcast convert: --out and --force go after the subcommand "
                     "(batchcast convert idx --out F.h5), or with --upgrade\n");
        *exit_code = 1;
      } else if (convert->get_subcommands().empty()) {
        std::fprintf(stderr, "batchcast convert: give a source (idx, imagefolder or h5) or "
                     "--upgrade FILE (see batchcast convert --help)\n");
        *exit_code = 1;
      }
      return;
    }
    const std::string target = o->out_path.empty() ? o->source : o->out_path;
    ArmCleanup(target);
    auto r = data::ConvertUpgrade(*o, MakeProgress("upgrade"));
    if (!r.ok()) {
      std::fprintf(stderr, "batchcast convert: %s\n", r.status().message().c_str());
      *exit_code = 1;
      return;
    }
    if (r->already_current) {
      std::printf("%s is already in the current layout (version %d, samples read without a "
                  "lock per sample): nothing to do\n", o->source.c_str(), r->layout_from);
      return;
    }
    std::printf("upgraded %s: layout version %d -> %d, %lld samples (%lld stored bytes), "
                "written to %s, %.2f s\n", o->source.c_str(), r->layout_from, r->layout_to,
                static_cast<long long>(r->samples), static_cast<long long>(r->stored_bytes),
                target.c_str(), r->seconds);
  });
}

}  // namespace

void RegisterConvert(CLI::App& app, int* exit_code) {
  auto* convert = app.add_subcommand(
      "convert", "convert a dataset into the Batchcast HDF5 layout (docs/dataset-format.md), or "
                 "upgrade an older file (--upgrade FILE)");
  convert->require_subcommand(0, 1);
  RegisterIdx(convert, exit_code);
  RegisterImageFolder(convert, exit_code);
  RegisterStored(convert, exit_code);
  RegisterUpgrade(convert, exit_code);
}

}  // namespace batchcast::cli
