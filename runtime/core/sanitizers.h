// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
// Whether this translation unit is built with a sanitizer, for GCC and clang alike: GCC
// defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__, clang answers __has_feature (the
// sanitizer trees of make test build ThreadSanitizer with GCC and ASan+UBSan with clang).
//   BC_SANITIZE_ADDRESS   1 under AddressSanitizer, else 0
//   BC_SANITIZE_THREAD    1 under ThreadSanitizer, else 0
//   BC_SANITIZED          1 under either (tests that repeat one code path run fewer rounds)
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define BC_SANITIZE_ADDRESS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BC_SANITIZE_ADDRESS 1
#endif
#endif
#ifndef BC_SANITIZE_ADDRESS
#define BC_SANITIZE_ADDRESS 0
#endif

#if defined(__SANITIZE_THREAD__)
#define BC_SANITIZE_THREAD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BC_SANITIZE_THREAD 1
#endif
#endif
#ifndef BC_SANITIZE_THREAD
#define BC_SANITIZE_THREAD 0
#endif

#define BC_SANITIZED (BC_SANITIZE_ADDRESS || BC_SANITIZE_THREAD)
