// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

#include "core/errors.h"

namespace batchcast::data {
namespace fs = std::filesystem;
namespace {

bool IsImageName(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

std::string IgnoredReason(const fs::path& p) {
  const std::string ext = p.extension().string();
  if (ext.empty()) return "no file extension (only .jpg, .jpeg and .png files are converted)";
  return fmt::format("unsupported extension '{}' (only .jpg, .jpeg and .png files are "
                     "converted; convert it to one of those first)", ext);
}

bool IsHidden(const fs::path& p) {
  std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

Status ListClass(const fs::path& dir, int64_t label, ImageFolderListing* out) {
  std::error_code ec;
  std::vector<std::string> paths;
  std::vector<IgnoredFile> ignored;
  fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (IsHidden(it->path())) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec)) continue;
    if (IsImageName(it->path())) paths.push_back(it->path().string());
    else ignored.push_back({it->path().string(), IgnoredReason(it->path())});
  }
  if (ec) return IoError("imagefolder: cannot list {}: {}", dir.string(), ec.message());
  std::sort(paths.begin(), paths.end());
  std::sort(ignored.begin(), ignored.end(),
            [](const IgnoredFile& a, const IgnoredFile& b) { return a.path < b.path; });
  if (paths.empty()) out->empty_classes.push_back(dir.filename().string());
  for (auto& p : paths) out->files.push_back({std::move(p), label});
  for (auto& f : ignored) out->ignored.push_back(std::move(f));
  return Status::Ok();
}

}  // namespace

Result<ImageFolderListing> ListImageFolder(const std::string& root) {
  std::error_code ec;
  if (!fs::exists(root, ec)) return NotFoundError("imagefolder: {} does not exist", root);
  if (!fs::is_directory(root, ec))
    return InvalidArgumentError("imagefolder: {} is not a directory", root);
  ImageFolderListing out;
  for (fs::directory_iterator it(root, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (it->is_directory(ec) && !IsHidden(it->path()))
      out.class_names.push_back(it->path().filename().string());
  }
  if (ec) return IoError("imagefolder: cannot list {}: {}", root, ec.message());
  if (out.class_names.empty())
    return InvalidArgumentError("imagefolder: {} has no class sub-directories "
                                "(expected root/<class>/<image>.jpg|png)", root);
  std::sort(out.class_names.begin(), out.class_names.end());
  for (size_t i = 0; i < out.class_names.size(); ++i)
    BC_RETURN_IF_ERROR(ListClass(fs::path(root) / out.class_names[i], int64_t(i), &out));
  if (out.files.empty())
    return InvalidArgumentError("imagefolder: no .jpg, .jpeg or .png files under {}{}", root,
                                out.ignored.empty()
                                    ? std::string()
                                    : fmt::format(" ({} other files, e.g. {}: {})",
                                                  out.ignored.size(), out.ignored[0].path,
                                                  out.ignored[0].reason));
  return out;
}

}  // namespace batchcast::data
