// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// libFuzzer target: the spec-string parsers users type, the progressive-resizing spec
// (`resize(min=96,max=224,...)`) and the telemetry spec (`telemetry(hdf5=run.h5,...)`).
// A parsed resize spec must pass its own validation again; a rejected one names a column
// inside the text. The same bytes are also read as a config file.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "schedule/resize_spec.h"
#include "telemetry/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace batchcast;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto resize = schedule::ParseResizeSpec(text);
  if (resize.ok()) {
    fuzz::Check(schedule::ValidateResizeSpec(*resize).ok(), "ParseResizeSpec: result validates");
    fuzz::Check(schedule::BucketSizes(*resize).size() <= size_t(schedule::kMaxResizeBuckets),
                "ParseResizeSpec: bucket count");
  } else {
    fuzz::Check(!resize.status().message().empty(), "ParseResizeSpec: error has a message");
  }
  // The config-file form of the same text (`resize = ...` / `resize_<key> = ...` lines).
  fuzz::MemFile file(data, size);
  auto from_file = schedule::ResizeSpecFromConfigFile(file.path());
  if (from_file.ok())
    fuzz::Check(schedule::ValidateResizeSpec(*from_file).ok(),
                "ResizeSpecFromConfigFile: validates");
  auto telemetry = telemetry::ParseTelemetrySpec(text);
  if (telemetry.ok() && telemetry->enabled)
    fuzz::Check(telemetry->collector.interval_ms >= 10, "ParseTelemetrySpec: interval >= 10ms");
  if (telemetry.ok() && !telemetry->dir.empty()) {  // a run directory names its files itself
    const auto& s = telemetry->sinks;
    fuzz::Check(telemetry->enabled && s.hdf5.empty(), "ParseTelemetrySpec: dir without hdf5=");
    for (const std::string* v : {&s.csv, &s.json, &s.trace})
      fuzz::Check(v->empty() || *v == "on", "ParseTelemetrySpec: dir outputs are on or off");
  }
  return 0;
}
