// agree_across_ranks (comm/agree.hpp) for ckpt's collective steps, which read and write
// manifests and weight files' JSON: a field of the wrong type or missing there is bad input
// (InputError, exit 2), not an internal error. Private to ckpt/.
#pragma once

#include <functional>

#include <nlohmann/json.hpp>

#include "ztrain/comm/agree.hpp"
#include "ztrain/core/error.hpp"

namespace zt {

/// agree_across_ranks, with a nlohmann::json::exception from `body` reported as the
/// InputError "malformed checkpoint manifest: ...". Collective.
inline void agree_on_manifest(Communicator& comm, const std::function<void()>& body) {
    agree_across_ranks(comm, [&body] {
        try {
            body();
        } catch (const nlohmann::json::exception& e) {
            // A manifest field of the wrong type or missing: the checkpoint is bad input.
            throw InputError(str("malformed checkpoint manifest: ", e.what()));
        }
    });
}

}  // namespace zt
