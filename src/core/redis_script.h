// The Lua script that decides all the limits of one request inside Redis, atomically, with
// the very arithmetic of the C++ core (see policy.h: every value stays below 2^52, so a Lua
// number computes it exactly). Layout of its KEYS, ARGV and reply: redis_command.h.
//
// Two variants that differ only in where `now` comes from: production reads Redis's clock
// (TIME), so every nginx host sharing the Redis agrees on time; the test variant takes it from
// ARGV, so a test can replay a timeline through the C++ core and Redis alike.
#pragma once
#include <string_view>

namespace rl {

// The script's text: static storage, built at compile time.
std::string_view script_text(bool injected_time) noexcept;

// The SHA-1 Redis names the script by (what SCRIPT LOAD returns): 40 lowercase hex digits,
// NUL-terminated, static storage. Computed on the first call; call it once at startup.
const char* script_sha1(bool injected_time) noexcept;

}  // namespace rl
