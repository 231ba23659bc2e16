#pragma once
/// Text across the ranks of a StateComm: how one rank's message, config or path reaches the others.
#include <cstdint>
#include <string>

#include "volt/checkpoint/state_layout.h"

namespace volt::detail {

/// Rank `src`'s `text` on every rank (what other ranks pass is ignored). Collective: every rank of
/// `comm` calls it with the same `src`. Two broadcasts: the length, then the bytes.
std::string broadcast_text(StateComm& comm, const std::string& text, int64_t src);

/// The lowest rank whose `local_error` is not empty, and that error, on every rank; rank is the
/// world size (and message empty) when no rank failed. Collective: how every rank's log comes to
/// say what went wrong and where, whichever log the user reads.
struct FirstFailure {
  int64_t rank = 0;
  std::string message;
};
FirstFailure first_failure(StateComm& comm, const std::string& local_error);

}  // namespace volt::detail
