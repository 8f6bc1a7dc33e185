// SHA-1 (FIPS 180-4): Redis names a loaded script by the SHA-1 of its text, so the client can
// send EVALSHA before any SCRIPT LOAD reply has come back. Not used for anything secret.
#pragma once
#include <cstddef>
#include <cstdint>

namespace rl {

constexpr size_t kSha1Bytes = 20;
constexpr size_t kSha1HexLen = 40;

void sha1(const void* data, size_t len, uint8_t out[kSha1Bytes]);

// 40 lowercase hex digits, as SCRIPT LOAD returns them, then a NUL.
void sha1_hex(const void* data, size_t len, char out[kSha1HexLen + 1]);

}  // namespace rl
