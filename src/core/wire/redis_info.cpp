#include "core/wire/redis_info.h"

namespace rl {

std::string_view info_field(std::string_view info, std::string_view field) {
    for (size_t at = 0; at < info.size();) {
        size_t eol = info.find('\n', at);
        std::string_view line = info.substr(at, eol == std::string_view::npos ? std::string_view::npos : eol - at);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.size() > field.size() && line.compare(0, field.size(), field) == 0 && line[field.size()] == ':') {
            return line.substr(field.size() + 1);
        }
        if (eol == std::string_view::npos) break;
        at = eol + 1;
    }
    return {};
}

uint16_t parse_port(std::string_view text) {
    if (text.empty() || text.size() > 5) return 0;
    uint32_t port = 0;
    for (char c : text) {
        if (c < '0' || c > '9') return 0;
        port = port * 10 + static_cast<uint32_t>(c - '0');
    }
    return port >= 1 && port <= 65535 ? static_cast<uint16_t>(port) : 0;
}

}  // namespace rl
