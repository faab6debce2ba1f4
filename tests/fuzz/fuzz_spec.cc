// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// libFuzzer target: the spec-string parsers users type, the progressive-resizing spec
// (`resize(min=96,max=224,...)`), a view with its schedule of sizes
// (`view(resize=96@0:160@2,...)`) and the telemetry spec (`telemetry(hdf5=run.h5,...)`).
// A parsed resize spec must pass its own validation again; a rejected one names a column
// inside the text. The same bytes are also read as a config file.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "schedule/resize_spec.h"
#include "schedule/view_schedule.h"
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
  // A view spec with a schedule: a parsed one is valid, its schedule canonical, and its
  // canonical text reads back to the same view, schedule and key.
  core::View base;
  base.image_size = 64;
  base.crop = core::ViewCrop::kRandom;
  auto view = schedule::ParseScheduledView(text, base);
  if (view.ok()) {
    fuzz::Check(core::ValidateView(view->view).ok(), "ParseScheduledView: view validates");
    const auto& steps = view->schedule.steps;
    fuzz::Check(steps.size() != 1 && steps.size() <= size_t(schedule::kMaxViewSteps),
                "ParseScheduledView: step count");
    for (size_t k = 0; k < steps.size(); ++k)
      fuzz::Check(k == 0 ? steps[k].first_epoch == 0
                         : steps[k].first_epoch > steps[k - 1].first_epoch &&
                               steps[k].size != steps[k - 1].size,
                  "ParseScheduledView: canonical steps");
    auto back = schedule::ParseScheduledView(schedule::ScheduledViewToString(*view), base);
    fuzz::Check(back.ok() && back->schedule == view->schedule &&
                    core::CanonicalView(back->view) == core::CanonicalView(view->view) &&
                    schedule::ScheduledViewKey(*back) == schedule::ScheduledViewKey(*view),
                "ParseScheduledView: canonical text reads back");
  } else {
    fuzz::Check(!view.status().message().empty(), "ParseScheduledView: error has a message");
  }
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
