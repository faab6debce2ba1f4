// Skips a GPU test on a machine without a visible CUDA device, naming the reason.
#pragma once

#include <gtest/gtest.h>

#include "transport/cuda/device_probe.h"

#define BC_REQUIRE_DEVICE()                                                              \
  do {                                                                                   \
    auto bc_n_ = ::batchcast::cuda::VisibleDeviceCount();                                \
    if (!bc_n_.ok()) GTEST_SKIP() << "no CUDA device: " << bc_n_.status().message();    \
  } while (0)
