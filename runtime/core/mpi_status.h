// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The one place where MPI return codes become Status, and where ranks agree on one. Every
// MPI call in Batchcast goes through BC_MPI(call, "what") on communicators whose error
// handler is MPI_ERRORS_RETURN, so a failing call returns a message instead of aborting
// silently. It lives in core, under every module that calls MPI (transport's exchange,
// telemetry's gather, the MPI front door), which may not include each other.
#pragma once

#include <mpi.h>

#include <string>

#include "batchcast/status.h"

namespace batchcast::mpi {

// "mpi: <what> failed: <MPI's error string>" (kUnavailable) for return code `rc`.
Status FromMpi(int rc, const char* what);

// Agrees on success across `comm` (collective): if any rank passes a failed status, every
// rank returns a failure; the lowest failing rank returns its own status, the others its
// code with "rank N failed: <its message>".
Status AgreeOnStatus(MPI_Comm comm, const Status& local);

}  // namespace batchcast::mpi

#define BC_MPI(call, what)                                                          \
  do {                                                                              \
    int bc_mpi_rc_ = (call);                                                        \
    if (bc_mpi_rc_ != MPI_SUCCESS) return ::batchcast::mpi::FromMpi(bc_mpi_rc_, what); \
  } while (0)
