// The run directory's reliability parts (issue 34), one process: the directory lock
// (two locks on one directory in one process conflict, as OFD locks do across processes),
// metrics.jsonl superseded past a resumed step, and the input fingerprint's comparison.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "test_support.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/train/input_fingerprint.hpp"
#include "ztrain/train/metrics.hpp"
#include "ztrain/train/run_lock.hpp"

namespace zt {
namespace {

namespace fs = std::filesystem;

TEST(DirectoryLock, SecondLockOnTheSameDirectoryIsRefusedNamingTheHolder) {
    test::ScratchDir dir("lock");
    const std::string run = dir.file("run");
    {
        DirectoryLock first(run, "run.dir", false, nullptr);
        EXPECT_TRUE(fs::exists(first.path()));
        try {
            DirectoryLock second(run, "run.dir", false, nullptr);
            ADD_FAILURE() << "a second lock on " << run << " was granted";
        } catch (const InputError& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find("is in use by another ztrain job (host "), std::string::npos) << msg;
            EXPECT_NE(msg.find(str("PID ", LockHolder::self().pid)), std::string::npos) << msg;
        }
        // --force-unlock does not break a lock held on this host.
        EXPECT_THROW(DirectoryLock(run, "run.dir", true, nullptr), InputError);
    }
    // Released: the file and the directory the lock created are gone, and it can be taken again.
    EXPECT_FALSE(fs::exists(run));
    DirectoryLock again(run, "run.dir", false, nullptr);
}

TEST(DirectoryLock, RecordOfAnotherHostNeedsForceUnlock) {
    test::ScratchDir dir("lock_other");
    const std::string lock_file = dir.file("ztrain.lock");
    test::write_file(lock_file, R"({"host":"elsewhere","pid":7,"slurm_job_id":"","started":"x"})");
    EXPECT_THROW(DirectoryLock(dir.path(), "run.dir", false, nullptr), InputError);
    EXPECT_NE(test::read_file(lock_file).find("elsewhere"), std::string::npos) << "a refusal rewrote the record";
    std::string note;
    {
        DirectoryLock forced(dir.path(), "run.dir", true, &note);
        EXPECT_NE(note.find("broken by --force-unlock"), std::string::npos) << note;
        EXPECT_NE(test::read_file(lock_file).find(LockHolder::self().host), std::string::npos);
    }
    EXPECT_FALSE(fs::exists(lock_file));
    EXPECT_TRUE(fs::exists(dir.path())) << "a directory the lock did not create was removed";
}

TEST(SupersedeMetrics, DropsRecordsPastTheStepAndACutLastLine) {
    test::ScratchDir dir("metrics");
    const std::string path = dir.file("metrics.jsonl");
    test::write_file(path,
                     "{\"event\":\"memory\",\"params\":1}\n"
                     "{\"step\":1,\"loss\":3.0}\n{\"step\":2,\"loss\":2.5}\n{\"step\":2,\"val_loss\":2.6}\n"
                     "{\"event\":\"checkpoint\",\"step\":2}\n{\"step\":3,\"loss\":2.0}\n"
                     "{\"event\":\"checkpoint\",\"step\":4}\n{\"step\":4,\"loss\":1.9}\n{\"step\":5,\"lo");
    const MetricsRepair r = supersede_metrics(path, 2);
    EXPECT_EQ(r.superseded, 3u);
    EXPECT_TRUE(r.cut_line);
    EXPECT_EQ(test::read_file(path),
              "{\"event\":\"memory\",\"params\":1}\n"
              "{\"step\":1,\"loss\":3.0}\n{\"step\":2,\"loss\":2.5}\n{\"step\":2,\"val_loss\":2.6}\n"
              "{\"event\":\"checkpoint\",\"step\":2}\n");
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    // Nothing left to do: the file is not rewritten.
    const auto mtime = fs::last_write_time(path);
    EXPECT_FALSE(supersede_metrics(path, 2).changed());
    EXPECT_EQ(fs::last_write_time(path), mtime);
    // A complete last line that is not JSON counts as cut; a missing file is fine.
    test::write_file(path, "{\"step\":1,\"loss\":3.0}\n{\"step\":2,\"lo}\n");
    EXPECT_TRUE(supersede_metrics(path, 5).cut_line);
    EXPECT_EQ(test::read_file(path), "{\"step\":1,\"loss\":3.0}\n");
    EXPECT_FALSE(supersede_metrics(dir.file("none.jsonl"), 1).changed());
}

TEST(InputFingerprint, NamesEachChangedFile) {
    test::ScratchDir dir("fingerprint");
    test::write_file(dir.file("a.bin"), std::string(3000, 'a'));
    test::write_file(dir.file("b.bin"), std::string(100, 'b'));
    test::write_file(dir.file("tok.json"), "{\"type\":\"byte\"}");
    const nlohmann::json saved = input_fingerprint({dir.file("a.bin"), dir.file("b.bin")}, {}, dir.file("tok.json"));
    EXPECT_TRUE(input_changes(saved, saved).empty());
    EXPECT_TRUE(input_changes(nlohmann::json(), saved).empty()) << "a checkpoint without a fingerprint";

    std::string a(3000, 'a');
    a[2999] = 'z';  // same size, other last bytes
    test::write_file(dir.file("a.bin"), a);
    test::write_file(dir.file("c.bin"), "c");
    test::write_file(dir.file("tok.json"), "{\"type\":\"gpt2\"}");
    const nlohmann::json now = input_fingerprint({dir.file("a.bin"), dir.file("c.bin")}, {}, dir.file("tok.json"));
    std::string all;
    for (const std::string& c : input_changes(saved, now)) all += c + "\n";
    EXPECT_NE(all.find("data.train: a.bin: same size, other content (its first or last MiB differs)"),
              std::string::npos)
        << all;
    EXPECT_NE(all.find("data.train: b.bin is no longer among its files"), std::string::npos) << all;
    EXPECT_NE(all.find("data.train: c.bin is a new file (1 bytes)"), std::string::npos) << all;
    EXPECT_NE(all.find("tokenizer: tok.json -> tok.json: its header differs"), std::string::npos) << all;
}

// A LoRA base's files (a Hugging Face directory's config, weights and index; the rest of the
// directory is not the base), and a change to one of them named apart from the data's.
TEST(InputFingerprint, LoraBaseFilesAndTheirChanges) {
    test::ScratchDir dir("fingerprint_base");
    std::filesystem::create_directories(dir.file("base"));
    test::write_file(dir.file("base/config.json"), "{}");
    test::write_file(dir.file("base/model.safetensors"), std::string(5000, 'w'));
    test::write_file(dir.file("base/README.md"), "not weights");
    const std::vector<std::string> files = lora_base_files(dir.file("base"));
    ASSERT_EQ(files.size(), 2u);
    EXPECT_EQ(std::filesystem::path(files[0]).filename(), "config.json");
    EXPECT_EQ(std::filesystem::path(files[1]).filename(), "model.safetensors");
    EXPECT_EQ(lora_base_files(dir.file("base/model.safetensors")).size(), 1u) << "a single weights file";
    EXPECT_TRUE(lora_base_files("").empty());
    const nlohmann::json saved = input_fingerprint({}, {}, "", {}, {}, files);
    EXPECT_TRUE(base_changes(saved, saved).empty());
    EXPECT_TRUE(base_changes(input_fingerprint({}, {}, ""), saved).empty()) << "a checkpoint recording no base";
    std::string w(5000, 'w');
    w[10] = 'x';
    test::write_file(dir.file("base/model.safetensors"), w);
    const std::vector<std::string> changes = base_changes(saved, input_fingerprint({}, {}, "", {}, {}, files));
    ASSERT_EQ(changes.size(), 1u);
    EXPECT_EQ(changes[0], "model.init_from: model.safetensors: its header differs");
    EXPECT_TRUE(input_changes(saved, input_fingerprint({}, {}, "", {}, {}, files)).empty())
        << "the base is not among the data's changes";
}

}  // namespace
}  // namespace zt
