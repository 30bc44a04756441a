// Agreement across ranks: a step that may fail on some ranks fails on all of them, with
// one message, so a failure on one rank never leaves the others waiting in a collective.
#pragma once

#include <functional>

namespace zt {

class Communicator;

/// Runs `body` on every rank of `comm`; if any rank throws, every rank throws the lowest
/// failing rank's message (InputError when that was one, else Error), so no rank is left
/// waiting in a collective. Collective.
void agree_across_ranks(Communicator& comm, const std::function<void()>& body);

}  // namespace zt
