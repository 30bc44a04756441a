// Consolidation of a checkpoint written by several ranks: a run at the job's world size
// (2 or 4) and ZeRO stage 1 or 3 leaves shards that split every unit, and tensors that
// straddle a shard boundary; zt-consolidate's library call turns it into .h5 and
// .safetensors files whose every tensor equals the run's gathered final weights exactly
// (read back here with plain HDF5 calls and a safetensors parser of its own).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "export_readers.hpp"
#include "mpi_training.hpp"
#include "test_support.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/ckpt/export.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/train/trainer.hpp"

namespace zt {
namespace {

/// A tensor's live values (ztrain orientation) out of the concatenated unit buffers.
std::vector<float> live_values(const std::vector<float>& all, const ModelLayout& layout, const ParamSpec& p) {
    size_t unit_start = 0;
    for (int u = 0; u < p.unit; ++u) unit_start += layout.unit_numel[static_cast<size_t>(u)];
    const float* w = all.data() + unit_start + p.offset;
    return std::vector<float>(w, w + p.init_numel);
}

class ShardedConsolidation : public ::testing::TestWithParam<int> {};

TEST_P(ShardedConsolidation, EveryTensorEqualsTheGatheredWeights) {
    const int stage = GetParam();
    test::SharedDir dir("consolidate_np");
    if (test::world_rank() == 0) test::write_random_shard(dir.file("train.bin"), 30000, 61);
    MPI_Barrier(MPI_COMM_WORLD);
    Config cfg = test::tiny_mpi_config(dir.file("train.bin"), dir.file("run"));
    cfg.parallel.zero_stage = stage;
    cfg.train.max_steps = 3;
    TrainOptions opt;
    opt.collect_params = true;
    const TrainSummary run = train(cfg, opt);
    MPI_Barrier(MPI_COMM_WORLD);
    if (test::world_rank() != 0) return;

    const std::string ckpt = dir.file("run/checkpoints");
    const std::string step_dir = ckpt + "/" + test::read_file(ckpt + "/latest").substr(0, 13);
    const nlohmann::json meta = read_checkpoint_meta(step_dir);
    const ModelLayout layout = make_model_layout(cfg.model);
    ASSERT_EQ(meta["world_size"].get<int>(), test::world_size());
    ASSERT_EQ(meta["shards"].size(), static_cast<size_t>(test::world_size()));
    // The shards split every unit, and some tensor crosses a shard boundary.
    int straddling = 0;
    for (int u = 0; u < layout.num_units(); ++u) {
        std::vector<size_t> cuts;
        for (const auto& shard : meta["shards"]) {
            for (const auto& r : shard["units"]) {
                if (r["unit"].get<int>() == u && r["begin"].get<size_t>() > 0) cuts.push_back(r["begin"].get<size_t>());
            }
        }
        EXPECT_FALSE(cuts.empty()) << "unit " << u << " is not split across shards";
        for (const ParamSpec& p : layout.params) {
            if (p.unit != u) continue;
            for (size_t c : cuts) straddling += p.offset < c && c < p.offset + p.init_numel;
        }
    }
    EXPECT_GT(straddling, 0);
    ASSERT_EQ(run.final_params.size(), [&] {
        size_t n = 0;
        for (size_t k : layout.unit_numel) n += k;
        return n;
    }());

    const std::string h5 = dir.file("w.h5");
    const std::string st = dir.file("w.safetensors");
    consolidate(ckpt, h5, DType::kF32, false);
    consolidate(step_dir, st, DType::kF32, false);

    const hid_t file = H5Fopen(h5.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    for (const ParamSpec& p : layout.params) {
        std::vector<hsize_t> dims;
        const std::vector<float> got = test::h5_read_floats(file, p.name, dims);
        const std::vector<float> want = live_values(run.final_params, layout, p);
        ASSERT_EQ(got.size(), want.size()) << p.name;
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << "stage " << stage << " "
                                                                                       << p.name << " (.h5)";
    }
    H5Fclose(file);

    const test::SafeTensors parsed = test::parse_safetensors(st);
    ASSERT_TRUE(parsed.header.is_object()) << st;
    const nlohmann::json& header = parsed.header;
    const char* data = parsed.data.data();
    EXPECT_EQ(header.size(), layout.params.size() + 1);  // + __metadata__
    for (const ParamSpec& p : layout.params) {
        const std::string name = "transformer." + p.name;
        ASSERT_TRUE(header.contains(name)) << name;
        const nlohmann::json& e = header[name];
        EXPECT_EQ(e["dtype"], "F32") << name;
        const std::vector<float> want = live_values(run.final_params, layout, p);
        const uint64_t b = e["data_offsets"][0].get<uint64_t>();
        const uint64_t en = e["data_offsets"][1].get<uint64_t>();
        ASSERT_EQ(en - b, want.size() * sizeof(float)) << name;
        ASSERT_LE(en, parsed.data.size()) << name;
        std::vector<float> got(want.size());
        std::memcpy(got.data(), data + b, en - b);
        if (test::is_hf_conv1d(p.name)) {  // Conv1D [in, out]: ztrain's (out, in) transposed
            const size_t out_dim = p.shape[0];
            const size_t in_dim = p.shape[1];
            EXPECT_EQ(e["shape"], nlohmann::json({in_dim, out_dim})) << name;
            for (size_t o = 0; o < out_dim; ++o) {
                for (size_t i = 0; i < in_dim; ++i) {
                    ASSERT_EQ(float_bits(got[i * out_dim + o]), float_bits(want[o * in_dim + i]))
                        << "stage " << stage << " " << name << " [" << i << ", " << o << "]";
                }
            }
        } else {
            EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
                << "stage " << stage << " " << name << " (.safetensors)";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Stages, ShardedConsolidation, ::testing::Values(1, 3),
                         [](const auto& info) { return "stage" + std::to_string(info.param); });

}  // namespace
}  // namespace zt
