// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Symbol visibility for the public API: the library is built with -fvisibility=hidden.
#pragma once

#if defined(BATCHCAST_BUILDING_LIBRARY)
#define BATCHCAST_API [[gnu::visibility("default")]]
#else
#define BATCHCAST_API
#endif
