// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "schedule/plan_format.h"

#include <fmt/format.h>

#include <iterator>

namespace batchcast::schedule {
namespace {

void AppendBucketTable(const ResizeSchedule& s, std::string* out) {
  fmt::format_to(std::back_inserter(*out), "{:>6} {:>6} {:>8} {:>7} {:>9} {:>6}\n", "bucket",
                 "size", "B_S", "batch", "lr_factor", "capped");
  for (int b = 0; b < s.num_buckets(); ++b) {
    BucketScaling sc = s.Scaling(s.base_batch_size(), b);
    fmt::format_to(std::back_inserter(*out), "{:>6} {:>6} {:>8.3f} {:>7} {:>9.3f} {:>6}\n", b,
                   sc.image_size, sc.batch_scale, sc.batch_size, sc.lr_factor,
                   sc.capped ? "yes" : "no");
  }
}

bool SameRow(const EpochSummary& a, const EpochSummary& b) {
  return a.phase == b.phase && a.trained == b.trained;
}

void AppendEpochRow(const ResizeSchedule& s, const EpochSummary& first, const EpochSummary& last,
                    std::string* out) {
  std::string epochs = first.epoch == last.epoch ? std::to_string(first.epoch)
                                                 : fmt::format("{}-{}", first.epoch, last.epoch);
  fmt::format_to(std::back_inserter(*out), "{:>9} {:>5} {:>9}", epochs, EpochPhaseName(first.phase),
                 first.samples_covered);
  for (int b = 0; b < s.num_buckets(); ++b)
    fmt::format_to(std::back_inserter(*out), " {:>8}", first.trained[b]);
  fmt::format_to(std::back_inserter(*out), " {:>7} {:>6.3f}\n", first.steps, first.relative_work);
}

}  // namespace

std::string FormatPlan(const ResizeSchedule& s, std::span<const EpochSummary> summaries) {
  std::string out;
  auto it = std::back_inserter(out);
  fmt::format_to(it, "progressive resizing plan: {}\n", ResizeSpecToString(s.spec()));
  fmt::format_to(it,
                 "{} samples, {} epochs (final phase from epoch {}), seed {}, base batch {} at "
                 "{} px, {} samples move up after each epoch\n",
                 s.num_samples(), s.total_epochs(), s.final_phase_begin(), s.seed(),
                 s.base_batch_size(), s.full_size(), s.upgrades_per_epoch());
  AppendBucketTable(s, &out);
  fmt::format_to(it, "{:>9} {:>5} {:>9}", "epochs", "phase", "samples");
  for (int size : s.bucket_sizes()) fmt::format_to(it, " {:>8}", fmt::format("@{}", size));
  fmt::format_to(it, " {:>7} {:>6}\n", "steps", "work");
  int64_t total_steps = 0;
  double total_work = 0.0;
  for (size_t i = 0; i < summaries.size();) {
    size_t j = i;
    while (j + 1 < summaries.size() && SameRow(summaries[i], summaries[j + 1])) ++j;
    AppendEpochRow(s, summaries[i], summaries[j], &out);
    for (size_t k = i; k <= j; ++k) {
      total_steps += summaries[k].steps;
      total_work += summaries[k].relative_work;
    }
    i = j + 1;
  }
  fmt::format_to(
      it,
      "total: {} steps, pixel work {:.2f} full-size epochs ({:.1f}% of {} epochs at "
      "full size); 'work' is pixels per epoch relative to one full-size epoch\n",
      total_steps, total_work,
      summaries.empty() ? 0.0 : 100.0 * total_work / static_cast<double>(summaries.size()),
      summaries.size());
  return out;
}

Result<std::string> FormatPlan(const ResizeSchedule& schedule) {
  BC_ASSIGN_OR_RETURN(std::vector<EpochSummary> summaries, schedule.Summaries());
  return FormatPlan(schedule, summaries);
}

}  // namespace batchcast::schedule
