// Comma-separated values (lora.targets, parallel.pipeline_layers, data.blend, --tasks).
#pragma once

#include <string>
#include <vector>

namespace zt {

/// The items of `text` between commas, each without leading and trailing blanks; an empty
/// item stays (callers name it in their messages), and "" is one empty item.
std::vector<std::string> split_comma_list(const std::string& text);

}  // namespace zt
