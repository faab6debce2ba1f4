// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// `batchcast profile DATASET [pipeline options]`: the storage-strategy profiler (PRESTO, docs/
// profiler.md). Enumerates strategies (stored form x compression x decoded-sample cache x
// decode threads), materialises each stored form from a sample budget into a temp directory
// with the real converter, measures offline time, storage, and the online samples/s and
// CPU-seconds per sample of the producer core's own source (MakePipelineSource: what every
// leader fills its slots with), and recommends a strategy under weights p,s,t (min-max
// normalised; p and s count against). `--from-json` re-scores a measured run without
// measuring again.
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "core/errors.h"
#include "data/convert.h"
#include "data/image_folder.h"
#include "pipeline/stored_form.h"
#include "producer/batch_source.h"

namespace batchcast::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

struct ProfileArgs {
  std::string dataset, tmp = "/tmp", csv, json, from_json, forms, compressions = "none,lz4,gzip:1";
  std::string thread_counts, weights = "0,0,1", drop_caches = "auto", caches = "off,on";
  int64_t samples = 256;
  int epochs = 2;
  bool keep = false;
  std::vector<std::string> flags;  // the pipeline options (registry)
};

// One measured strategy.
struct Strategy {
  std::string form, compression;
  bool cache = false;
  int threads = 1;
  double offline_s = 0;       // materialising the stored form from the sample budget
  int64_t storage_bytes = 0;  // its file
  double mean_sample_bytes = 0;
  int64_t chunk_bytes = 0;
  double samples_per_s = 0;      // online, epochs after the first (steady state)
  double first_epoch_samples_per_s = 0;
  double cpu_s_per_sample = 0;   // online, process CPU over the epochs after the first
  double score = 0, p_norm = 0, s_norm = 0, t_norm = 0;
};

double ProfileCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double ProfileSecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Result<std::vector<double>> ParseWeights(const std::string& text) {
  std::vector<double> w;
  for (const std::string& item : SplitCommas(text)) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(v >= 0) || v > 1e6)
      return InvalidArgumentError("profile: --weights '{}': '{}' is not a weight >= 0 (give "
                                  "p,s,t, e.g. 0,0,1 or 1,0,1)", text, item);
    w.push_back(v);
  }
  if (w.size() != 3)
    return InvalidArgumentError("profile: --weights '{}' has {} values; give three: p (offline "
                                "time), s (storage), t (online throughput), e.g. 0,0,1", text,
                                w.size());
  if (w[0] + w[1] + w[2] == 0)
    return InvalidArgumentError("profile: --weights '{}' are all 0: nothing to optimise", text);
  return w;
}

// Min-max normalises p, s and t over the strategies and scores w_t*t - w_p*p - w_s*s
// (PRESTO's objective; a quantity equal for every strategy normalises to 0). Returns the
// index of the best (the first of equal scores).
size_t ScoreStrategies(const std::vector<double>& w, std::vector<Strategy>* all) {
  auto norm = [&](auto get, auto set) {
    double lo = 1e300, hi = -1e300;
    for (const Strategy& s : *all) lo = std::min(lo, get(s)), hi = std::max(hi, get(s));
    for (Strategy& s : *all) set(s, hi > lo ? (get(s) - lo) / (hi - lo) : 0.0);
  };
  norm([](const Strategy& s) { return s.offline_s; }, [](Strategy& s, double v) { s.p_norm = v; });
  norm([](const Strategy& s) { return double(s.storage_bytes); },
       [](Strategy& s, double v) { s.s_norm = v; });
  norm([](const Strategy& s) { return s.samples_per_s; },
       [](Strategy& s, double v) { s.t_norm = v; });
  size_t best = 0;
  for (size_t i = 0; i < all->size(); ++i) {
    Strategy& s = (*all)[i];
    s.score = w[2] * s.t_norm - w[0] * s.p_norm - w[1] * s.s_norm;
    if (s.score > (*all)[best].score) best = i;
  }
  return best;
}

// Drops the page cache before a measurement where root may (docs/profiler.md); the text says
// what happened, for the output.
std::string DropPageCache(const std::string& mode) {
  if (mode == "no") return "kept (--drop-caches no)";
  if (geteuid() != 0) return "kept (not root: /proc/sys/vm/drop_caches needs root)";
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  f << "1\n";
  f.flush();
  if (!f) return "kept (writing /proc/sys/vm/drop_caches failed: a read-only /proc/sys?)";
  return "dropped before each online run";
}

bool WantCache(const ProfileArgs& a, bool cache) {
  const auto modes = SplitCommas(a.caches);
  return std::find(modes.begin(), modes.end(), cache ? "on" : "off") != modes.end();
}

struct Online {
  double later_per_s = 0, first_per_s = 0, cpu_per_sample = 0;
};

// `epochs` epochs (a fixed permutation per epoch) of the producer core's source over `file`,
// two producer batches in flight as a leader keeps them.
Result<Online> MeasureOnline(Options o, const std::string& file, int threads, bool cache,
                             int epochs) {
  o.dataset = file;
  o.threads = threads;
  if (!cache) o.cache = 0;
  else if (o.cache == 0) o.cache = int64_t(4) << 30;
  BC_ASSIGN_OR_RETURN(auto source, producer::MakePipelineSource(o));
  const int64_t n = source->num_samples();
  const int64_t batch = o.producer_batch > 0 ? int64_t(o.producer_batch)
                                             : std::max<int64_t>(8, std::min<int64_t>(64, n / 4));
  const size_t bytes = source->MaxLayout().bytes();
  struct Slot {
    std::vector<int64_t> samples, labels;
    std::vector<uint8_t> images;
  };
  Slot slots[2];
  for (Slot& s : slots) s.images.resize(bytes * size_t(batch)), s.labels.resize(size_t(batch));
  Online out;
  double later_s = 0, later_cpu = 0;
  for (int e = 0; e < epochs; ++e) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = ProfileCpuSeconds();
    int in_flight = 0, next = 0;
    pipeline::BatchResult r;
    for (int64_t first = 0; first < n; first += batch) {
      Slot& s = slots[next];
      next ^= 1;
      if (in_flight == 2) {
        BC_RETURN_IF_ERROR(source->Finish(&r));
        --in_flight;
      }
      s.samples.clear();
      for (int64_t i = first; i < std::min(n, first + batch); ++i)
        s.samples.push_back((i * 7919 + e * 31) % n);
      source->Start({uint64_t(e), s.samples, 0, s.images.data(), s.labels.data()});
      ++in_flight;
    }
    for (; in_flight > 0; --in_flight) BC_RETURN_IF_ERROR(source->Finish(&r));
    const double wall = ProfileSecondsSince(t0), cpu = ProfileCpuSeconds() - c0;
    if (e == 0) out.first_per_s = double(n) / wall;
    if (e > 0 || epochs == 1) later_s += wall, later_cpu += cpu;
  }
  const int64_t later_samples = n * std::max(1, epochs - 1);
  out.later_per_s = double(later_samples) / later_s;
  out.cpu_per_sample = later_cpu / double(later_samples);
  return out;
}

// The stored forms to try: encoded, decoded, and the resized form the pipeline's
// deterministic part allows (exact W x H for crop=none, else shorter side = image_size).
std::vector<std::string> DefaultForms(const Options& o) {
  std::vector<std::string> forms = {"encoded", "decoded"};
  if (o.image_size > 0)
    forms.push_back(o.crop == "none" ? fmt::format("resized:{}x{}", o.image_size, o.image_size)
                                     : fmt::format("resized:{}", o.image_size));
  return forms;
}

void Progress(const char* fmt_text, const std::string& what) {
  std::fprintf(stderr, fmt_text, what.c_str());
  std::fflush(stderr);
}

struct Source {
  bool folder = false;
  int64_t full_samples = 0, used_samples = 0;
  std::string encoded_path;  // the budget's encoded file (in tmp)
  double encoded_s = 0;
};

// The sample budget as an encoded (or raw) file in `dir`: from an ImageFolder (every k-th
// file) or an HDF5 file (the first N samples).
Result<Source> MaterialiseSource(const ProfileArgs& a, const std::string& dir) {
  Source src;
  std::error_code ec;
  if (!fs::exists(a.dataset, ec))
    return NotFoundError("profile: dataset {} does not exist (give an ImageFolder directory or a "
                         "Batchcast .h5 file)", a.dataset);
  src.folder = fs::is_directory(a.dataset, ec);
  src.encoded_path = dir + "/encoded.h5";
  Result<data::ConvertReport> r = InternalError("unset");
  if (src.folder) {
    BC_ASSIGN_OR_RETURN(auto listing, data::ListImageFolder(a.dataset));
    src.full_samples = int64_t(listing.files.size());
    data::ImageFolderConvertOptions o;
    o.root = a.dataset;
    o.out_path = src.encoded_path;
    o.limit = a.samples;
    o.skip_bad = true;
    o.allow_empty_classes = true;
    r = data::ConvertImageFolder(o, nullptr);
  } else {
    BC_ASSIGN_OR_RETURN(auto reader, data::DatasetReader::Open(a.dataset));
    src.full_samples = reader->info().num_samples;
    data::StoredConvertOptions o;
    o.source = a.dataset;
    o.out_path = src.encoded_path;
    o.limit = a.samples;
    o.skip_bad = true;
    r = data::ConvertStored(o, nullptr);
  }
  if (!r.ok())
    return r.status().WithContext(fmt::format("profile: materialising the sample budget in {}", dir));
  src.used_samples = r->samples;
  src.encoded_s = r->seconds;
  return src;
}

struct Measured {
  std::vector<Strategy> all;
  Source source;
  std::string page_cache;
};

// Every (form, compression) file once, then every (cache, threads) run on it.
Result<Measured> Measure(const ProfileArgs& a, const Options& o, const std::string& dir) {
  Measured m;
  Progress("profile: materialising the sample budget from %s\n", a.dataset);
  BC_ASSIGN_OR_RETURN(m.source, MaterialiseSource(a, dir));
  std::vector<std::string> forms = a.forms.empty() ? DefaultForms(o) : SplitCommas(a.forms);
  std::vector<int> threads;
  if (a.thread_counts.empty()) {
    for (int t = 1; t <= int(std::max(1u, std::thread::hardware_concurrency())); ++t)
      threads.push_back(t);
  } else {
    for (const std::string& t : SplitCommas(a.thread_counts)) threads.push_back(std::stoi(t));
  }
  for (const std::string& form_text : forms) {
    BC_ASSIGN_OR_RETURN(data::StoreForm form, data::ParseStoreForm(form_text));
    const std::vector<std::string> comps =
        form.stores_pixels() ? SplitCommas(a.compressions) : std::vector<std::string>{"none"};
    for (const std::string& comp : comps) {
      Strategy base;
      base.form = form_text;
      base.compression = comp;
      std::string file = m.source.encoded_path;
      data::ConvertReport report;
      if (form.kind == data::StoreForm::Kind::kEncoded) {
        base.offline_s = m.source.encoded_s;
        report.file_bytes = int64_t(fs::file_size(file));
        BC_ASSIGN_OR_RETURN(auto reader, data::DatasetReader::Open(file));
        report.samples = reader->info().num_samples;
        report.stored_bytes = report.file_bytes;
      } else {
        Progress("profile: materialising %s\n", form_text + " (" + comp + ")");
        data::StoredConvertOptions c;
        c.source = m.source.encoded_path;
        c.out_path = fmt::format("{}/{}-{}.h5", dir, form_text, comp);
        c.store.form = form;
        c.store.compression = comp;
        c.store.make_pixels = pipeline::MakeStoredPixels;
        BC_ASSIGN_OR_RETURN(report, data::ConvertStored(c, nullptr));
        // From the source: its reading pass (the encoded budget) plus the re-store.
        base.offline_s = m.source.encoded_s + report.seconds;
        file = c.out_path;
      }
      base.storage_bytes = report.file_bytes;
      base.mean_sample_bytes = double(report.stored_bytes) / double(std::max<int64_t>(report.samples, 1));
      base.chunk_bytes = report.chunk_bytes;
      for (bool cache : {false, true}) {
        if (!WantCache(a, cache)) continue;
        for (int t : threads) {
          Strategy s = base;
          s.cache = cache;
          s.threads = t;
          Progress("profile: measuring %s\n", fmt::format("{} ({}), cache {}, {} threads", form_text,
                                                          comp, cache ? "on" : "off", t));
          m.page_cache = DropPageCache(a.drop_caches);
          BC_ASSIGN_OR_RETURN(Online on, MeasureOnline(o, file, t, cache, a.epochs));
          s.samples_per_s = on.later_per_s;
          s.first_epoch_samples_per_s = on.first_per_s;
          s.cpu_s_per_sample = on.cpu_per_sample;
          m.all.push_back(s);
        }
      }
    }
  }
  return m;
}

Json ProfileToJson(const Measured& m, const ProfileArgs& a, const std::vector<double>& w, size_t best) {
  const double f = m.source.used_samples > 0
                       ? double(m.source.full_samples) / double(m.source.used_samples)
                       : 1.0;
  Json j;
  j["dataset"] = a.dataset;
  j["samples"] = m.source.used_samples;
  j["full_samples"] = m.source.full_samples;
  j["extrapolated"] = m.source.full_samples != m.source.used_samples;
  j["epochs"] = a.epochs;
  j["page_cache"] = m.page_cache;
  j["weights"] = w;
  Json list = Json::array();
  for (const Strategy& s : m.all)
    list.push_back({{"form", s.form}, {"compression", s.compression}, {"cache", s.cache},
                    {"threads", s.threads}, {"offline_s", s.offline_s},
                    {"storage_bytes", s.storage_bytes}, {"offline_s_full", s.offline_s * f},
                    {"storage_bytes_full", int64_t(double(s.storage_bytes) * f)},
                    {"mean_sample_bytes", s.mean_sample_bytes}, {"chunk_bytes", s.chunk_bytes},
                    {"samples_per_s", s.samples_per_s},
                    {"first_epoch_samples_per_s", s.first_epoch_samples_per_s},
                    {"cpu_s_per_sample", s.cpu_s_per_sample}, {"p_norm", s.p_norm},
                    {"s_norm", s.s_norm}, {"t_norm", s.t_norm}, {"score", s.score}});
  j["strategies"] = list;
  j["recommended"] = best;
  return j;
}

Result<Measured> FromJson(const std::string& path, ProfileArgs* a) {
  std::ifstream in(path);
  if (!in) return NotFoundError("profile: --from-json {} cannot be read", path);
  Json j;
  try {
    j = Json::parse(in);
    Measured m;
    a->dataset = j.at("dataset").get<std::string>();
    a->epochs = j.at("epochs").get<int>();
    m.source.used_samples = j.at("samples").get<int64_t>();
    m.source.full_samples = j.at("full_samples").get<int64_t>();
    m.page_cache = j.at("page_cache").get<std::string>();
    for (const Json& e : j.at("strategies")) {
      Strategy s;
      s.form = e.at("form");
      s.compression = e.at("compression");
      s.cache = e.at("cache");
      s.threads = e.at("threads");
      s.offline_s = e.at("offline_s");
      s.storage_bytes = e.at("storage_bytes");
      s.mean_sample_bytes = e.at("mean_sample_bytes");
      s.chunk_bytes = e.at("chunk_bytes");
      s.samples_per_s = e.at("samples_per_s");
      s.first_epoch_samples_per_s = e.at("first_epoch_samples_per_s");
      s.cpu_s_per_sample = e.at("cpu_s_per_sample");
      m.all.push_back(s);
    }
    if (m.all.empty()) return InvalidArgumentError("profile: {} lists no strategies", path);
    return m;
  } catch (const std::exception& e) {
    return InvalidArgumentError("profile: --from-json {} is not a `batchcast profile --json` "
                                "file: {}", path, e.what());
  }
}

// A cache budget for strategy `s` on the full dataset: its stored pixels (or, for encoded
// bytes, the decoded form's) extrapolated, plus 10%; "" when nothing measured says.
std::string CacheBudget(const Strategy& s, const Measured& m) {
  double per_sample = s.form == "encoded" ? 0 : s.mean_sample_bytes;
  for (const Strategy& d : m.all)
    if (per_sample == 0 && d.form == "decoded") per_sample = d.mean_sample_bytes;
  if (per_sample == 0) return "";
  const double bytes = per_sample * double(m.source.full_samples) * 1.1;
  return fmt::format("{}m", int64_t(bytes / 1048576.0) + 1);
}

// The command lines that apply strategy `s`: the conversion and the leader's options.
std::string ApplyCommand(const Strategy& s, const ProfileArgs& a, const Measured& m) {
  const Source& src = m.source;
  std::string convert = src.folder || fs::is_directory(a.dataset)
                            ? fmt::format("batchcast convert imagefolder {}", a.dataset)
                            : fmt::format("batchcast convert h5 {}", a.dataset);
  convert += fmt::format(" --out OUT.h5 --store {}", s.form);
  if (s.compression != "none") convert += " --compression " + s.compression;
  std::string leader = "--dataset OUT.h5";
  for (const std::string& f : a.flags)
    if (f.rfind("--threads=", 0) != 0 && f.rfind("--cache=", 0) != 0 &&
        f.rfind("--dataset=", 0) != 0)
      leader += " " + f;
  leader += fmt::format(" --threads={}", s.threads);
  if (s.cache) {
    const std::string budget = CacheBudget(s, m);
    leader += budget.empty() ? " --cache=<the decoded dataset's bytes, e.g. 8g>"
                             : " --cache=" + budget;
  }
  return convert + "\n    leader options: " + leader;
}

void PrintProfileTable(const Measured& m, size_t best) {
  std::printf("%-16s %-7s %-5s %3s %10s %11s %9s %10s %10s %12s %7s\n", "form", "compr",
              "cache", "thr", "offline_s", "storage_MB", "KB/sample", "samples/s", "1st_ep/s",
              "cpu_ms/sample", "score");
  for (size_t i = 0; i < m.all.size(); ++i) {
    const Strategy& s = m.all[i];
    std::printf("%-16s %-7s %-5s %3d %10.3f %11.3f %9.1f %10.1f %10.1f %12.3f %7.3f%s\n",
                s.form.c_str(), s.compression.c_str(), s.cache ? "on" : "off", s.threads,
                s.offline_s, s.storage_bytes / 1e6, s.mean_sample_bytes / 1e3, s.samples_per_s,
                s.first_epoch_samples_per_s, s.cpu_s_per_sample * 1e3, s.score,
                i == best ? "  <- recommended" : "");
  }
}

void WriteCsv(const std::string& path, const Measured& m) {
  std::ofstream f(path);
  f << "form,compression,cache,threads,offline_s,storage_bytes,mean_sample_bytes,chunk_bytes,"
       "samples_per_s,first_epoch_samples_per_s,cpu_s_per_sample,p_norm,s_norm,t_norm,score\n";
  for (const Strategy& s : m.all)
    f << fmt::format("{},{},{},{},{:.6f},{},{:.1f},{},{:.3f},{:.3f},{:.9f},{:.6f},{:.6f},{:.6f},"
                     "{:.6f}\n", s.form, s.compression, s.cache ? "on" : "off", s.threads,
                     s.offline_s, s.storage_bytes, s.mean_sample_bytes, s.chunk_bytes,
                     s.samples_per_s, s.first_epoch_samples_per_s, s.cpu_s_per_sample, s.p_norm,
                     s.s_norm, s.t_norm, s.score);
}

// The options the profiler gives the leader's pipeline source. A leader's other options
// configure what the profiler does not run (the ring, placement, telemetry, stages, progressive
// resizing) or are the profiler's own axes (threads, epochs, limit_samples): set on the
// command line they are refused, not ignored.
constexpr std::string_view kProfileReads[] = {
    "dataset", "seed", "shuffle", "image_size", "crop", "crop_scale_min", "crop_scale_max",
    "flip", "normalize", "mean", "std", "channels", "max_pixels", "dct_scaling", "crop_decode",
    "on_bad_sample", "verify", "layout", "dtype", "cache", "producer_batch"};

Status CheckProfileOptions(const Options& o) {
  for (const auto& [key, source] : o.sources) {
    if (source != "flag" ||
        std::find(std::begin(kProfileReads), std::end(kProfileReads), key) != std::end(kProfileReads))
      continue;
    const std::string instead = key == "threads"         ? "; give --thread-counts 1,2,... instead"
                                : key == "epochs"        ? "; give --profile-epochs N instead"
                                : key == "limit_samples" ? "; give --samples N instead"
                                                         : "";
    return InvalidArgumentError("profile: option '{}' is not one the profiler measures with: it "
                                "reads the pipeline's options ({}){}", key,
                                fmt::join(kProfileReads, ", "), instead);
  }
  return Status::Ok();
}

Status CheckArgs(const ProfileArgs& a) {
  if (a.samples < 1)
    return InvalidArgumentError("profile: --samples {} is not a budget: give at least 1 sample "
                                "(the default 256 takes about a minute)", a.samples);
  if (a.epochs < 1) return InvalidArgumentError("profile: --epochs {} must be >= 1", a.epochs);
  for (const std::string& c : SplitCommas(a.caches))
    if (c != "on" && c != "off")
      return InvalidArgumentError("profile: --caches '{}': '{}' is not on or off", a.caches, c);
  if (a.drop_caches != "auto" && a.drop_caches != "yes" && a.drop_caches != "no")
    return InvalidArgumentError("profile: --drop-caches {} is not auto, yes or no", a.drop_caches);
  for (const std::string& t : SplitCommas(a.thread_counts.empty() ? "1" : a.thread_counts))
    if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos || std::stoi(t) < 1)
      return InvalidArgumentError("profile: --thread-counts '{}': '{}' is not a thread count >= 1",
                                  a.thread_counts, t);
  return Status::Ok();
}

int Profile(ProfileArgs a) {
  auto fail = [](const Status& s) {  // the profiler's own messages start with "profile: "
    const bool own = s.message().rfind("profile: ", 0) == 0;
    std::fprintf(stderr, "batchcast %s%s\n", own ? "" : "profile: ", s.message().c_str());
    return 1;
  };
  auto weights = ParseWeights(a.weights);
  if (!weights.ok()) return fail(weights.status());
  if (Status s = CheckArgs(a); !s.ok()) return fail(s);
  auto opts = ResolveOptions(a.flags);
  if (!opts.ok()) return fail(opts.status());
  if (Status s = CheckProfileOptions(*opts); !s.ok()) return fail(s);
  if (a.dataset.empty()) a.dataset = opts->dataset;  // --dataset, as for a leader
  Result<Measured> m = InternalError("unset");
  std::string dir;
  if (!a.from_json.empty()) {
    m = FromJson(a.from_json, &a);
  } else {
    dir = fs::path(a.tmp) / fmt::format("batchcast-profile-{}", getpid());
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
      return fail(ErrnoError(ec.value(), "profile: cannot create the temp directory {} (--tmp "
                                         "DIR: a writable directory with room for the stored "
                                         "forms)", dir));
    m = Measure(a, *opts, dir);
    if (!a.keep) fs::remove_all(dir, ec);
  }
  if (!m.ok()) return fail(m.status());
  std::erase_if(m->all, [&](const Strategy& s) { return !WantCache(a, s.cache); });
  if (m->all.empty()) return fail(InvalidArgumentError("profile: no strategy with --caches {}", a.caches));
  const size_t best = ScoreStrategies(*weights, &m->all);
  PrintProfileTable(*m, best);
  const Source& src = m->source;
  const bool extrapolated = src.full_samples != src.used_samples;
  std::printf("\n%lld of %lld samples measured, %d epochs; page cache: %s\n",
              static_cast<long long>(src.used_samples), static_cast<long long>(src.full_samples),
              a.epochs, m->page_cache.c_str());
  if (extrapolated)
    std::printf("offline time and storage above are for the %lld-sample budget; for the full "
                "dataset multiply by %.2f (extrapolated, in the JSON as *_full)\n",
                static_cast<long long>(src.used_samples),
                double(src.full_samples) / double(std::max<int64_t>(src.used_samples, 1)));
  const Strategy& b = m->all[best];
  std::printf("recommended under weights p=%g s=%g t=%g (min-max normalised over %zu strategies; "
              "p and s count against): %s, compression %s, cache %s, %d threads (score %.3f)\n"
              "  apply it:\n    %s\n", (*weights)[0], (*weights)[1], (*weights)[2], m->all.size(),
              b.form.c_str(), b.compression.c_str(), b.cache ? "on" : "off", b.threads, b.score,
              ApplyCommand(b, a, *m).c_str());
  if (!a.csv.empty()) WriteCsv(a.csv, *m);
  if (!a.json.empty()) {
    Json j = ProfileToJson(*m, a, *weights, best);
    j["command"] = ApplyCommand(b, a, *m);
    std::ofstream(a.json) << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

void RegisterProfile(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "profile", "measure storage strategies (stored form x compression x cache x threads) on a "
                 "sample of a dataset and recommend one (docs/profiler.md)");
  auto a = std::make_shared<ProfileArgs>();
  cmd->add_option("source", a->dataset, "an ImageFolder directory or a Batchcast .h5 file");
  cmd->add_option("--samples", a->samples, "sample budget: samples materialised and measured")
      ->capture_default_str();
  cmd->add_option("--weights", a->weights,
                  "p,s,t: weights of offline time, storage (both against) and online "
                  "throughput, each min-max normalised over the strategies")
      ->capture_default_str();
  cmd->add_option("--forms", a->forms,
                  "stored forms to try, comma separated (default: encoded, decoded and the "
                  "resized form the pipeline allows)");
  cmd->add_option("--compressions", a->compressions, "compressions to try for pixel forms")
      ->capture_default_str();
  cmd->add_option("--thread-counts", a->thread_counts,
                  "decode thread counts to try (default 1..cores)");
  cmd->add_option("--profile-epochs", a->epochs,
                  "epochs per online run; samples/s and CPU are of the epochs after the first")
      ->capture_default_str();
  cmd->add_option("--drop-caches", a->drop_caches,
                  "drop the page cache before each online run: auto (when root), yes, no")
      ->capture_default_str();
  cmd->add_option("--caches", a->caches,
                  "decoded-sample cache settings to try (off, on or both; with --from-json: "
                  "which measured strategies to score)")
      ->capture_default_str();
  cmd->add_option("--tmp", a->tmp, "where the stored forms are materialised")->capture_default_str();
  cmd->add_flag("--keep", a->keep, "keep the materialised files");
  cmd->add_option("--csv", a->csv, "write the table as CSV");
  cmd->add_option("--json", a->json, "write the table, weights and recommendation as JSON");
  cmd->add_option("--from-json", a->from_json,
                  "re-score a measured run (its --json file) under --weights, measuring nothing");
  AddRegistryOptions(cmd, &a->flags);
  cmd->callback([=] {
    if (a->dataset.empty() && a->from_json.empty() &&
        std::none_of(a->flags.begin(), a->flags.end(),
                     [](const std::string& f) { return f.rfind("--dataset=", 0) == 0; })) {
      std::fprintf(stderr, "batchcast profile: give a dataset (an ImageFolder directory or a "
                   "Batchcast .h5 file), or --from-json FILE\n");
      *exit_code = 2;
      return;
    }
    *exit_code = Profile(*a);
  });
}

}  // namespace batchcast::cli
