// MPI implementation of the Communicator for host buffers.
//
// Started collectives: with the progress engine (progress_engine.hpp, the trainer's default)
// a communication thread runs them as the blocking calls while the caller computes.
// Without it they are MPI-3 non-blocking collectives, which Open MPI progresses only inside
// MPI calls: ordering freedom rather than overlap. The NCCL communicator (GPU) overlaps on
// its own stream.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_map>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "progress_engine.hpp"

namespace zt {

namespace {

// User-defined reductions for 16-bit storage: each pair is widened to fp32, combined and
// rounded back, so a bf16/fp16 reduction moves 2 bytes per element on the wire.
template <uint16_t (*narrow)(float), float (*widen)(uint16_t), bool is_sum>
void combine16(void* in, void* inout, int* len, MPI_Datatype*) {
    const uint16_t* a = static_cast<const uint16_t*>(in);
    uint16_t* b = static_cast<uint16_t*>(inout);
    for (int i = 0; i < *len; ++i) {
        const float x = widen(a[i]);
        const float y = widen(b[i]);
        b[i] = narrow(is_sum ? x + y : (x > y || x != x ? x : y));
    }
}

MPI_Op make_op(MPI_User_function* f) {
    MPI_Op op;
    ZT_MPI_CHECK(MPI_Op_create(f, 1, &op));
    return op;
}

MPI_Op mpi_op(ReduceOp op, DType dt) {
    if (dt == DType::kF32) return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX;
    // Created once per process, on first use (MPI is initialized by then), freed by MPI_Finalize.
    static const MPI_Op bf16_sum = make_op(combine16<f32_to_bf16, bf16_to_f32, true>);
    static const MPI_Op bf16_max = make_op(combine16<f32_to_bf16, bf16_to_f32, false>);
    static const MPI_Op f16_sum = make_op(combine16<f32_to_f16, f16_to_f32, true>);
    static const MPI_Op f16_max = make_op(combine16<f32_to_f16, f16_to_f32, false>);
    if (dt == DType::kBF16) return op == ReduceOp::kSum ? bf16_sum : bf16_max;
    return op == ReduceOp::kSum ? f16_sum : f16_max;
}

MPI_Op mpi_op(ReduceOp op) { return mpi_op(op, DType::kF32); }

MPI_Datatype mpi_type(DType dt) { return dt == DType::kF32 ? MPI_FLOAT : MPI_UINT16_T; }

struct Placement {
    int rank = 0, size = 1, local_rank = 0, local_size = 1;
};

}  // namespace

NodeComm::NodeComm(MPI_Comm comm) {
    if (comm == MPI_COMM_NULL) return;
    int rank = 0;
    ZT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    ZT_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &m_comm));
    ZT_MPI_CHECK(MPI_Comm_rank(m_comm, &m_rank));
    ZT_MPI_CHECK(MPI_Comm_size(m_comm, &m_size));
}

NodeComm::~NodeComm() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (m_comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&m_comm);
}

namespace {

Placement place(MPI_Comm comm) {
    Placement p;
    if (comm == MPI_COMM_NULL) return p;
    ZT_MPI_CHECK(MPI_Comm_rank(comm, &p.rank));
    ZT_MPI_CHECK(MPI_Comm_size(comm, &p.size));
    const NodeComm node(comm);
    p.local_rank = node.rank();
    p.local_size = node.size();
    return p;
}

class MpiCommunicator final : public Communicator {
  public:
    MpiCommunicator(MPI_Comm comm, const Placement& p, bool progress_thread)
        : Communicator(p.rank, p.size, p.local_rank, p.local_size) {
        if (comm == MPI_COMM_NULL) return;
        ZT_MPI_CHECK(MPI_Comm_dup(comm, &m_comm));
        if (progress_thread && p.size > 1 && mpi_thread_multiple()) {
            // The engine's collectives get a communicator of their own: the training thread's
            // blocking calls on m_comm never interleave with them. And an engine of its own:
            // one communicator's collectives (a hybrid run's network all-reduce across groups)
            // never queue behind another's (the group's gathers on the node).
            ZT_MPI_CHECK(MPI_Comm_dup(comm, &m_engine_comm));
            m_engine = std::make_unique<ProgressEngine>();
        }
    }
    ~MpiCommunicator() override {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (finalized || m_comm == MPI_COMM_NULL) return;
        // A deferred reduce-scatter never started: nothing to wait for (its MPI request is null).
        for (auto& [id, req] : m_requests) {
            if (req.ticket) {
                finish_unwaited(*req.ticket);
            } else {
                MPI_Wait(&req.mpi, MPI_STATUS_IGNORE);
            }
        }
        if (m_engine_comm != MPI_COMM_NULL) MPI_Comm_free(&m_engine_comm);
        MPI_Comm_free(&m_comm);
    }
    std::string name() const override { return "mpi"; }
    bool has_communication_thread() const override { return m_engine != nullptr; }
    void end_outstanding(double timeout_s) noexcept override {
        const auto start = std::chrono::steady_clock::now();
        for (;;) {
            for (auto it = m_requests.begin(); it != m_requests.end();) {
                // A deferred reduce-scatter never started; a started one done: nothing left.
                int done = 1;
                Request& r = it->second;
                if (r.ticket) {
                    done = m_engine->finished(*r.ticket) ? 1 : 0;
                    if (done) finish_unwaited(*r.ticket);
                } else if (!r.deferred_reduce_scatter) {
                    MPI_Test(&r.mpi, &done, MPI_STATUS_IGNORE);
                }
                it = done ? m_requests.erase(it) : std::next(it);
            }
            if (m_requests.empty()) return;
            const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            if (timeout_s > 0 && waited > timeout_s) {
                std::fprintf(stderr,
                             "ztrain: rank %d: %zu collective(s) started before the error did not finish in %.0f s "
                             "(parallel.timeout_s); aborting the job\n",
                             rank(), m_requests.size(), waited);
                std::fflush(stderr);
                MPI_Abort(MPI_COMM_WORLD, kExitFailure);
            }
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
    }

  protected:
    void do_all_reduce(void* buf, size_t count, ReduceOp op, DType dt) override {
        ZT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, checked_count(count, "all_reduce"), mpi_type(dt),
                                   mpi_op(op, dt), m_comm));
    }
    void do_reduce_scatter(const void* in, void* out, size_t count_per_rank, ReduceOp op, DType dt) override {
        ZT_MPI_CHECK(MPI_Reduce_scatter_block(in, out, checked_count(count_per_rank, "reduce_scatter"),
                                              mpi_type(dt), mpi_op(op, dt), m_comm));
    }
    void do_all_gather(const void* in, void* out, size_t count_per_rank, DType dt) override {
        const int n = checked_count(count_per_rank, "all_gather");
        if (in == nullptr) {
            ZT_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, n, mpi_type(dt), m_comm));
        } else {
            ZT_MPI_CHECK(MPI_Allgather(in, n, mpi_type(dt), out, n, mpi_type(dt), m_comm));
        }
    }
    void do_broadcast_bytes(void* buf, size_t bytes, int root) override {
        ZT_MPI_CHECK(MPI_Bcast(buf, checked_count(bytes, "broadcast"), MPI_BYTE, root, m_comm));
    }
    void do_all_gather_bytes(const void* in, void* out, size_t bytes_per_rank) override {
        const int n = checked_count(bytes_per_rank, "all_gather_bytes");
        ZT_MPI_CHECK(MPI_Allgather(in, n, MPI_BYTE, out, n, MPI_BYTE, m_comm));
    }
    void do_barrier() override { ZT_MPI_CHECK(MPI_Barrier(m_comm)); }
    void do_all_reduce_scalars(double* values, size_t count, ReduceOp op) override {
        ZT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, checked_count(count, "all_reduce_scalars"), MPI_DOUBLE,
                                   mpi_op(op), m_comm));
    }
    CommRequest do_start_all_reduce(void* buf, size_t count, ReduceOp op, DType dt) override {
        const int n = checked_count(count, "all_reduce");
        if (m_engine) {
            return run_in_engine([=, c = m_engine_comm] {
                ZT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, n, mpi_type(dt), mpi_op(op, dt), c));
            });
        }
        MPI_Request r;
        ZT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, n, mpi_type(dt), mpi_op(op, dt), m_comm, &r));
        return keep(r);
    }
    // Without the engine: started, but run as the blocking MPI_Reduce_scatter_block when
    // waited for. Open MPI's non-blocking reduce-scatter (libnbc) adds in another order than
    // the blocking one, so at 3+ ranks its fp32 sums differ in the last bits (1613 of 1000x4
    // elements in a probe): results would depend on whether a stage starts its reduction or
    // calls it. The engine runs the same blocking call, early.
    CommRequest do_start_reduce_scatter(const void* in, void* out, size_t count_per_rank, ReduceOp op,
                                        DType dt) override {
        const int n = checked_count(count_per_rank, "reduce_scatter");
        if (m_engine) {
            return run_in_engine([=, c = m_engine_comm] {
                ZT_MPI_CHECK(MPI_Reduce_scatter_block(in, out, n, mpi_type(dt), mpi_op(op, dt), c));
            });
        }
        Request r;
        r.deferred_reduce_scatter = DeferredReduceScatter{in, out, n, mpi_type(dt), mpi_op(op, dt)};
        return keep(r);
    }
    CommRequest do_start_all_gather(const void* in, void* out, size_t count_per_rank, DType dt) override {
        const int n = checked_count(count_per_rank, "all_gather");
        if (m_engine) {
            return run_in_engine([=, c = m_engine_comm] {
                if (in == nullptr) {
                    ZT_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, n, mpi_type(dt), c));
                } else {
                    ZT_MPI_CHECK(MPI_Allgather(in, n, mpi_type(dt), out, n, mpi_type(dt), c));
                }
            });
        }
        MPI_Request r;
        if (in == nullptr) {
            ZT_MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, n, mpi_type(dt), m_comm, &r));
        } else {
            ZT_MPI_CHECK(MPI_Iallgather(in, n, mpi_type(dt), out, n, mpi_type(dt), m_comm, &r));
        }
        return keep(r);
    }
    void do_wait(CommRequest& request) override {
        auto it = m_requests.find(request.handle());
        ZT_REQUIRE(it != m_requests.end(), "wait on unknown request ", request.handle());
        Request r = it->second;
        m_requests.erase(it);
        if (r.ticket) {
            const bool before = m_engine->finished(*r.ticket);
            const ProgressEngine::JobTimes t = m_engine->wait(*r.ticket);
            note_background_run(static_cast<double>(t.finished_ns - t.started_ns) * 1e-9, before);
        } else if (r.deferred_reduce_scatter) {
            const DeferredReduceScatter& d = *r.deferred_reduce_scatter;
            ZT_MPI_CHECK(MPI_Reduce_scatter_block(d.in, d.out, d.count, d.type, d.op, m_comm));
        } else {
            ZT_MPI_CHECK(MPI_Wait(&r.mpi, MPI_STATUS_IGNORE));
        }
    }

    bool do_finished(const CommRequest& request) const override {
        auto it = m_requests.find(request.handle());
        return it != m_requests.end() && it->second.ticket && m_engine->finished(*it->second.ticket);
    }

  private:
    struct DeferredReduceScatter {
        const void* in;
        void* out;
        int count;
        MPI_Datatype type;
        MPI_Op op;
    };
    /// A started collective: an MPI request, a reduce-scatter run when waited for, or a
    /// ticket of the progress engine.
    struct Request {
        MPI_Request mpi = MPI_REQUEST_NULL;
        std::optional<DeferredReduceScatter> deferred_reduce_scatter;
        std::optional<ProgressEngine::Ticket> ticket;
    };
    /// Lets the engine forget a job no caller will wait for; its error, if any, is dropped
    /// (at teardown nobody asked for the result; while unwinding, the error already in flight
    /// is the one reported).
    void finish_unwaited(ProgressEngine::Ticket ticket) noexcept {
        try {
            m_engine->wait(ticket);
        } catch (...) {
        }
    }
    CommRequest run_in_engine(std::function<void()> job) {
        Request q;
        q.ticket = m_engine->submit(std::move(job));
        return keep(q);
    }
    CommRequest keep(MPI_Request r) {
        Request q;
        q.mpi = r;
        return keep(q);
    }
    CommRequest keep(const Request& r) {
        const int64_t id = m_next_id++;
        m_requests.emplace(id, r);
        return CommRequest(id);
    }
    MPI_Comm m_comm = MPI_COMM_NULL;
    MPI_Comm m_engine_comm = MPI_COMM_NULL;
    std::unique_ptr<ProgressEngine> m_engine;  ///< null: started collectives progress in MPI calls
    std::unordered_map<int64_t, Request> m_requests;
    int64_t m_next_id = 0;
};

}  // namespace

bool mpi_thread_multiple() {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    return provided >= MPI_THREAD_MULTIPLE;
}

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, bool progress_thread) {
    return std::make_unique<MpiCommunicator>(comm, place(comm), progress_thread);
}

Communicator& self_communicator() {
    static std::unique_ptr<Communicator> self = make_mpi_communicator(MPI_COMM_NULL);
    return *self;
}

}  // namespace zt
