// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// One options struct for every front door (MPI runtime, CLI, service, Python). Which front
// doors read which option is one table (docs/configuration.md, `batchcast info -c`).
//
// Each knob is declared once in a registry (runtime/core/options.cc) with its type,
// default and help text. Values are resolved in this order, later wins:
//   1. built-in defaults
//   2. the config file (`--config FILE` or BATCHCAST_CONFIG): `key = value` lines, `#` comments
//   3. environment variables BATCHCAST_<KEY> (e.g. BATCHCAST_BATCH_SIZE=32)
//   4. command-line flags `--key=value` / `--key value` (dashes and underscores both accepted)
//   5. fields assigned in code after ResolveOptions() returns
// Unknown keys are errors in files and flags, and warnings in the environment.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "batchcast/export.h"
#include "batchcast/status.h"

namespace batchcast {

struct BATCHCAST_API Options {
  // --- dataset and stream ---
  std::string dataset;          // HDF5 file in the Batchcast layout (docs/dataset-format.md)
  uint64_t seed = 0;            // the stream is a pure function of (seed, epoch, position)
  int epochs = 1;               // epochs the leader produces (a consumer may stop earlier)
  int64_t limit_samples = 0;    // use only the first N samples of the file (0 = all)
  bool shuffle = true;          // permute samples each epoch

  // --- pipeline (leader side) ---
  int threads = 0;              // decode worker threads (0 = cores available to the process)
  int image_size = 0;           // output height = width in pixels (0 = the dataset's own size)
  std::string crop = "none";    // none | center | random (RandomResizedCrop)
  double crop_scale_min = 0.08; // RandomResizedCrop area range
  double crop_scale_max = 1.0;
  bool flip = false;            // random horizontal flip (p = 0.5)
  bool normalize = false;       // (x/255 - mean) / std, implies float32 output
  std::string mean = "0.485,0.456,0.406";
  std::string std = "0.229,0.224,0.225";
  std::string dtype = "uint8";  // uint8 | float32
  std::string layout = "chw";   // chw | hwc
  int channels = 0;             // 0 = as stored, 1 = gray, 3 = RGB
  int64_t max_pixels = 128LL << 20;  // decompression-bomb guard (width × height)
  bool dct_scaling = true;      // JPEG: decode at 1/2, 1/4, 1/8 size when the target is small
  bool crop_decode = true;      // JPEG + crop: decode only the crop's iMCU rows and columns
  std::string on_bad_sample = "error";  // error | skip (skips are counted and reported)
  std::string verify = "sample";        // off | sample | full: per-sample checksums (docs/dataset-format.md)

  // --- node data plane ---
  int batch_size = 64;          // this consumer's batch size
  int buffer_depth = 2;         // unreleased batches a consumer may hold
  int producer_batch = 0;       // samples per producer batch (0 = 2 × largest consumer batch)
  int ring_slots = 0;           // slots in the ring (0 = buffer_depth + 2)
  bool carve_offset = false;    // per-consumer seeded carving offset
  bool carve_shuffle = false;   // per-consumer seeded order of carved batches
  bool leader_trains = false;   // the leader rank also consumes (no extra rank)
  int ranks_per_node = 0;       // >0 forms virtual nodes of this many ranks (tests)
  std::string mode = "replicate";  // across nodes: replicate (every trainer sees the whole
                                   // stream) | shard (data-parallel); docs/multinode.md
  std::string job_id;           // identity in segment names (default: from Slurm/MPI/pid)
  int64_t heartbeat_ms = 10000; // a consumer silent this long is detached
  int allowed_leader_uid = -1;  // consumers also trust a leader of this uid (-1: own uid only)

  // --- GPU data plane (docs/gpu.md) ---
  std::string gpu = "auto";     // auto | off | on: stage batches on the trainers' GPUs
  int trainers_per_gpu = 0;     // k trainers share a GPU (0 = spread over the visible GPUs)
  bool gpu_finish = false;      // uint8 -> normalised float32 CHW once per GPU (a kernel)

  // --- telemetry (docs/telemetry.md) ---
  std::string telemetry;        // sink spec, e.g. "telemetry(hdf5=run.h5,interval=1s)"; "" = off
  std::string experiment;       // telemetry tag: the experiment (e.g. a sweep)
  std::string workload;         // telemetry tag: a set of collocated runs sharing one stream
  std::string run_name;         // telemetry tag: this run / trial

  // --- progressive resizing (docs/progressive-resizing.md) ---
  std::string resize;           // schedule spec, e.g. "resize(min=96,max=224,step=32)"; "" = off

  // --- leader model stages (docs/model-stage.md) ---
  std::string stage;            // e.g. "model(path=encoder.pt,input=images,output=embedding)";
                                // ';' chains stages; "" = none

  // Where each value came from ("default", "file", "env", "flag"), by key.
  std::vector<std::pair<std::string, std::string>> sources;

  // --- DataLoader semantics (docs/data-plane.md "Exact batches"); added last for the ABI ---
  bool drop_last = false;       // this consumer drops the epoch's partial last batch
  bool pad_last = false;        // ... or pads it to batch_size with repeats of its own samples
  int64_t connect_timeout = 30000;  // ms a consumer waits for its leader to listen (0: once)
  // mode=shard outside the MPI Runtime: this consumer's data-parallel rank and world size
  // (-1 / 0: from RANK / WORLD_SIZE in the environment, as torchrun and batchcast-run set).
  int rank = -1;
  int world_size = 0;
  // Resume (Consumer::Position()): the stream epoch and the batch within it, in the
  // consumer's batch_size, to start at; the leader starts its stream there too.
  int start_epoch = 0;
  int64_t start_batch = 0;
  // ... and the consumer's own epoch there (Consumer::Position().run_epoch): it runs epochs -
  // start_run_epoch more epochs. Below start_epoch only after a resume replay moved it onto
  // later epochs of a shared stream (docs/service.md); -1: start_epoch.
  int start_run_epoch = -1;
  // Decoded-sample cache of the leader, in bytes (0 = off): samples as the deterministic part
  // of the pipeline leaves them, kept from the first epoch for the later ones (docs/pipeline.md).
  int64_t cache = 0;
  // Late join (docs/data-plane.md "Joining"): a consumer joining within this fraction of an
  // epoch (at least the ring depth in producer batches) gets the epoch's start replayed to it
  // alone; later joiners: a catch-up (late_join_catch_ups), the next epoch, or join_mid_epoch.
  double late_join_window = 0.02;
  bool join_mid_epoch = false;
  // Catch-up (docs/service.md "Admission and late join"): at most this many consumers that
  // join after the window are caught up at once, each with a whole epoch of its own (the
  // stream's current one, replayed to it alone between the stream's batches); a joiner
  // beyond them waits for the next epoch. 0: every joiner after the window waits (or starts
  // mid-epoch with join_mid_epoch, which takes precedence). Only leaders that can make any
  // batch again (the native pipeline on one node) catch up.
  int late_join_catch_ups = 2;
  // Views (docs/pipeline.md "Views through the Producer"). A consumer's own view of the
  // leader's samples, a spec over the leader's view such as "view(size=160,flip=0)" (""
  // = the leader's own): consumers with equal views form a group, and the leader decodes
  // each sample once for every group. The leader serves up to views_max groups (its own
  // included; 1 = its own only) in view_bytes of image room per slot beyond its own images
  // (0 = room for views_max - 1 more groups of its own image size).
  std::string view;
  int views_max = 1;
  int64_t view_bytes = 0;
};

// Resolves defaults < config file < BATCHCAST_* environment < flags. `flags` are
// command-line words (e.g. {"--batch-size=32", "--dataset", "x.h5"}); words that are
// not options are an error unless `rest` is given, in which case they are returned there,
// except a `--flag` that looks like a mistyped option (`--batch-sze`: "did you mean
// '--batch-size'?"), which is an error. A bare "--" and every word after it go to `rest`
// unexamined: put your program's own flags there if they look like Batchcast options.
BATCHCAST_API Result<Options> ResolveOptions(const std::vector<std::string>& flags,
                                             std::vector<std::string>* rest = nullptr);

// Sets one option by key from text, with the registry's parsing and validation.
BATCHCAST_API Status SetOption(Options* options, const std::string& key,
                               const std::string& value);

// Checks cross-field constraints (e.g. crop=random needs image_size > 0).
BATCHCAST_API Status ValidateOptions(const Options& options);

// The registry as JSON: [{"key","type","default","value","source","help"}...].
BATCHCAST_API std::string OptionsToJson(const Options& options);

struct OptionInfo {
  std::string key;
  std::string type;
  std::string default_value;
  std::string help;
};
BATCHCAST_API std::vector<OptionInfo> ListOptions();
BATCHCAST_API std::string GetOption(const Options& options, const std::string& key);

}  // namespace batchcast
