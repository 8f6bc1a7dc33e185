// Per-key state: plain data, fixed size, kept in a shared-memory slot or, in Redis, as one
// 24-byte string (three little-endian doubles, exact below 2^53: see wire/lua/00-head.lua).
// The meaning of the three fields depends on the algorithm (see each algorithm's file);
// a zeroed State is a fresh key for every algorithm.
#pragma once
#include <cstdint>

namespace rl {

struct State {
    int64_t a = 0;
    int64_t b = 0;
    int64_t c = 0;
    bool operator==(const State& o) const { return a == o.a && b == o.b && c == o.c; }
};

static_assert(sizeof(State) == 24, "State is kept in fixed-size shared-memory slots");

}  // namespace rl
