// Copyright (c) Batchcast authors. SPDX-License-Identifier: Apache-2.0
#include "core/mpi_status.h"

#include <climits>
#include <cstdio>
#include <vector>

#include "core/errors.h"

namespace batchcast::mpi {

Status FromMpi(int rc, const char* what) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) std::snprintf(text, sizeof(text), "code %d", rc);
  return MakeError(StatusCode::kUnavailable, "mpi: {} failed: {}", what, text);
}

Status AgreeOnStatus(MPI_Comm comm, const Status& local) {
  int rank = 0;
  BC_MPI(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  int mine = local.ok() ? INT_MAX : rank;
  int first = INT_MAX;
  BC_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce (status)");
  if (first == INT_MAX) return Status::Ok();
  int code = static_cast<int>(local.code());
  BC_MPI(MPI_Bcast(&code, 1, MPI_INT, first, comm), "MPI_Bcast (status code)");
  std::string msg = local.message();
  int len = static_cast<int>(msg.size());
  BC_MPI(MPI_Bcast(&len, 1, MPI_INT, first, comm), "MPI_Bcast (status length)");
  std::vector<char> buf(static_cast<size_t>(len) + 1, '\0');
  if (rank == first) std::copy(msg.begin(), msg.end(), buf.begin());
  BC_MPI(MPI_Bcast(buf.data(), len, MPI_CHAR, first, comm), "MPI_Bcast (status message)");
  if (rank == first) return local;
  return Status(static_cast<StatusCode>(code),
                fmt::format("rank {} failed: {}", first, std::string(buf.data(), len)));
}

}  // namespace batchcast::mpi
