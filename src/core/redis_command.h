// The request to the Redis script (RESP, ready to write to the socket) and its reply.
//
//   EVALSHA <sha1> <n> KEYS[1..n] ARGV...     (or EVAL <script text> ..., after NOSCRIPT)
//   KEYS[i]  = redis_key(prefix, zone, hash, policy.algo) of check i (one prefix per call)
//   ARGV[1]  = "decide" | "refund"
//   ARGV[2]  = now in microseconds for the test variant; "0", and ignored, in production
//   ARGV[3 + 10*(i-1) ..] = check i: algo (rl::Algo's value), requests, period_us, burst,
//              refill, token, depth, weight_scale, cost, at
//   (the derived integers come from finish_policy: the script never recomputes a gcd)
//
//   reply: an array of integers
//     {all_allowed, now_us, then per check: allowed, remaining, reset_us, retry_after_us}
//   retry_after_us is -1 (kNever) when the cost can never be admitted.
//
// decide: every check is decided at the same now; if all allow, each changed state is written
// and its key set to expire when the state is worth a fresh key's; otherwise nothing is
// written and the checks that would have allowed report their state as a cost-0 request
// would (exactly what the shared-memory path does). The keys of one call must be distinct.
//
// refund: undoes, per check, one admission of `cost` made at `at` (rl::refund) and reports
// each check as a cost-0 request after it; all_allowed is the AND of those reports (a bucket
// left over-full by a clock that went back reports a cost-0 request as rejected). Used when
// one request's checks went to several calls (Redis Cluster nodes) and another call rejected.
//
// Writers take a caller's buffer of exactly the _len() size (two passes: measure, allocate
// from the request pool, write): no heap, no exceptions.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include "decision.h"
#include "key_hash.h"
#include "policy.h"

namespace rl {

// One limit of a request, as sent to the script.
struct RedisCheck {
    std::string_view zone;            // zone name (no braces)
    KeyHash hash;                     // the limit key's hash
    const Policy* policy = nullptr;   // finished; never null
    int64_t cost = 0;                 // clamped to [0, kExact]: beyond any capacity either way
    int64_t at = 0;                   // refund only: the decide reply's now_us
};

// How the script is named: EVALSHA, or EVAL with its text after a NOSCRIPT error (which also
// loads it for the following EVALSHAs).
enum class CommandScript : uint8_t { evalsha, eval };

constexpr size_t kArgvHead = 2;       // mode, now
constexpr size_t kArgvPerCheck = 10;  // algo .. weight_scale, cost, at
constexpr size_t kReplyHead = 2;      // all_allowed, now_us
constexpr size_t kReplyPerCheck = 4;  // allowed, remaining, reset_us, retry_after_us

inline size_t decide_reply_len(size_t nchecks) noexcept { return kReplyHead + kReplyPerCheck * nchecks; }

// A decide call of n checks whose keys start with `prefix` (no braces). injected_time selects
// the test variant of the script, which decides at now_us; production passes false (now_us
// is then not sent).
size_t decide_command_len(CommandScript script, bool injected_time, std::string_view prefix, const RedisCheck* checks,
                          size_t n, int64_t now_us) noexcept;
size_t write_decide_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                            const RedisCheck* checks, size_t n, int64_t now_us) noexcept;

// A refund call: the same shape, mode "refund", each check's cost and at.
size_t refund_command_len(CommandScript script, bool injected_time, std::string_view prefix, const RedisCheck* checks,
                          size_t n, int64_t now_us) noexcept;
size_t write_refund_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                            const RedisCheck* checks, size_t n, int64_t now_us) noexcept;

// The production refund: EVALSHA of the production script (the decide call it compensates
// has just run there, so the script is loaded).
size_t refund_command_len(std::string_view prefix, const RedisCheck* checks, size_t n) noexcept;
size_t write_refund_command(char* buf, std::string_view prefix, const RedisCheck* checks, size_t n) noexcept;

// Reads the reply (already parsed into its n integers) into out[0..nchecks): allowed,
// remaining, reset_us and retry_after_us; limit and next are left as they were (the caller
// knows the policy). *redis_now gets now_us: Redis's clock, the `at` of a later refund.
// Returns false, writing nothing, if the reply does not have that shape.
//
// The call admitted the request iff values[0] == 1, which is iff every out[i].allowed. Then,
// and only then, the call consumed: a check reported allowed in a call that something else
// rejected consumed nothing and must not be refunded.
bool decode_decide_reply(const int64_t* values, size_t n, size_t nchecks, Decision* out, int64_t* redis_now) noexcept;

}  // namespace rl
