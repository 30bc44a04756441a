// A blend of two corpora (data.train = A:0.7, B:0.3) resumed at other world sizes: 6
// steps uninterrupted at 2 ranks against 2 steps at 2 ranks, 2 at 1 and 2 at 4 (at 2 in the
// np=2 job), the global batch kept at 4 windows. Every step's windows (each global sample's,
// whichever rank read it) equal the uninterrupted run's, so do the step records'
// tokens_by_corpus, the losses agree to 1e-6, and val_loss is the weighted mean of
// val_loss_by_corpus.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpi_training.hpp"
#include "test_support.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/train/trainer.hpp"

namespace zt {
namespace {

constexpr int kGlobalBatch = 4;   // windows per step, at every world size
constexpr int kSteps = 6;

/// Corpus `c`: n tokens of tiny_mpi_config's vocabulary, its own content.
void write_corpus(const std::string& path, size_t n, uint64_t c) {
    std::vector<uint32_t> tokens(n);
    for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<uint32_t>(random_bits(100 + c, 0, i / 3) % 61);
    write_token_shard(path, tokens);
}

/// A communicator of the first `n` ranks of the world (MPI_COMM_NULL on the others).
class FirstRanks {
  public:
    explicit FirstRanks(int n) {
        MPI_Comm_split(MPI_COMM_WORLD, test::world_rank() < n ? 0 : MPI_UNDEFINED, test::world_rank(), &m_comm);
    }
    ~FirstRanks() {
        if (m_comm != MPI_COMM_NULL) MPI_Comm_free(&m_comm);
    }
    FirstRanks(const FirstRanks&) = delete;
    FirstRanks& operator=(const FirstRanks&) = delete;
    MPI_Comm get() const { return m_comm; }

  private:
    MPI_Comm m_comm = MPI_COMM_NULL;
};

/// Each global sample's window (a hash of its inputs, below 2^52 so sums stay exact), for
/// the steps a run at `n` ranks trains: filled by the rank that read it, zero elsewhere.
struct WindowTable {
    std::vector<double> hash = std::vector<double>(kGlobalBatch * kSteps, 0.0);

    TrainOptions options(MPI_Comm comm, int n, long stop_at) {
        TrainOptions o;
        o.comm = comm;
        int rank = 0;
        MPI_Comm_rank(comm, &rank);
        o.on_inputs = [this, rank, n](long step, int micro, const std::vector<int32_t>& inputs) {
            uint64_t h = 1469598103934665603ull;
            for (int32_t t : inputs) h = mix64(h ^ static_cast<uint64_t>(t));
            const long g = (step - 1) * kGlobalBatch + static_cast<long>(rank) * (kGlobalBatch / n) + micro;
            hash[static_cast<size_t>(g)] = static_cast<double>(h >> 12) + 1.0;
        };
        if (stop_at > 0) {
            o.after_step = [stop_at](long step, ModelState&, bool) {
                if (step == stop_at) std::raise(SIGUSR1);  // a preemption: checkpoint and return
            };
        }
        return o;
    }
};

/// A barrier that sleeps while it waits: the ranks outside a part would otherwise spin in
/// MPI and take the (oversubscribed) cores from the ranks training.
void wait_for_every_rank() {
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    int done = 0;
    while (!done) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

/// Runs `base` on the first `n` ranks up to step `stop_at` (0: train.max_steps); every rank
/// of the world adds the windows of the steps it trained to `whole_table` and gets the
/// losses rank 0 saw.
std::vector<double> train_part(const Config& base, int n, long stop_at, WindowTable& whole_table) {
    WindowTable table;
    std::vector<double> losses;
    {
        FirstRanks ranks(n);
        if (ranks.get() != MPI_COMM_NULL) {
            Config c = base;
            c.train.grad_accum = kGlobalBatch / n;
            losses = train(c, table.options(ranks.get(), n, stop_at)).losses;
        }
    }
    wait_for_every_rank();
    MPI_Allreduce(MPI_IN_PLACE, table.hash.data(), static_cast<int>(table.hash.size()), MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
    for (size_t g = 0; g < table.hash.size(); ++g) whole_table.hash[g] += table.hash[g];
    int count = static_cast<int>(losses.size());
    MPI_Bcast(&count, 1, MPI_INT, 0, MPI_COMM_WORLD);
    losses.resize(static_cast<size_t>(count));
    MPI_Bcast(losses.data(), count, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return losses;
}

/// A run's tokens_by_corpus per step and its last val_loss_by_corpus.
struct Records {
    std::vector<nlohmann::json> tokens;
    nlohmann::json last_val;  ///< the last val record
};

Records blend_records(const std::string& metrics) {
    Records r;
    for (const nlohmann::json& j : test::read_jsonl(metrics)) {
        if (j.contains("loss")) r.tokens.push_back(j.value("tokens_by_corpus", nlohmann::json()));
        if (j.contains("val_loss_by_corpus")) r.last_val = j;
    }
    return r;
}

TEST(BlendResume, EveryStepsWindowsEqualTheUninterruptedRunAtTwoThenOneThenFourRanks) {
    const int last_n = std::min(4, test::world_size());
    test::SharedDir dir("blend_resume");
    if (test::world_rank() == 0) {
        write_corpus(dir.file("a_train.bin"), 3000, 0);
        write_corpus(dir.file("b_train.bin"), 1000, 1);
        write_corpus(dir.file("a_val.bin"), 600, 2);
        write_corpus(dir.file("b_val.bin"), 600, 3);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    auto config = [&](const std::string& run) {
        Config c = test::tiny_mpi_config(dir.file("a_train.bin") + ":0.7, " + dir.file("b_train.bin") + ":0.3",
                                         dir.file(run));
        c.data.val = dir.file("a_val.bin") + ":1, " + dir.file("b_val.bin") + ":3";
        c.train.micro_batch = 1;
        c.train.max_steps = kSteps;
        c.train.eval_batches = 1;
        // Two parts of one process can start within a second: their TensorBoard files would
        // share a name (time, host, pid).
        c.run.tensorboard = false;
        return c;
    };
    WindowTable whole_windows;
    const std::vector<double> whole = train_part(config("whole"), 2, 0, whole_windows);
    WindowTable split_windows;
    train_part(config("split"), 2, 2, split_windows);
    train_part(config("split"), 1, 4, split_windows);
    const std::vector<double> rest = train_part(config("split"), last_n, 0, split_windows);
    ASSERT_EQ(whole.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(rest.size(), 2u) << "the last part trains steps 5 and 6";
    for (size_t g = 0; g < whole_windows.hash.size(); ++g) {
        ASSERT_NE(whole_windows.hash[g], 0.0) << "sample " << g << " was never read";
        EXPECT_EQ(split_windows.hash[g], whole_windows.hash[g])
            << "step " << g / kGlobalBatch + 1 << ", sample " << g % kGlobalBatch << " of the global batch";
    }
    for (size_t i = 0; i < rest.size(); ++i) {
        EXPECT_NEAR(rest[i], whole[4 + i], 1e-6 * std::fabs(whole[4 + i])) << "step " << 5 + i;
    }
    if (test::world_rank() != 0) return;
    const Records a = blend_records(dir.file("whole/metrics.jsonl"));
    const Records b = blend_records(dir.file("split/metrics.jsonl"));
    ASSERT_EQ(a.tokens.size(), static_cast<size_t>(kSteps));
    EXPECT_EQ(a.tokens, b.tokens) << "tokens_by_corpus differs";
    // 0.7 of the 24 windows, within one; every token counted once. (The weights' schedule has
    // period 10, so a cursor restarted at a resume's sample 8 or 16 would show above.)
    const long from_a = a.tokens.back()[dir.file("a_train.bin")].get<long>();
    EXPECT_NEAR(static_cast<double>(from_a), 0.7 * kSteps * kGlobalBatch * 16, 16.0) << a.tokens.back().dump();
    EXPECT_EQ(from_a + a.tokens.back()[dir.file("b_train.bin")].get<long>(), kSteps * kGlobalBatch * 16);
    // The validation windows are split over the data ranks (another world size reads others):
    // each run's val_loss is its corpora's mean under data.val's weights (1:3).
    for (const nlohmann::json& v : {a.last_val, b.last_val}) {
        ASSERT_TRUE(v.is_object()) << "no val record with val_loss_by_corpus";
        const nlohmann::json& by = v["val_loss_by_corpus"];
        const double mean = 0.25 * by[dir.file("a_val.bin")].get<double>() + 0.75 * by[dir.file("b_val.bin")].get<double>();
        EXPECT_NEAR(v["val_loss"].get<double>(), mean, 1e-12) << v.dump();
    }
}

}  // namespace
}  // namespace zt
