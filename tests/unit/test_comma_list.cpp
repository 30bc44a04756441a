// split_comma_list: the one reading of comma-separated values (lora.targets and PEFT's
// target_modules, parallel.pipeline_layers, data.blend, --tasks).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ztrain/core/comma_list.hpp"

namespace zt {
namespace {

using List = std::vector<std::string>;

TEST(CommaList, ItemsAreTrimmedOfBlanks) {
    EXPECT_EQ(split_comma_list("c_attn, c_fc ,\tc_proj"), (List{"c_attn", "c_fc", "c_proj"}));
    EXPECT_EQ(split_comma_list("one"), (List{"one"}));
}

TEST(CommaList, EmptyItemsStaySoCallersCanNameThem) {
    EXPECT_EQ(split_comma_list(""), (List{""}));
    EXPECT_EQ(split_comma_list("a,,b"), (List{"a", "", "b"}));
    EXPECT_EQ(split_comma_list("a, "), (List{"a", ""}));
    EXPECT_EQ(split_comma_list(" , "), (List{"", ""}));
}

}  // namespace
}  // namespace zt
