#include "core/algo/algorithm.h"

namespace rl {

namespace {

// Indexed by the enum's value, which is part of the shared-memory format.
constexpr std::string_view kNames[kAlgoCount + 1] = {"gcra", "token", "leaky", "sliding", "fixed", "log", "concurrency"};

}  // namespace

bool parse_algo(std::string_view name, Algo& out) {
    for (int i = 0; i < kAlgoCount; i++) {
        if (name == kNames[i]) {
            out = static_cast<Algo>(i);
            return true;
        }
    }
    return false;
}

std::string_view algo_name(Algo a) {
    auto i = static_cast<unsigned>(a);
    return i <= static_cast<unsigned>(kAlgoCount) ? kNames[i] : std::string_view("unknown");
}

}  // namespace rl
