// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The options registry: every knob is declared exactly once in kRegistry below.
#include "batchcast/options.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>

#include "core/environment.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/option_scope.h"
#include "core/suggest.h"
#include "core/units.h"

namespace batchcast {
namespace {

enum class Kind { kInt, kInt64, kUint64, kDouble, kBool, kString, kEnum, kSize, kDuration };

// The front doors that read an option (option_scope.h): one bit per FrontDoor. Every entry
// states them, so an option cannot be added without deciding which front doors read it.
constexpr uint32_t Bit(FrontDoor d) { return 1u << static_cast<uint32_t>(d); }
constexpr uint32_t M = Bit(FrontDoor::kMpiRuntime), N = Bit(FrontDoor::kMultinode),
                   S = Bit(FrontDoor::kServe), L = Bit(FrontDoor::kPythonLeader),
                   P = Bit(FrontDoor::kPythonProducer), R = Bit(FrontDoor::kLauncher),
                   C = Bit(FrontDoor::kCApiLeader), K = Bit(FrontDoor::kConsumer);
constexpr uint32_t kNative = M | N | S | L | R | C;  // leaders that run the native pipeline
constexpr uint32_t kLeaders = kNative | P;           // every producer
constexpr uint32_t kTrainers = K | M | N | R;        // consumers, and doors that configure theirs
constexpr uint32_t kEvery = kLeaders | K;

struct Entry {
  const char* key;
  Kind kind;
  uint32_t doors;  // FrontDoor bits: the front doors that read it
  const char* help;
  const char* choices;  // for kEnum: "a|b|c"
  std::function<void*(Options&)> field;
};

template <typename T>
std::function<void*(Options&)> Field(T Options::*member) {
  return [member](Options& o) -> void* { return &(o.*member); };
}

#define BC_OPT(name, kind, doors, help) \
  Entry{#name, Kind::kind, doors, help, nullptr, Field(&Options::name)}
#define BC_ENUM(name, doors, choices, help) \
  Entry{#name, Kind::kEnum, doors, help, choices, Field(&Options::name)}

const std::vector<Entry>& Registry() {
  static const std::vector<Entry> kRegistry = {
      BC_OPT(dataset, kString, kNative, "HDF5 dataset file in the Batchcast layout"),
      BC_OPT(seed, kUint64, kNative | K, "seed of the stream: batches are a pure function of (seed, epoch, position)"),
      BC_OPT(epochs, kInt, kEvery, "epochs the leader produces"),
      BC_OPT(limit_samples, kInt64, kNative, "use only the first N samples of the dataset (0 = all)"),
      BC_OPT(shuffle, kBool, kNative, "permute the samples every epoch"),
      BC_OPT(threads, kInt, kNative, "decode worker threads on the leader (0 = available cores)"),
      BC_OPT(image_size, kInt, kNative, "output height = width in pixels (0 = stored size)"),
      BC_ENUM(crop, kNative, "none|center|random", "crop before resizing: none, center, or random (RandomResizedCrop)"),
      BC_OPT(crop_scale_min, kDouble, kNative, "RandomResizedCrop: smallest fraction of the image area"),
      BC_OPT(crop_scale_max, kDouble, kNative, "RandomResizedCrop: largest fraction of the image area"),
      BC_OPT(flip, kBool, kNative, "random horizontal flip with probability 0.5"),
      BC_OPT(normalize, kBool, kNative, "normalise (x/255 - mean)/std; implies dtype=float32"),
      BC_OPT(mean, kString, kNative, "per-channel mean for normalize, comma separated"),
      BC_OPT(std, kString, kNative, "per-channel standard deviation for normalize, comma separated"),
      BC_ENUM(dtype, kNative, "uint8|float32", "element type of the image tensor"),
      BC_ENUM(layout, kNative, "chw|hwc", "memory layout of each image"),
      BC_OPT(channels, kInt, kNative, "output channels: 0 = as stored, 1 = gray, 3 = RGB"),
      BC_OPT(max_pixels, kSize, kNative, "refuse images with more pixels than this (decompression bombs); accepts k/m/g suffixes"),
      BC_OPT(dct_scaling, kBool, kNative, "decode JPEGs at 1/2, 1/4 or 1/8 size (DCT-domain scaling) when the output needs no more pixels"),
      BC_OPT(crop_decode, kBool, kNative, "with crop=center|random, decode only the JPEG rows and columns the crop keeps (same pixels as a full decode)"),
      BC_ENUM(on_bad_sample, kNative, "error|skip", "what a corrupt or oversized sample does: stop with an error, or skip it (counted and reported)"),
      BC_ENUM(verify, kNative, "off|sample|full", "per-sample checksums of the dataset file: off; sample = check each sample when it is read (xxh3, under 1% of decode time); full = also read and check every sample once when the leader starts. A sample that fails is a bad sample (on_bad_sample); files without checksums are read unchecked, which the leader logs once"),
      BC_OPT(batch_size, kInt, kEvery, "samples per batch for this consumer"),
      BC_OPT(buffer_depth, kInt, kEvery, "batches a consumer may hold unreleased"),
      BC_OPT(producer_batch, kInt, kNative, "samples per producer batch (0 = 2 x the largest consumer batch)"),
      BC_OPT(ring_slots, kInt, kLeaders, "producer batches in the shared-memory ring (0 = buffer_depth + 2)"),
      BC_OPT(carve_offset, kBool, kTrainers, "seeded per-consumer offset when carving producer batches"),
      BC_OPT(carve_shuffle, kBool, kTrainers, "seeded per-consumer order of the carved batches"),
      BC_OPT(leader_trains, kBool, M | N | R, "the leader rank also trains instead of being an extra rank"),
      BC_OPT(ranks_per_node, kInt, M | N, "form virtual nodes of this many consecutive ranks (0 = real nodes)"),
      BC_ENUM(mode, K | M | N | R, "replicate|shard", "across nodes: replicate (every trainer sees the whole stream; node leaders split the decode and exchange it over MPI) or shard (data-parallel: each trainer gets a disjoint part of every global batch)"),
      BC_OPT(job_id, kString, M | N | R, "job identity used in segment and socket names (default: Slurm/Open MPI job id or leader pid)"),
      BC_OPT(heartbeat_ms, kDuration, kEvery, "a consumer that shows no sign of life for this long is detached; accepts ms/s/m suffixes"),
      BC_OPT(allowed_leader_uid, kInt, kTrainers, "consumers attach only to a leader of their own uid, or of this one (-1 = own uid only): an abstract socket can be taken by any local user"),
      BC_ENUM(gpu, kNative, "auto|off|on", "GPU data plane (docs/gpu.md): auto = trainers that see a CUDA device get device batches (one H2D copy per GPU, CUDA IPC, NCCL to other GPUs), else the host path with one log line; on = the same but no device is an error; off = host path only"),
      BC_OPT(trainers_per_gpu, kInt, M | N | R, "trainers sharing one GPU: trainer with local index r uses GPU r / k (0 = spread the node's trainers evenly over the visible GPUs)"),
      BC_OPT(gpu_finish, kBool, kNative, "with the GPU data plane: turn uint8 images into normalised float32 CHW (mean/std options) once per GPU by a CUDA kernel instead of per trainer"),
      BC_OPT(resize, kString, M | N | S | L | R | C, "progressive-resizing schedule, e.g. resize(min=96,max=224,step=32,upgrade=0.25,mode=mixed); empty = off (docs/progressive-resizing.md)"),
      BC_OPT(stage, kString, kNative, "model stages the leader runs on each producer batch after the pipeline, e.g. model(path=encoder.pt,input=images,output=embedding); ';' chains several (docs/model-stage.md; needs a build with LibTorch)"),
      BC_OPT(telemetry, kString, kEvery, "telemetry sinks: dir:RUN = a run directory, one file per process named <kind>-<host>-<pid>.h5 (docs/telemetry.md); or telemetry(hdf5=run.h5,csv=run.csv,json=run.json,trace=run.trace.json,interval=1s); on = summary only; empty or off = disabled. Every path is checked when the run starts"),
      BC_OPT(experiment, kString, kEvery, "telemetry tag: experiment name (e.g. the sweep)"),
      BC_OPT(workload, kString, kEvery, "telemetry tag: workload name (a set of collocated runs)"),
      BC_OPT(run_name, kString, kEvery, "telemetry tag: name of this run / trial"),
      BC_OPT(drop_last, kBool, kTrainers, "this consumer drops the epoch's partial last batch (N mod batch_size samples), like DataLoader(drop_last=True); default: an exact partial last batch"),
      BC_OPT(connect_timeout, kDuration, kTrainers, "a consumer (C++, Python, a trainer under batchcast-run) waits this long for its leader or service to listen before it fails, naming the address; 0 = try once; accepts ms/s/m suffixes"),
      BC_OPT(rank, kInt, K, "mode=shard: this consumer's data-parallel rank (-1 = RANK from the environment); the MPI Runtime derives it and refuses it"),
      BC_OPT(world_size, kInt, K, "mode=shard: the number of data-parallel ranks sharing the stream (0 = WORLD_SIZE from the environment); the MPI Runtime derives it and refuses it"),
      BC_OPT(start_epoch, kInt, kEvery, "resume: the epoch to start at (Consumer::Position().epoch of the interrupted run); the leader produces epochs start_epoch..epochs-1 and a consumer runs them"),
      BC_OPT(start_batch, kInt64, kEvery, "resume: the batch within start_epoch to start at, in the consumer's batch_size (Consumer::Position().batch); the leader starts at the producer batch holding it"),
      BC_OPT(start_run_epoch, kInt, kTrainers, "resume: the consumer's own epoch at the saved position (Consumer::Position().run_epoch, Python state_dict()['start_run_epoch']), counted over its run; it runs epochs - start_run_epoch more epochs. Below start_epoch only after a service's resume replay (or a late join that started it at the stream's next epoch) moved the consumer onto later stream epochs; -1 = start_epoch"),
      BC_OPT(pad_last, kBool, kTrainers, "this consumer pads the epoch's partial last batch to batch_size with repeats of its own samples (reported in BatchInfo::repeats)"),
      BC_OPT(late_join_window, kDouble, M | S | L | P | R | C, "late join: a consumer joining within this fraction of an epoch (at least the ring depth in producer batches, never 0) gets the epoch's start replayed to it alone, byte for byte, while the others wait; later joiners are caught up with an epoch of their own (late_join_catch_ups), or start at the next epoch (or at once, mid-epoch, with join_mid_epoch). A native leader decodes the replay again; a batchcast.Producer keeps copies of the epoch's first batches for it"),
      BC_OPT(join_mid_epoch, kBool, M | S | L | P | R | C, "late join: a consumer joining after the late-join window starts at once, mid-epoch (its first epoch is the rest of the current one), instead of being caught up (late_join_catch_ups) or waiting for the next epoch"),
      BC_OPT(late_join_catch_ups, kInt, M | S | L | R | C, "late join: at most this many consumers joining after the late-join window are caught up at once: each starts at once with a whole epoch of its own (the stream's current epoch, decoded again and published to it alone between the stream's batches, which slows the others while it lasts), then goes on with the stream's next epoch; a joiner beyond them waits for the next epoch (batchcast status: deferred). 0 = joiners after the window wait for the next epoch; join_mid_epoch takes precedence. Leaders that cannot make a batch again (batchcast.Producer, multi-node) do not read it"),
      BC_OPT(view, kString, K, "this consumer's own view of the leader's samples, a spec over the leader's view: view(size=160,crop=random,scale=0.08:1,flip=1,normalize=1,mean=...,std=...,dtype=float32,layout=chw,draw=auto); keys not given keep the leader's values; empty = the leader's view; resize=96@0:160@2:224@4 in place of size gives the view its own size per epoch (docs/progressive-resizing.md, A schedule per view). Consumers with equal views form a group; the leader decodes each sample once for all groups (docs/pipeline.md, Views) and needs views_max > 1"),
      BC_OPT(views_max, kInt, S | L | R | C, "view groups the leader serves, its own view included (1 = its own only; at most 16): a consumer whose view would be one more is refused"),
      BC_OPT(view_bytes, kSize, S | L | R | C, "image room per ring slot for the view groups beyond the leader's own (0 = room for views_max - 1 groups of the leader's image size); a view that does not fit is refused; accepts k/m/g suffixes"),
      BC_OPT(cache, kSize, kNative, "decoded-sample cache of the leader, e.g. 8g (0 = off): the first epoch keeps each sample as decoded before any random step (crop, flip), later epochs reuse it; admits samples until the budget is full, never evicts (docs/pipeline.md); accepts k/m/g suffixes"),
  };
  return kRegistry;
}

std::string NormalizeKey(std::string key) {
  std::replace(key.begin(), key.end(), '-', '_');
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return key;
}

// The environment variable of registry key `key`: BATCHCAST_ and the key in upper case.
std::string EnvName(std::string_view key) {
  std::string name = "BATCHCAST_";
  for (char c : key) name += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

const Entry* Find(const std::string& key) {
  for (const auto& e : Registry())
    if (key == e.key) return &e;
  return nullptr;
}

std::vector<std::string> RegistryKeys() {
  std::vector<std::string> keys;
  for (const auto& e : Registry()) keys.push_back(e.key);
  return keys;
}

Status UnknownKey(const std::string& key, const std::string& where) {
  std::string best = ClosestMatch(key, RegistryKeys());
  std::string hint = best.empty() ? " (batchcast info --config lists every option)"
                                  : fmt::format(" (did you mean '{}'?)", best);
  return InvalidArgumentError("unknown option '{}' in {}{}", key, where, hint);
}

// A word left for the caller (`rest`) that is probably a mistyped Batchcast option: the
// error names the option it looks like; the caller's own flags go after "--".
Status CheckLeftoverFlag(const std::string& word, const std::string& key) {
  for (const auto& e : Registry()) {
    if (LooksLikeTypo(key, e.key)) {
      std::string flag = e.key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      return InvalidArgumentError(
          "unknown option '{}' on the command line (did you mean '--{}'?); a flag of your own "
          "program that looks like a Batchcast option goes after '--'",
          word, flag);
    }
  }
  return Status::Ok();
}

template <typename T>
Status ParseNumber(const std::string& text, T* out) {
  const char* b = text.data();
  const char* e = b + text.size();
  auto [p, ec] = std::from_chars(b, e, *out);
  if (ec != std::errc() || p != e) return InvalidArgumentError("'{}' is not a number", text);
  return Status::Ok();
}

Status ParseDouble(const std::string& text, double* out) {
  char* end = nullptr;
  errno = 0;
  *out = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0)
    return InvalidArgumentError("'{}' is not a number", text);
  return Status::Ok();
}

Status ParseBool(const std::string& text, bool* out) {
  std::string t = NormalizeKey(text);
  if (t == "1" || t == "true" || t == "yes" || t == "on") *out = true;
  else if (t == "0" || t == "false" || t == "no" || t == "off") *out = false;
  else return InvalidArgumentError("'{}' is not a boolean (use true/false, 1/0, yes/no, on/off)", text);
  return Status::Ok();
}

Status Assign(const Entry& e, Options* o, const std::string& value) {
  void* f = e.field(*o);
  Status s;
  switch (e.kind) {
    case Kind::kInt: s = ParseNumber(value, static_cast<int*>(f)); break;
    case Kind::kInt64: s = ParseNumber(value, static_cast<int64_t*>(f)); break;
    case Kind::kUint64: s = ParseNumber(value, static_cast<uint64_t*>(f)); break;
    case Kind::kDouble: s = ParseDouble(value, static_cast<double*>(f)); break;
    case Kind::kBool: s = ParseBool(value, static_cast<bool*>(f)); break;
    case Kind::kString: *static_cast<std::string*>(f) = value; break;
    case Kind::kSize: s = ParseSize(value, static_cast<int64_t*>(f)); break;
    case Kind::kDuration: s = ParseDuration(value, static_cast<int64_t*>(f)); break;
    case Kind::kEnum: {
      std::string choices = e.choices;
      std::string v = NormalizeKey(value);
      bool found = false;
      size_t start = 0;
      while (start <= choices.size()) {
        size_t end = choices.find('|', start);
        if (end == std::string::npos) end = choices.size();
        if (choices.compare(start, end - start, v) == 0) found = true;
        start = end + 1;
      }
      if (!found) s = InvalidArgumentError("'{}' is not one of {}", value, choices);
      else *static_cast<std::string*>(f) = v;
      break;
    }
  }
  if (!s.ok()) return s.WithContext(fmt::format("option '{}'", e.key));
  return Status::Ok();
}

std::string Render(const Entry& e, Options& o) {
  void* f = e.field(o);
  switch (e.kind) {
    case Kind::kInt: return std::to_string(*static_cast<int*>(f));
    case Kind::kInt64:
    case Kind::kSize: return std::to_string(*static_cast<int64_t*>(f));
    case Kind::kDuration: return std::to_string(*static_cast<int64_t*>(f)) + "ms";
    case Kind::kUint64: return std::to_string(*static_cast<uint64_t*>(f));
    case Kind::kDouble: return fmt::format("{}", *static_cast<double*>(f));
    case Kind::kBool: return *static_cast<bool*>(f) ? "true" : "false";
    case Kind::kString:
    case Kind::kEnum: return *static_cast<std::string*>(f);
  }
  return "";
}

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kInt: return "int";
    case Kind::kInt64: return "int64";
    case Kind::kUint64: return "uint64";
    case Kind::kDouble: return "double";
    case Kind::kBool: return "bool";
    case Kind::kString: return "string";
    case Kind::kEnum: return "enum";
    case Kind::kSize: return "size";
    case Kind::kDuration: return "duration";
  }
  return "?";
}

void Record(Options* o, const std::string& key, const char* source) {
  for (auto& kv : o->sources)
    if (kv.first == key) {
      kv.second = source;
      return;
    }
  o->sources.emplace_back(key, source);
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

Status ApplyConfigFile(const std::string& path, Options* o) {
  std::ifstream in(path);
  if (!in) return ErrnoError(errno, "config file '{}' cannot be opened", path);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    line = Trim(line);
    if (line.empty() || line[0] == '[') continue;  // blank, comment, or TOML table header
    size_t eq = line.find('=');
    if (eq == std::string::npos)
      return InvalidArgumentError("{}:{}: expected 'key = value', got '{}'", path, lineno, line);
    std::string key = NormalizeKey(Trim(line.substr(0, eq)));
    std::string value = Trim(line.substr(eq + 1));
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front())
      value = value.substr(1, value.size() - 2);
    const Entry* e = Find(key);
    if (e == nullptr) return UnknownKey(key, fmt::format("{}:{}", path, lineno));
    BC_RETURN_IF_ERROR(Assign(*e, o, value).WithContext(fmt::format("{}:{}", path, lineno)));
    Record(o, key, "file");
  }
  return Status::Ok();
}

void ApplyEnvironment(Options* o, Status* error) {
  for (const auto& [name, value] : env::Snapshot()) {
    if (name.rfind("BATCHCAST_", 0) != 0) continue;
    if (env::IsOwnVariable(name)) continue;  // Batchcast's own, not an option (environment.cc)
    std::string key = NormalizeKey(name.substr(10));
    const Entry* e = Find(key);
    if (e == nullptr) {
      BC_LOG(Warn, Init, "ignoring unknown environment variable {} (not a Batchcast option)",
             name);
      continue;
    }
    Status s = Assign(*e, o, value);
    if (!s.ok()) {
      *error = s.WithContext("environment variable " + name);
      return;
    }
    Record(o, key, "env");
  }
}

}  // namespace

Status SetOption(Options* options, const std::string& key, const std::string& value) {
  std::string k = NormalizeKey(key);
  const Entry* e = Find(k);
  if (e == nullptr) return UnknownKey(k, "code");
  BC_RETURN_IF_ERROR(Assign(*e, options, value));
  Record(options, k, "code");
  return Status::Ok();
}

std::string GetOption(const Options& options, const std::string& key) {
  const Entry* e = Find(NormalizeKey(key));
  if (e == nullptr) return "";
  return Render(*e, const_cast<Options&>(options));
}

Result<Options> ResolveOptions(const std::vector<std::string>& flags,
                               std::vector<std::string>* rest) {
  Options o;
  // Split flags into (key, value) pairs first, so --config is known before anything else.
  std::vector<std::pair<std::string, std::string>> pairs;
  std::string config_path;
  if (std::optional<std::string> c = env::Get(env::Var::kConfig)) config_path = *c;
  for (size_t i = 0; i < flags.size(); ++i) {
    const std::string& w = flags[i];
    if (w == "--" && rest != nullptr) {  // the caller's own words, not looked at
      rest->insert(rest->end(), flags.begin() + static_cast<std::ptrdiff_t>(i), flags.end());
      break;
    }
    if (w.rfind("--", 0) != 0 || w.size() == 2) {
      if (rest == nullptr) return InvalidArgumentError("unexpected argument '{}'", w);
      rest->push_back(w);
      continue;
    }
    std::string body = w.substr(2);
    std::string key, value;
    size_t eq = body.find('=');
    bool has_value = eq != std::string::npos;
    key = NormalizeKey(has_value ? body.substr(0, eq) : body);
    const Entry* e = Find(key);
    if (key != "config" && e == nullptr) {
      if (rest != nullptr) {
        BC_RETURN_IF_ERROR(CheckLeftoverFlag(w, key));
        rest->push_back(w);
        continue;
      }
      return UnknownKey(key, "command line");
    }
    if (has_value) {
      value = body.substr(eq + 1);
    } else if (e != nullptr && e->kind == Kind::kBool &&
               (i + 1 >= flags.size() || flags[i + 1].rfind("--", 0) == 0)) {
      value = "true";  // bare boolean flag
    } else {
      if (i + 1 >= flags.size()) return InvalidArgumentError("option '--{}' needs a value", key);
      value = flags[++i];
    }
    if (key == "config") config_path = value;
    else pairs.emplace_back(key, value);
  }
  if (!config_path.empty()) BC_RETURN_IF_ERROR(ApplyConfigFile(config_path, &o));
  Status env_error;
  ApplyEnvironment(&o, &env_error);
  BC_RETURN_IF_ERROR(env_error);
  for (const auto& [key, value] : pairs) {
    BC_RETURN_IF_ERROR(Assign(*Find(key), &o, value).WithContext("command line"));
    Record(&o, key, "flag");
  }
  BC_RETURN_IF_ERROR(ValidateOptions(o));
  for (const auto& [key, source] : o.sources)
    BC_LOG(Info, Init, "option {} = {} (from {})", key, GetOption(o, key), source);
  return o;
}

Status ValidateOptions(const Options& o) {
  auto positive = [](const char* key, int64_t v) -> Status {
    if (v <= 0) return InvalidArgumentError("option '{}' must be positive, got {}", key, v);
    return Status::Ok();
  };
  BC_RETURN_IF_ERROR(positive("epochs", o.epochs));
  BC_RETURN_IF_ERROR(positive("batch_size", o.batch_size));
  BC_RETURN_IF_ERROR(positive("buffer_depth", o.buffer_depth));
  BC_RETURN_IF_ERROR(positive("max_pixels", o.max_pixels));
  if (o.threads < 0) return InvalidArgumentError("option 'threads' must be >= 0, got {}", o.threads);
  if (o.views_max < 1 || o.views_max > 16)
    return InvalidArgumentError("option 'views_max' must be in [1, 16] (view groups of one "
                                "leader, its own included), got {}", o.views_max);
  if (o.view_bytes < 0)
    return InvalidArgumentError("option 'view_bytes' must be a size >= 0 (0 = room for "
                                "views_max - 1 groups of the leader's size), got {}",
                                o.view_bytes);
  if (o.cache < 0)
    return InvalidArgumentError("option 'cache' must be a size >= 0 (0 = off), got {}", o.cache);
  if (o.image_size < 0 || o.image_size > 16384)
    return InvalidArgumentError("option 'image_size' must be in [0, 16384], got {}", o.image_size);
  if (o.crop != "none" && o.image_size == 0)
    return InvalidArgumentError("option 'crop={}' needs 'image_size' > 0", o.crop);
  if (!(o.crop_scale_min > 0 && o.crop_scale_min <= o.crop_scale_max && o.crop_scale_max <= 1.0))
    return InvalidArgumentError(
        "options 'crop_scale_min'/'crop_scale_max' must satisfy 0 < min <= max <= 1, got {}/{}",
        o.crop_scale_min, o.crop_scale_max);
  if (o.channels != 0 && o.channels != 1 && o.channels != 3)
    return InvalidArgumentError("option 'channels' must be 0, 1 or 3, got {}", o.channels);
  if (o.producer_batch < 0 || o.ring_slots < 0 || o.ranks_per_node < 0 || o.limit_samples < 0)
    return InvalidArgumentError(
        "options 'producer_batch', 'ring_slots', 'ranks_per_node', 'limit_samples' must be >= 0");
  if (o.producer_batch > 0 && o.producer_batch < o.batch_size)
    return InvalidArgumentError("option 'producer_batch' ({}) is smaller than 'batch_size' ({})",
                                o.producer_batch, o.batch_size);
  if (o.rank < -1 || o.world_size < 0 || (o.world_size > 0 && o.rank >= o.world_size))
    return InvalidArgumentError("options 'rank' ({}) and 'world_size' ({}) must satisfy "
                                "0 <= rank < world_size (or -1 / 0: from RANK / WORLD_SIZE)",
                                o.rank, o.world_size);
  if (o.start_epoch < 0 || o.start_batch < 0)
    return InvalidArgumentError("options 'start_epoch' ({}) and 'start_batch' ({}) must be >= 0",
                                o.start_epoch, o.start_batch);
  if (o.start_run_epoch < -1 || o.start_run_epoch > o.start_epoch)
    return InvalidArgumentError(
        "option 'start_run_epoch' ({}) must be -1 (= start_epoch) or between 0 and "
        "'start_epoch' ({}): a consumer's own epochs never run ahead of the stream's. Resume "
        "with the three numbers of one saved position (Consumer::Position(); Python "
        "state_dict())", o.start_run_epoch, o.start_epoch);
  if (o.drop_last && o.pad_last)
    return InvalidArgumentError("options 'drop_last' and 'pad_last' exclude each other: the "
                                "partial last batch is either dropped or padded; set one");
  if (o.ring_slots == 1) return InvalidArgumentError("option 'ring_slots' must be 0 (auto) or >= 2");
  if (o.trainers_per_gpu < 0)
    return InvalidArgumentError("option 'trainers_per_gpu' must be >= 0 (0 = spread), got {}",
                                o.trainers_per_gpu);
  if (!(o.late_join_window >= 0.0 && o.late_join_window <= 1.0))
    return InvalidArgumentError("option 'late_join_window' must be a fraction of an epoch in "
                                "[0, 1], got {}", o.late_join_window);
  if (o.late_join_catch_ups < 0 || o.late_join_catch_ups > 64)
    return InvalidArgumentError(
        "option 'late_join_catch_ups' must be between 0 (joiners after the late-join window "
        "wait for the next epoch) and 64 (the most consumers a stream has), got {}: it bounds "
        "how many late joiners are caught up at once, each costing up to one epoch of extra "
        "decode", o.late_join_catch_ups);
  if (o.heartbeat_ms < 100)
    return InvalidArgumentError("option 'heartbeat_ms' must be at least 100ms, got {}ms",
                                o.heartbeat_ms);
  return Status::Ok();
}

std::vector<OptionInfo> ListOptions() {
  std::vector<OptionInfo> out;
  Options defaults;
  for (const auto& e : Registry())
    out.push_back({e.key, e.kind == Kind::kEnum ? std::string(e.choices) : KindName(e.kind),
                   Render(e, defaults), e.help});
  return out;
}

namespace {

// The front doors (option_scope.h), in FrontDoor order.
const std::vector<FrontDoorInfo> kFrontDoors = {
    {FrontDoor::kMpiRuntime, "mpi", "MPI Runtime", true,
     "batchcast::Runtime::Create on one node: the leader rank and its trainer ranks, one "
     "options string for both",
     "Unset it: the MPI Runtime derives the rank and world size of its trainers from the "
     "communicator",
     "", ""},
    {FrontDoor::kMultinode, "multinode", "multi-node leader", true,
     "the MPI Runtime across nodes (mode=replicate) or with mode=shard: node leaders that agree "
     "over MPI (docs/multinode.md)",
     "Unset it, or run on one node with mode=replicate", "", ""},
    {FrontDoor::kServe, "serve", "batchcast serve", true,
     "the always-on per-node service (docs/service.md); trials attach and leave at any time",
     "Unset it, or run the stream under batchcast-run or the MPI Runtime",
     "each trial's consumer: batchcast.Consumer(address, ...), Consumer::Attach",
     "start batchcast serve with a larger --max-batch (default: its batch_size), or ask for a "
     "smaller batch_size"},
    {FrontDoor::kPythonLeader, "python-leader", "batchcast.Leader", true,
     "the native pipeline leader in a Python process; consumers attach to its address",
     "Unset it", "batchcast.Consumer(address, ...)",
     "create the batchcast.Leader with max_batch_size= the largest consumer batch_size "
     "(default: its batch_size), or ask for a smaller batch_size"},
    {FrontDoor::kPythonProducer, "python-producer", "batchcast.Producer", true,
     "a leader that publishes the batches of a Python iterable (a DataLoader); it runs no "
     "decode pipeline",
     "Unset it, or use batchcast.Leader(dataset=...) for the native decode pipeline; the "
     "Producer's own settings are its keyword arguments (docs/python.md)",
     "batchcast.Consumer(address, ...)",
     "create the batchcast.Producer with max_batch_size= the largest consumer batch_size (at "
     "most its batch_size, the samples of one published batch), or ask for a smaller "
     "batch_size"},
    {FrontDoor::kLauncher, "launcher", "batchcast-run", true,
     "the launcher: a leader task per node and trainer tasks that get its options "
     "(docs/launch.md)",
     "Unset it: batchcast-run sets each trainer's RANK and WORLD_SIZE (the trainers-only "
     "world), which mode=shard uses",
     "",
     "start batchcast-run with --max-batch-size set to the largest trainer batch_size "
     "(default: --batch-size), or ask for a smaller batch_size"},
    {FrontDoor::kCApiLeader, "c-leader", "bc_leader_start", true,
     "the C API's leader (batchcast_c.h) on a thread of the caller's process",
     "Unset it", "bc_consumer_attach",
     "start the leader with bc_leader_config_t.max_consumer_batch (default: its batch_size) "
     "set to the largest consumer batch_size, or ask for a smaller batch_size"},
    {FrontDoor::kConsumer, "consumer", "batchcast.Consumer", false,
     "a Python consumer's own options (a C++ or C consumer, Consumer::Attach or "
     "bc_consumer_attach, takes its program's one options string and reads its part)",
     "Give it to the leader (batchcast.Leader(...), batchcast serve, batchcast-run)", "", ""},
};

// Why a front door cannot read an option (the cause in its refusal), where the table's
// "not read by" alone would not tell the user what is missing. With when_key, the front
// door reads the option except when option when_key has the value when_value; then it is
// refused with this cause and `instead` (what to do) in place of the front door's.
struct NotRead {
  const char* key;
  FrontDoor door;
  const char* cause;
  const char* when_key = nullptr;
  const char* when_value = nullptr;
  const char* instead = nullptr;
};
const NotRead kNotRead[] = {
    {"resize", FrontDoor::kMultinode,
     "a progressive-resizing schedule scales each producer batch by its image size (B_S = "
     "(full / size)^2), but a shard-mode global batch is trainers x batch_size samples cut into "
     "one part of batch_size per trainer (DDP steps in lockstep), and parts scaled per size "
     "are not planned",
     "mode", "shard",
     "Use mode=replicate (every node leader runs the schedule and every trainer gets every "
     "sample), or unset 'resize'"},
    {"resize", FrontDoor::kPythonProducer,
     "a progressive-resizing schedule decides which samples are decoded at which image size in "
     "each batch; batchcast.Producer publishes the batches its iterable makes, in the "
     "iterable's order and at its sizes, so it cannot follow one"},
};

const char* NotReadCause(std::string_view key, FrontDoor door) {
  for (const NotRead& n : kNotRead)
    if (key == n.key && door == n.door && n.when_key == nullptr) return n.cause;
  return nullptr;
}

// The entry that makes a front door which reads `key` refuse it with these options.
const NotRead* NotReadWith(const Options& options, std::string_view key, FrontDoor door) {
  for (const NotRead& n : kNotRead)
    if (key == n.key && door == n.door && n.when_key != nullptr &&
        GetOption(options, n.when_key) == n.when_value)
      return &n;
  return nullptr;
}

const Entry* FindEntry(std::string_view key) {
  for (const auto& e : Registry())
    if (key == e.key) return &e;
  return nullptr;
}

// Front doors that also configure their own trainers' consumers (M, N, R): nobody else in
// their job reads an option they do not.
bool OwnsConsumers(FrontDoor door) { return (Bit(door) & kTrainers & ~K) != 0; }

std::string Where(const std::string& source, std::string_view key) {
  if (source == "env") return "by " + EnvName(key);
  if (source == "file") return "in the config file";
  if (source == "flag") return "on the command line";
  return "in code";
}

}  // namespace

const std::vector<FrontDoorInfo>& FrontDoors() { return kFrontDoors; }

const FrontDoorInfo& FrontDoorOf(FrontDoor door) {
  return kFrontDoors[static_cast<size_t>(door)];
}

const FrontDoorInfo* FindFrontDoor(std::string_view key) {
  for (const auto& d : kFrontDoors)
    if (key == d.key) return &d;
  return nullptr;
}

bool FrontDoorReads(FrontDoor door, std::string_view key) {
  const Entry* e = FindEntry(key);
  return e != nullptr && (e->doors & Bit(door)) != 0;
}

std::string FrontDoorsReading(std::string_view key) {
  std::string out;
  for (const auto& d : kFrontDoors)
    if (FrontDoorReads(d.door, key)) out += (out.empty() ? "" : ", ") + std::string(d.key);
  return out;
}

bool ConsumerReadsOption(std::string_view key) { return FrontDoorReads(FrontDoor::kConsumer, key); }

bool LeaderReadsOption(std::string_view key) {
  const Entry* e = FindEntry(key);
  return e != nullptr && (e->doors & kLeaders) != 0;
}

std::string SizeOptionValue(double bytes) {
  return fmt::format("{}m", static_cast<int64_t>(std::ceil(bytes / double(1 << 20))));
}

std::string OptionSource(const Options& options, std::string_view key) {
  for (const auto& [k, source] : options.sources)
    if (k == key) return source;
  return "default";
}

Status CheckFrontDoorOptions(const Options& options, FrontDoor door, std::string_view as) {
  const FrontDoorInfo& d = FrontDoorOf(door);
  const std::string name = as.empty() ? std::string(d.name) : std::string(as);
  for (const auto& [key, source] : options.sources) {
    const NotRead* with = source == "default" ? nullptr : NotReadWith(options, key, door);
    if (source == "default" || (with == nullptr && FrontDoorReads(door, key))) continue;
    const bool explicit_value = source == "code" || source == "flag";
    const bool consumers_read = ConsumerReadsOption(key);
    // A job-wide value (environment, config file) another process of the job reads.
    if (!explicit_value && (d.leader ? consumers_read && !OwnsConsumers(door) : true)) continue;
    if (with != nullptr)
      return InvalidArgumentError("{}: option '{}' (set {}) is not read by {} with {}={}: {}. {}",
                                  name, key, Where(source, key), name, with->when_key,
                                  with->when_value, with->cause, with->instead);
    if (!d.leader) {
      std::string accepted;
      for (const auto& e : Registry())
        if (ConsumerReadsOption(e.key)) accepted += (accepted.empty() ? "" : ", ") + std::string(e.key);
      return InvalidArgumentError(
          "{}: option '{}' configures the leader, not a consumer (set {}): the leader decodes "
          "and publishes for every consumer, and a consumer never reads it. {}; a consumer "
          "accepts {}", name, key, Where(source, key), d.instead, accepted);
    }
    const Entry* e = FindEntry(key);
    // A consumer's own option at a leader whose consumers are made elsewhere.
    if (consumers_read && (e->doors & (S | L | P | C)) == 0 && *d.consumers != '\0')
      return InvalidArgumentError(
          "{}: option '{}' is each consumer's own (set {}): how it carves its batches, waits "
          "for and checks its leader; {} never reads it. Give it to the consumers ({}). Read "
          "by: {}", name, key, Where(source, key), name, d.consumers, FrontDoorsReading(key));
    const char* cause = NotReadCause(key, door);
    return InvalidArgumentError("{}: option '{}' (set {}) is not read by {} ({}){}. {}. Read by: "
                                "{} (docs/configuration.md)", name, key, Where(source, key), name,
                                d.what, cause != nullptr ? std::string(": ") + cause : "",
                                d.instead, FrontDoorsReading(key));
  }
  return Status::Ok();
}

std::string OptionsToJson(const Options& options) {
  nlohmann::json arr = nlohmann::json::array();
  Options defaults;
  for (const auto& e : Registry()) {
    std::string source = "default";
    for (const auto& kv : options.sources)
      if (kv.first == e.key) source = kv.second;
    arr.push_back({{"key", e.key},
                   {"type", e.kind == Kind::kEnum ? std::string(e.choices) : KindName(e.kind)},
                   {"default", Render(e, defaults)},
                   {"value", Render(e, const_cast<Options&>(options))},
                   {"source", source},
                   {"env", EnvName(e.key)},
                   {"doors", nlohmann::json::array()},
                   {"help", e.help}});
    for (const auto& d : kFrontDoors)
      if ((e.doors & Bit(d.door)) != 0) arr.back()["doors"].push_back(d.key);
  }
  return arr.dump(2);
}

// ---- The environment view's registry half (core/environment.h): one option from its
// BATCHCAST_<KEY> variable, for code that runs without resolved Options.

Status env::ApplyOption(std::string_view key, Options* options) {
  const std::string k = NormalizeKey(std::string(key));
  const Entry* e = Find(k);
  if (e == nullptr) return UnknownKey(k, "code");
  const std::string name = EnvName(k);
  for (const auto& [var, value] : env::Snapshot()) {
    if (var != name) continue;
    BC_RETURN_IF_ERROR(Assign(*e, options, value).WithContext("environment variable " + name));
    Record(options, k, "env");
  }
  return Status::Ok();
}

}  // namespace batchcast
