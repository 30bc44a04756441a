// Asynchronous checkpoints on one rank: a snapshot is the state at capture, whatever the
// state does afterwards; the background writer holds a write in flight until it is
// collected and hands its failure (a real full file system) to the collector; the write
// from a snapshot produces the same files a synchronous save does. Pacing: the sleep
// arithmetic and the saver's target; a paced write ends its pacing once hurried (collect,
// the destructor) and still publishes a checkpoint that loads.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "test_support.hpp"
#include "ztrain/ckpt/background_writer.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/ckpt/write_pacer.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/train/checkpoint_saver.hpp"
#include "model_state_access.hpp"

namespace fs = std::filesystem;

namespace zt {
namespace {

/// Master, m and v of every owned element set from `salt`, so states are told apart.
void fill_state(ModelState& s, float salt) {
    for (int u = 0; u < s.layout().num_units(); ++u) {
        for (size_t e = s.shards().owned_begin(u); e < s.shards().owned_end(u); ++e) {
            s.shards().master_base(u)[e] = salt + static_cast<float>(u) + static_cast<float>(e) * 1e-3f;
            s.shards().adam_m_base(u)[e] = -salt - static_cast<float>(e);
            s.shards().adam_v_base(u)[e] = 2 * salt + static_cast<float>(e);
        }
    }
}

CheckpointRecord record_at(long step) {
    CheckpointRecord r;
    r.dtype = "fp32";
    r.seed = 5;
    r.progress.step = step;
    r.progress.applied_steps = step;
    return r;
}

struct AsyncFixture {
    ModelConfig mc = test::model_config(2, 2, 16, 8, 40);
    ModelLayout layout = make_model_layout(mc);
    std::unique_ptr<Backend> backend = make_cpu_backend(1);
    test::ScratchDir dir{"async"};
};

TEST(CheckpointSnapshot, HoldsTheStateAtCaptureAndWritesWhatASyncSaveWrites) {
    AsyncFixture f;
    for (int stage : {0, 3}) {
        ModelState state(f.layout, *f.backend, self_communicator(), StateOptions::zero(stage).with_seed(1));
        fill_state(state, 3.f);
        const std::vector<float> at_capture = ModelStateTestAccess::owned_optimizer_state(state);
        CheckpointSnapshot snap(state);
        EXPECT_EQ(snap.bytes(), CheckpointSnapshot::planned_bytes(state.shard_plan(), 0));
        // 12 bytes per owned element, each of the 3 x units blocks rounded up to 4 KiB pages.
        EXPECT_GE(snap.bytes(), at_capture.size() * sizeof(float));
        EXPECT_LT(snap.bytes(), at_capture.size() * sizeof(float) + 3 * f.layout.unit_numel.size() * 4096);
        snap.capture(state, record_at(4));
        fill_state(state, 9.f);  // training goes on
        const std::string ckpt = f.dir.file("snap" + std::to_string(stage));
        const CheckpointWriteReport report = write_checkpoint(ckpt, snap, self_communicator(), 2);
        EXPECT_EQ(fs::path(report.dir).filename(), "step_00000004");
        EXPECT_GT(report.bytes, at_capture.size() * sizeof(float)) << "shards + meta.h5";
        ModelState loaded(f.layout, *f.backend, self_communicator(), StateOptions::zero(stage).with_seed(2));
        load_checkpoint(report.dir, loaded, self_communicator());
        const std::vector<float> got = ModelStateTestAccess::owned_optimizer_state(loaded);
        ASSERT_EQ(got.size(), at_capture.size());
        for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(got[i], at_capture[i]) << "stage " << stage << ": element " << i
                                             << " is not the value at capture";
        }
        // The same state saved synchronously: the shard files are byte-identical.
        fill_state(state, 3.f);
        const std::string sync_ckpt = f.dir.file("sync" + std::to_string(stage));
        const std::string sync_dir = save_checkpoint(sync_ckpt, state, self_communicator(), record_at(4), 2);
        const std::string shard = "shard_00000_of_00001.h5";
        EXPECT_EQ(file_hash64(report.dir + "/" + shard), file_hash64(sync_dir + "/" + shard))
            << "stage " << stage << ": the snapshot's shard differs from the synchronous save's";
    }
}

TEST(BackgroundWriter, ASlowWriteStaysInFlightUntilCollected) {
    BackgroundWriter writer;
    EXPECT_FALSE(writer.in_flight());
    const auto t0 = std::chrono::steady_clock::now();
    writer.start([](WritePacer&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a slow file system
        CheckpointWriteReport r;
        r.dir = "written";
        r.bytes = 42;
        return r;
    });
    EXPECT_TRUE(writer.in_flight());
    EXPECT_TRUE(writer.running()) << "the 300 ms write cannot have finished already";
    EXPECT_THROW(writer.start([](WritePacer&) { return CheckpointWriteReport{}; }), Error) << "one write at a time";
    const CheckpointWriteReport r = writer.collect();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(waited, 0.3) << "collect returned before the write finished";
    EXPECT_EQ(r.dir, "written");
    EXPECT_EQ(r.bytes, 42u);
    EXPECT_FALSE(writer.in_flight());
    EXPECT_FALSE(writer.running());
}

TEST(BackgroundWriter, ADiskFullWriteFailsAtCollectAndThePreviousCheckpointStillLoads) {
    AsyncFixture f;
    f.mc = test::model_config(2, 2, 64, 8, 40);  // ~1.3 MB per checkpoint: well above the save's slack
    f.layout = make_model_layout(f.mc);
    // A real full disk: a tmpfs that holds one checkpoint of this model but not two.
    const std::string mnt = f.dir.file("tmpfs");
    fs::create_directories(mnt);
    ModelState state(f.layout, *f.backend, self_communicator(), StateOptions::zero(0).with_seed(1));
    const size_t one = CheckpointSnapshot::planned_bytes(state.shard_plan(), 0);
    const std::string size = "size=" + std::to_string((one * 3 / 2 + (300u << 10)) / 4096 * 4096);
    if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, size.c_str()) != 0) {
        GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << std::strerror(errno);
    }
    struct Unmount {
        std::string path;
        ~Unmount() { ::umount(path.c_str()); }
    } unmount{mnt};
    const std::string ckpt = mnt + "/ckpt";
    fill_state(state, 3.f);
    const std::vector<float> first = ModelStateTestAccess::owned_optimizer_state(state);
    CheckpointSnapshot snap(state);
    BackgroundWriter writer;
    snap.capture(state, record_at(2));
    writer.start([&](WritePacer& pacer) { return write_checkpoint(ckpt, snap, self_communicator(), 2, &pacer); });
    EXPECT_EQ(fs::path(writer.collect().dir).filename(), "step_00000002");
    fill_state(state, 7.f);
    snap.capture(state, record_at(4));
    writer.start([&](WritePacer& pacer) { return write_checkpoint(ckpt, snap, self_communicator(), 2, &pacer); });
    try {
        writer.collect();
        FAIL() << "a write larger than the free space succeeded";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("step_00000004.partial/shard_00000_of_00001.h5"), std::string::npos) << msg;
        EXPECT_NE(msg.find("disk full"), std::string::npos) << msg;
    }
    EXPECT_FALSE(writer.in_flight());
    EXPECT_EQ(resolve_resume("auto", ckpt), ckpt + "/step_00000002");
    ModelState loaded(f.layout, *f.backend, self_communicator(), StateOptions::zero(0).with_seed(2));
    load_checkpoint(ckpt + "/step_00000002", loaded, self_communicator());
    EXPECT_EQ(ModelStateTestAccess::owned_optimizer_state(loaded), first);
}

TEST(WritePacer, SleepsWhileTheBytesDoneAreAheadOfAnEvenSpread) {
    // 10 s for 1000 bytes: 100 bytes are due after 1 s.
    EXPECT_DOUBLE_EQ(pace_sleep_s(100, 1000, 0.0, 10.0), 1.0) << "ahead by the whole first tenth";
    EXPECT_DOUBLE_EQ(pace_sleep_s(100, 1000, 0.25, 10.0), 0.75);
    EXPECT_DOUBLE_EQ(pace_sleep_s(500, 1000, 2.0, 10.0), 3.0);
    EXPECT_DOUBLE_EQ(pace_sleep_s(100, 1000, 1.0, 10.0), 0.0) << "exactly on pace";
    EXPECT_DOUBLE_EQ(pace_sleep_s(100, 1000, 4.0, 10.0), 0.0) << "behind the pace: no sleep, no catching up later";
    EXPECT_DOUBLE_EQ(pace_sleep_s(1000, 1000, 9.5, 10.0), 0.5) << "the last piece waits for the target";
    EXPECT_DOUBLE_EQ(pace_sleep_s(1000, 1000, 12.0, 10.0), 0.0);
    EXPECT_DOUBLE_EQ(pace_sleep_s(2000, 1000, 9.0, 10.0), 1.0) << "done beyond total counts as total";
    EXPECT_DOUBLE_EQ(pace_sleep_s(0, 1000, 0.0, 10.0), 0.0) << "nothing done yet";
    // Not paced.
    EXPECT_DOUBLE_EQ(pace_sleep_s(100, 1000, 0.0, 0.0), 0.0);
    EXPECT_DOUBLE_EQ(pace_sleep_s(100, 1000, 0.0, -1.0), 0.0);
    EXPECT_DOUBLE_EQ(pace_sleep_s(0, 0, 0.0, 10.0), 0.0) << "no bytes to spread";
    // A realistic write: 742 MB over 2.75 s, 16 MiB done after 10 ms.
    const uint64_t total = 742u << 20;
    EXPECT_NEAR(pace_sleep_s(16u << 20, total, 0.01, 2.75), 2.75 * 16.0 / 742.0 - 0.01, 1e-12);
}

TEST(WritePacer, AnUnpacedOrHurriedPacerNeverSleeps) {
    WritePacer unpaced;
    const auto t0 = std::chrono::steady_clock::now();
    unpaced.pace(1, 1000);
    WritePacer hurried(3600);
    hurried.hurry();
    EXPECT_TRUE(hurried.hurried());
    hurried.pace(1, 2);  // half of an hour's target, at once: would sleep 30 minutes
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
    EXPECT_EQ(unpaced.slept_s(), 0.0);
    EXPECT_EQ(hurried.slept_s(), 0.0);
    EXPECT_EQ(hurried.target_s(), 3600.0);
    // Cut short: a hurry while the write is still paced, not one after its paced part or
    // of an unpaced write.
    EXPECT_TRUE(hurried.cut_short());
    unpaced.hurry();
    EXPECT_FALSE(unpaced.cut_short());
    WritePacer done_first(3600);
    done_first.end();
    done_first.hurry();
    EXPECT_TRUE(done_first.hurried());
    EXPECT_FALSE(done_first.cut_short());
}

TEST(CheckpointSaver, PacesOverTheSpreadOfTheStepsUntilItNextWaits) {
    // spread x steps to the next periodic save x step time.
    EXPECT_DOUBLE_EQ(async_pace_target_s(0.5, 10, 10, 1000, 0.5), 0.5 * 10 * 0.5);
    EXPECT_DOUBLE_EQ(async_pace_target_s(0.25, 200, 100, 1000, 2.0), 0.25 * 100 * 2.0);
    // A stop-signal save between periodic ones: to the next multiple of every.
    EXPECT_DOUBLE_EQ(async_pace_target_s(0.5, 13, 10, 1000, 1.0), 0.5 * 7 * 1.0);
    // The end of training comes first: it waits for the write too.
    EXPECT_DOUBLE_EQ(async_pace_target_s(0.5, 95, 10, 98, 1.0), 0.5 * 3 * 1.0);
    // No periodic saves: the end of training.
    EXPECT_DOUBLE_EQ(async_pace_target_s(0.5, 40, 0, 100, 1.0), 0.5 * 60 * 1.0);
    // Not paced: the last save, spread 0, no step time yet.
    EXPECT_EQ(async_pace_target_s(0.5, 100, 10, 100, 1.0), 0.0);
    EXPECT_EQ(async_pace_target_s(0.0, 10, 10, 1000, 1.0), 0.0);
    EXPECT_EQ(async_pace_target_s(0.5, 10, 10, 1000, 0.0), 0.0);
    // The step time is the median of the recent ones: a slow evaluation step does not move it.
    EXPECT_EQ(median_of({}), 0.0);
    EXPECT_EQ(median_of({0.5, 0.6, 9.0}), 0.6);
    EXPECT_EQ(median_of({0.7, 0.5, 0.6, 30.0, 0.55}), 0.6);
}

TEST(BackgroundWriter, AHurriedWriteDropsItsPacingAndStillPublishes) {
    AsyncFixture f;
    f.mc = test::model_config(2, 2, 64, 8, 40);  // datasets of 64 KiB and more: written (and paced) in pieces
    f.layout = make_model_layout(f.mc);
    ModelState state(f.layout, *f.backend, self_communicator(), StateOptions::zero(0).with_seed(1));
    fill_state(state, 3.f);
    const std::vector<float> saved = ModelStateTestAccess::owned_optimizer_state(state);
    CheckpointSnapshot snap(state);
    snap.capture(state, record_at(6));
    const std::string ckpt = f.dir.file("paced");
    const double hour = 3600;
    auto job = [&](WritePacer& pacer) { return write_checkpoint(ckpt, snap, self_communicator(), 3, &pacer); };
    {
        BackgroundWriter writer;
        writer.start(job, hour);
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        EXPECT_TRUE(writer.running()) << "a write paced over an hour ended within 300 ms: not paced";
        const auto t0 = std::chrono::steady_clock::now();
        const CheckpointWriteReport r = writer.collect();  // waits: hurries it
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_LT(waited, 60.0) << "collect did not end the pacing";
        EXPECT_TRUE(r.hurried);
        EXPECT_EQ(r.pace_target_s, hour);
        EXPECT_GT(r.paced_s, 0.0) << "it slept before the hurry";
        EXPECT_LT(r.paced_s, 60.0);
        EXPECT_EQ(fs::path(r.dir).filename(), "step_00000006");
    }
    {
        // An error unwinding past the writer (its destructor) hurries it too.
        fill_state(state, 5.f);
        snap.capture(state, record_at(8));
        const auto t0 = std::chrono::steady_clock::now();
        {
            BackgroundWriter writer;
            writer.start(job, hour);
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0)
            << "the destructor did not end the pacing";
        EXPECT_EQ(resolve_resume("auto", ckpt), ckpt + "/step_00000008") << "the hurried write was published";
    }
    // Unpaced, the same write reports no pacing.
    snap.capture(state, record_at(10));
    BackgroundWriter writer;
    writer.start(job);
    const CheckpointWriteReport r = writer.collect();
    EXPECT_EQ(r.pace_target_s, 0.0);
    EXPECT_EQ(r.paced_s, 0.0);
    EXPECT_FALSE(r.hurried) << "collect waits for every write, but only a paced one is cut short";
    // What the hurried write published loads, and is the state at its capture.
    ModelState loaded(f.layout, *f.backend, self_communicator(), StateOptions::zero(0).with_seed(2));
    load_checkpoint(ckpt + "/step_00000006", loaded, self_communicator());
    EXPECT_EQ(ModelStateTestAccess::owned_optimizer_state(loaded), saved);
}

}  // namespace
}  // namespace zt
