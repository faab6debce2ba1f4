// Monotonic time for the runtime's own measurements (idle time, stage timings).
#pragma once

#include <chrono>
#include <cstdint>

namespace batchcast::core {

// Nanoseconds on the steady clock: differences are durations; the origin means nothing.
inline int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace batchcast::core
