// TensorBoard event files: CRC-32C against its published check value, the record framing,
// the Event encoding byte by byte, and the tags of each kind of metrics record.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ztrain/core/crc32c.hpp"
#include "ztrain/train/tensorboard.hpp"

namespace {

TEST(Crc32c, PublishedCheckValue) {
    const std::string s = "123456789";
    EXPECT_EQ(zt::crc32c(s.data(), s.size()), 0xE3069283u);
    EXPECT_EQ(zt::crc32c_portable(s.data(), s.size()), 0xE3069283u);
    EXPECT_EQ(zt::crc32c(nullptr, 0), 0u);
    // 32 bytes of zeros: RFC 3720 (iSCSI) B.4's first example.
    const std::vector<unsigned char> zeros(32, 0);
    EXPECT_EQ(zt::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
}

TEST(Crc32c, InstructionAndTableAgreeAtEveryLengthAndOffset) {
    std::mt19937 rng(7);
    std::vector<unsigned char> buf(300);
    for (auto& b : buf) b = static_cast<unsigned char>(rng());
    for (size_t off = 0; off < 9; ++off) {
        for (size_t n = 0; n + off <= buf.size(); n += 7) {
            ASSERT_EQ(zt::crc32c(buf.data() + off, n), zt::crc32c_portable(buf.data() + off, n))
                << "offset " << off << ", " << n << " bytes";
        }
    }
    // Continuing from a partial CRC gives the CRC of the whole.
    EXPECT_EQ(zt::crc32c(buf.data() + 100, 200, zt::crc32c(buf.data(), 100)), zt::crc32c(buf.data(), 300));
}

TEST(TensorBoard, RecordFramingHasLengthAndBothMaskedCrcs) {
    const std::string payload = "an event";
    const std::string r = zt::tensorboard_record(payload);
    ASSERT_EQ(r.size(), 8 + 4 + payload.size() + 4);
    uint64_t len = 0;
    for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(static_cast<unsigned char>(r[i])) << (8 * i);
    EXPECT_EQ(len, payload.size());
    auto u32 = [&](size_t at) {
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(r[at + i])) << (8 * i);
        return v;
    };
    EXPECT_EQ(u32(8), zt::masked_crc32c(r.data(), 8));
    EXPECT_EQ(r.substr(12, payload.size()), payload);
    EXPECT_EQ(u32(12 + payload.size()), zt::masked_crc32c(payload.data(), payload.size()));
    const uint32_t c = zt::crc32c(payload.data(), payload.size());
    EXPECT_EQ(zt::masked_crc32c(payload.data(), payload.size()), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, ScalarEventBytesAreTheProtobufEncoding) {
    // Event{wall_time: 1.0, step: 300, summary{value{tag: "a", simple_value: 2.0}}}, encoded by hand.
    const std::string got = zt::tensorboard_scalar_event(1.0, 300, {{"a", 2.0}});
    const std::vector<unsigned char> want = {
        0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f,  // 1: double 1.0
        0x10, 0xac, 0x02,                    // 2: varint 300
        0x2a, 0x0a,                          // 5: Summary, 10 bytes
        0x0a, 0x08,                          //   1: Value, 8 bytes
        0x0a, 0x01, 'a',                     //     1: tag "a"
        0x15, 0, 0, 0, 0x40};                //     2: float 2.0
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(static_cast<unsigned char>(got[i]), want[i]) << "byte " << i;
    }
}

TEST(TensorBoard, RecordsAreTaggedByGroup) {
    auto tags = [](const nlohmann::ordered_json& rec) {
        std::string s;
        for (const zt::TensorBoardScalar& x : zt::tensorboard_scalars(rec)) s += x.tag + "=" + std::to_string(x.value) + " ";
        return s;
    };
    EXPECT_EQ(tags({{"step", 3}, {"loss", 1.5}, {"grad_norm", nullptr}, {"skipped", true},
                    {"comm_bytes", {{"all_reduce", 8}, {"intra", {{"all_gather", 4}}}}}}),
              "train/loss=1.500000 train/skipped=1.000000 train/comm_bytes/all_reduce=8.000000 "
              "train/comm_bytes/intra/all_gather=4.000000 ");
    EXPECT_EQ(tags({{"step", 3}, {"val_loss", 2.0}}), "val/loss=2.000000 ");
    EXPECT_EQ(tags({{"event", "memory"}, {"params", 10}, {"dtype", "bf16"}}), "memory/params=10.000000 ");
    EXPECT_EQ(tags({{"event", "eval"}, {"step", 5}, {"task", "hellaswag"}, {"acc_norm", 0.25}}),
              "eval/hellaswag/acc_norm=0.250000 ");
    EXPECT_EQ(tags({{"step", 3}, {"sample", "text"}}), "");
}

}  // namespace
