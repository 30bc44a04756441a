#include "ztrain/core/comma_list.hpp"

#include <algorithm>
#include <utility>

namespace zt {

std::vector<std::string> split_comma_list(const std::string& text) {
    std::vector<std::string> items;
    size_t at = 0;
    while (at <= text.size()) {
        const size_t comma = std::min(text.find(',', at), text.size());
        std::string item = text.substr(at, comma - at);
        const size_t first = item.find_first_not_of(" \t");
        item = first == std::string::npos ? std::string() : item.substr(first, item.find_last_not_of(" \t") + 1 - first);
        items.push_back(std::move(item));
        at = comma + 1;
    }
    return items;
}

}  // namespace zt
