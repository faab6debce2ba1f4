// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
//
// The one place where MPI return codes become Status. Every MPI call in Batchcast goes
// through BC_MPI(call, "what") on communicators whose error handler is
// MPI_ERRORS_RETURN, so a failing call returns a message instead of aborting silently.
#pragma once

#include <mpi.h>

#include <string>

#include "batchcast/status.h"

namespace batchcast::mpi {

Status FromMpi(int rc, const char* what);

// Agrees on success across `comm`: if any rank passes a failed status, every rank
// returns a failure whose message names the lowest failing rank and its message.
Status AgreeOnStatus(MPI_Comm comm, const Status& local);

}  // namespace batchcast::mpi

#define BC_MPI(call, what)                                                          \
  do {                                                                              \
    int bc_mpi_rc_ = (call);                                                        \
    if (bc_mpi_rc_ != MPI_SUCCESS) return ::batchcast::mpi::FromMpi(bc_mpi_rc_, what); \
  } while (0)
