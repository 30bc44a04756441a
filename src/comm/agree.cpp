// Agreement across ranks (include/ztrain/comm/agree.hpp).
#include "ztrain/comm/agree.hpp"

#include <cstdint>
#include <exception>
#include <string>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"

namespace zt {

void agree_across_ranks(Communicator& comm, const std::function<void()>& body) {
    std::string msg;
    double kind = 0;  // 0 ok, 1 Error, 2 InputError
    try {
        body();
    } catch (const InputError& e) {
        msg = e.what();
        kind = 2;
    } catch (const std::exception& e) {
        msg = e.what();
        kind = 1;
    }
    // The lowest failing rank speaks for everyone: max of -rank is the smallest failing rank.
    double first = kind > 0 ? -static_cast<double>(comm.rank()) : -static_cast<double>(comm.size());
    comm.all_reduce_scalars(&first, 1, ReduceOp::kMax);
    const int failing = static_cast<int>(-first);
    if (failing >= comm.size()) return;
    double k = failing == comm.rank() ? kind : 0;
    comm.all_reduce_scalars(&k, 1, ReduceOp::kMax);
    uint64_t len = failing == comm.rank() ? msg.size() : 0;
    comm.broadcast_bytes(&len, sizeof len, failing);
    msg.resize(len);
    comm.broadcast_bytes(msg.data(), len, failing);
    if (failing != comm.rank()) msg = str(msg, " (reported by rank ", failing, ")");
    if (k >= 2) throw InputError(msg);
    throw Error(msg);
}

}  // namespace zt
