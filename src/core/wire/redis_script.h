// The Lua that decides all the limits of one request inside Redis, atomically, with the very
// arithmetic of the C++ core (see policy.h: every value stays below 2^52, so a Lua number
// computes it exactly). Layout of its KEYS, ARGV and reply: redis_command.h.
//
// One source, sent two ways with the same arguments and reply:
//  - a Redis Function library (Redis 7+): FUNCTION LOAD REPLACE <library text> once per
//    connection, then FCALL <function_name> ...; its functions are built once, at load;
//  - an EVAL script, for servers without Functions: SCRIPT LOAD <script text>, then
//    EVALSHA <sha1> ... (or EVAL <text> ... after NOSCRIPT).
//
// Two variants of each that differ only in where `now` comes from: production reads Redis's
// clock (TIME), so every nginx host sharing the Redis agrees on time; the test variant takes
// it from ARGV, so a test can replay a timeline through the C++ core and Redis alike.
#pragma once
#include <cstddef>
#include <string_view>

namespace rl {

// The script's text: static storage, built at compile time.
std::string_view script_text(bool injected_time) noexcept;

// The SHA-1 Redis names the script by (what SCRIPT LOAD returns): 40 lowercase hex digits,
// NUL-terminated, static storage. Computed on the first call; call it once at startup.
const char* script_sha1(bool injected_time) noexcept;

// The library's name and its one function's, "ratelimit_" and 16 hex digits of a hash of the
// library: a new version is a new library beside the old one, so nginx hosts of two versions
// sharing a Redis never replace each other's (an old library stays until FUNCTION DELETE).
constexpr char kFunctionNamePrefix[] = "ratelimit_";
constexpr size_t kFunctionHashLen = 16;
constexpr size_t kFunctionNameLen = sizeof(kFunctionNamePrefix) - 1 + kFunctionHashLen;

// The library's source, "#!lua name=<function_name>\n..." (what FUNCTION LOAD takes), and the
// name FCALL calls: static storage, NUL-terminated, built on the first call (call them once
// at startup).
std::string_view function_library_text(bool injected_time = false) noexcept;
const char* function_name(bool injected_time = false) noexcept;

}  // namespace rl
