// The Redis script's checks argument packs its numbers as little-endian IEEE-754 doubles; the
// tests build their expectations with this, independently of the writer in src/core.
#pragma once
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

namespace rltest {

inline std::string doubles(std::initializer_list<double> vs) {
    std::string out;
    for (double v : vs) {
        uint64_t u;
        std::memcpy(&u, &v, sizeof u);
        for (size_t b = 0; b < 8; b++) out.push_back(static_cast<char>((u >> (8 * b)) & 0xff));
    }
    return out;
}

}  // namespace rltest
