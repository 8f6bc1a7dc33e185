// The request to the Redis Lua (RESP, ready to write to the socket) and its reply.
//
// One call decides a batch of groups: a group is one request's checks, all or nothing; the
// groups are decided in order, each seeing what the previous ones admitted (the same key may
// recur across groups). A single request is the batch of one group.
//
//   FCALL <function_name> <nkeys> KEYS[1..nkeys] ARGV[1..3]     (Redis 7+: redis_script.h)
//   EVALSHA <sha1> <nkeys> KEYS[1..nkeys] ARGV[1..3]   (or EVAL <script text> ..., after NOSCRIPT)
//   KEYS     = redis_key(prefix, zone, hash, policy.algo) of every check, the groups' checks
//              back to back (one prefix per call); the keys of one group are distinct
//   ARGV[1]  = "decide" | "refund" | "charge"
//   ARGV[2]  = now in microseconds (decimal) for the test variant; "0", and ignored, in production
//   ARGV[3]  = the checks, binary: little-endian IEEE-754 doubles (every value an integer below
//              2^52, so exact); per group its number of checks n, then n records of 13 (104 bytes)
//              in KEYS order: algo (rl::Algo's value), requests, period_us, burst, refill, token,
//              depth, weight_scale, cost, at, delay_level, max_delay_units (-1: none), block_us
//              (0: none);
//              for algo 6 (concurrency), which has no burst and no `at`: burst = owner, at = seq
//              (RedisCheck; masked to 48 and 52 bits);
//              for algos 3 and 4 (windows), burst is 0, or 1 for a calendar window (calendar.h),
//              whose bounds then replace what windows do not use: refill = win.prev,
//              token = win.start, depth = win.end, delay_level = win.next (computed by nginx
//              from its clock). Redis's clock still decides: a now past win.end (before
//              win.next) or before win.start (from win.prev) moves the windows by one
//              (calendar_shift); a now outside [win.prev, win.next) rejects the check, retry
//              -1 (never), as the C++ core does with such bounds;
//              for refund and charge, which never block, block_us = admitted_at (RedisCheck):
//              when the key was reset (reset_command) at or after it, the check is the key's
//              old life's and changes nothing (it reports as a cost-0 check); 0: not checked
//   (binary because one struct.unpack per check is far cheaper in Lua than twelve tonumber()s;
//   the derived integers come from finish_policy: the script never recomputes a gcd)
//   ARGV[4]  = charge and refund only, optional: the call's id (at most kCallIdMax bytes). Its
//              reply is kept kCallMemoryMs under "<KEYS[1]>:call:<id>" (KEYS[1]'s hash tag, so
//              its cluster slot); a call with the id of one that ran gets that reply and
//              changes nothing: a settle sent again because its reply was lost is applied
//              once (the sync zones' calls do the same: sync_command.h)
//
//   reply: an array of integers
//     {admitted, now_us, then per check (the groups back to back): allowed, remaining,
//      reset_us, retry_after_us or delay_us}
//   allowed is 1 (allowed) or 0 (rejected), or for a check with a block: 2 (rejected by a live
//   block: remaining 0, reset and retry its time left) or 3 (rejected by the limit, which
//   started a block) (Decision::block, block.h).
//   admitted is the number of groups admitted; a group is admitted iff all its checks allowed.
//   The 4th value is, for a rejected check, retry_after_us (-1, kNever, when the cost can never
//   be admitted), for an allowed one delay_us (its wait, delay.h; its retry is 0): one value
//   fewer per check to parse. For one group the reply
//   is {1 if admitted else 0, now_us, ...}.
//
// The lean form of a decide call, for the common batch (write_batch_command sends it when it
// can): every group one check, every check gcra of the same burst, refill, token and depth,
// without delay or block, its cost not kNeedOne. KEYS as above; ARGV[1] = "lean", ARGV[2] as
// above, ARGV[3] = the policy once, burst, refill, token, depth, then each check's cost (4 + n
// doubles). The Lua decides it inline (src/core/wire/lua/13-lean.lua) exactly as `decide`
// would the same batch, reads and writes the same keys and states, and replies as `decide`.
//
// decide: each group decides its checks at the same now; if all allow, each changed state is
// kept and its key set to expire when the state is worth a fresh key's (the TTL of its last
// change); otherwise the group changes nothing and its checks that would have allowed report
// their state as a cost-0 request would (exactly what the shared-memory path does).
//
// Block after abuse (decide, a check with block_us > 0, block.h): its block is the key
// "<check's key>:block" (the same hash tag, so the same cluster slot), a string: the time the
// block ends on Redis's clock (us, decimal), set PX block_ms + 1 (only to be collected). Read
// before the check decides: a live block (until > now) rejects it and changes nothing; a check
// that rejects by itself (pass 1, not when its group is rejected by another check) sets it.
// The time is stored rather than read back by PTTL: exact to the microsecond, and on the
// test variant's clock too. A refund ignores blocks.
//
// refund: undoes, per check, one admission of `cost` made at `at` (rl::refund) and reports
// each check as a cost-0 request after it; a group counts as admitted when all its reports
// allow (a bucket left over-full by a clock that went back reports a cost-0 request as
// rejected). Used when one request's checks went to several calls (Redis Cluster nodes) and
// another call rejected; sent as one group.
//
// charge (settle.h): each check is a group of its own, decided as `decide` does on the debt
// policy it carries (never blocked: block_us 0), and when it is rejected with room for fewer
// units, decided again with what fits; its `at` is the debt_shift added to a token bucket's
// tokens while it is read. The reply is a decide call's.
//
// A cost of -1 (kNeedOne, settle.h) is decided as one unit and, when allowed, reported as a
// cost-0 request (and consumes nothing).
//
// Storage: the gcra, token, leaky, sliding and fixed states are a string of three little-endian
// doubles (a, b, c of rl::State: 24 bytes), read with GET and written with SET ... PX; the log
// is a list of decimal timestamps. A hash {a, b, c} left by an earlier
// version is still read, and replaced at the key's next change.
//
// Concurrency (algo 6; policy: requests = N, period_us = hold): a sorted set, one member per
// slot taken, concurrency_member(owner, seq + i) for slot i of a check of cost n (0 <= i < n:
// the caller's seq advances by the cost), scored by its expiry on Redis's clock (now + hold, us).
// decide counts the members of score > now (ZCOUNT), decides as decide_concurrency on that
// count, and on admission drops the others, adds the slots and sets the key's TTL to the hold
// (ceil ms + 1). A batch (several groups) reads each concurrency key once, counts the slots its
// groups admit on top, and writes each key once at the end of the call (ZREMRANGEBYSCORE, one
// ZADD of all its admitted slots, PEXPIRE): the same decisions. refund removes the check's slots (ZREM), then reports a cost-0 check. N above
// kMaxConcurrency is a bad check. The writers below release and refresh slots without the
// Lua. Its State for the C++ core: a = slots taken.
//
// Writers take a caller's buffer of at least the _len() size (two passes: measure, allocate
// from the request pool, write), or of batch_command_bound's: no heap, no exceptions. They
// return the bytes written.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include "core/algo/decision.h"
#include "core/keys/key_hash.h"
#include "core/algo/policy.h"

namespace rl {

// One limit of a request, as sent to the Lua.
struct RedisCheck {
    std::string_view zone;            // zone name (no braces)
    KeyHash hash;                     // the limit key's hash
    const Policy* policy = nullptr;   // finished; never null
    int64_t cost = 0;                 // clamped to [0, kExact] (beyond any capacity either way), or kNeedOne
    int64_t at = 0;                   // refund only: the decide reply's now_us
    // Refund and charge: Redis's time of the admission they are for (its decide reply's now_us;
    // 0: unknown): dropped when the key was reset since (the key's new life owes nothing of the
    // old one). Not for concurrency slots: their members are the request's own.
    int64_t admitted_at = 0;
    // Concurrency only: who takes the slots, named concurrency_member(owner, seq + i).
    uint64_t owner = 0;               // random per nginx worker, below 2^48
    uint64_t seq = 0;                 // the worker's counter, below 2^52
};

// One request's checks: all or nothing.
struct RedisGroup {
    const RedisCheck* checks;
    size_t n;
};

// How the Lua is called: FCALL of the function library (Redis 7+, loaded by FUNCTION LOAD
// REPLACE function_library_text()); EVALSHA of the script (loaded by SCRIPT LOAD), or EVAL
// with its text after a NOSCRIPT error (which also loads it for the following EVALSHAs).
// Same arguments, same reply. FCALL's NOSCRIPT is "ERR Function not found" (after FUNCTION
// FLUSH, or a restart without persistence): load the library again.
enum class CommandScript : uint8_t { evalsha, eval, fcall };

// FCALL (tests/bench/redis_lua.sh, Redis 7.0): per single-request call, 12-19% less Redis CPU
// than EVALSHA of the same Lua and about a third less time in the command, as EVALSHA builds
// the Lua's functions on every call; 3-4% less in batches of 64. EVALSHA remains for servers
// that answer FUNCTION LOAD with an error (before Redis 7, or without Functions).
constexpr CommandScript kPreferredScript = CommandScript::fcall;

constexpr size_t kArgvCount = 3;          // mode, now, checks (and a charge's or refund's call id)
// A call id (ARGV[4]; sync_command.h's too): cut beyond kCallIdMax bytes; its reply is kept
// kCallMemoryMs, far beyond any resend of the call (a settle's: 500 ms later).
constexpr size_t kCallIdMax = 64;
constexpr int64_t kCallMemoryMs = 10000;
constexpr size_t kGroupBytes = 8;         // a group's number of checks
constexpr size_t kCheckBytes = 8 * 13;    // algo .. weight_scale, cost, at, delay_level, max_delay_units, block_us
constexpr size_t kLeanPolicyBytes = 8 * 4;  // burst, refill, token, depth
constexpr size_t kLeanCheckBytes = 8;       // cost
constexpr size_t kReplyHead = 2;          // admitted, now_us
constexpr size_t kReplyPerCheck = 4;      // allowed, remaining, reset_us, retry_after_us or delay_us

inline size_t decide_reply_len(size_t nchecks) noexcept { return kReplyHead + kReplyPerCheck * nchecks; }

// ---- batches -----------------------------------------------------------------------------

// A decide call of ngroups groups whose keys start with `prefix` (no braces). injected_time
// selects the test variant of the script, which decides at now_us; production passes false
// (now_us is then not sent). BatchForm::best sends the lean form when the batch allows it;
// general never does (the tests compare the two).
enum class BatchForm : uint8_t { best, general };
size_t batch_command_len(CommandScript script, bool injected_time, std::string_view prefix, const RedisGroup* groups,
                         size_t ngroups, int64_t now_us, BatchForm form = BatchForm::best) noexcept;
size_t write_batch_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                           const RedisGroup* groups, size_t ngroups, int64_t now_us,
                           BatchForm form = BatchForm::best) noexcept;

// A cheap upper bound of write_batch_command's production EVALSHA or FCALL (zone names of at
// most kMaxZoneLen bytes): the request path sizes its buffer without measuring exactly.
constexpr size_t kMaxZoneLen = 256;
size_t batch_command_bound(std::string_view prefix, const RedisGroup* groups, size_t ngroups) noexcept;

// The reply's number of integers, and its decoding: out gets one Decision per check, the
// groups back to back (allowed, remaining, reset_us, retry_after_us, delay_us, block; limit and next are left
// as they were: the caller knows the policy); admitted[g] tells whether group g was admitted
// (and so consumed: a check reported allowed in a group that was not admitted consumed
// nothing and must not be refunded); *redis_now the decision time (Redis's clock, the `at` of
// a later refund). admitted and redis_now may be null. Returns false, writing nothing, if the
// reply does not have that shape or its admitted count disagrees with its checks.
size_t batch_reply_len(const RedisGroup* groups, size_t ngroups) noexcept;
bool decode_batch_reply(const int64_t* values, size_t n, const RedisGroup* groups, size_t ngroups, Decision* out,
                        bool* admitted, int64_t* redis_now) noexcept;

// ---- one request: the batch of one group ----------------------------------------------------

size_t decide_command_len(CommandScript script, bool injected_time, std::string_view prefix, const RedisCheck* checks,
                          size_t n, int64_t now_us) noexcept;
size_t write_decide_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                            const RedisCheck* checks, size_t n, int64_t now_us) noexcept;

// A refund call: one group, mode "refund", each check's cost and at. call_id: ARGV[4] (empty:
// none, not sent).
size_t refund_command_len(CommandScript script, bool injected_time, std::string_view prefix, const RedisCheck* checks,
                          size_t n, int64_t now_us, std::string_view call_id = {}) noexcept;
size_t write_refund_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                            const RedisCheck* checks, size_t n, int64_t now_us, std::string_view call_id = {}) noexcept;

// A charge call: n (at most kMaxChargeChecks) checks, each its own group; buf nullptr measures.
// call_id: ARGV[4] (empty: none, not sent).
constexpr size_t kMaxChargeChecks = 64;
size_t charge_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                      const RedisCheck* checks, size_t n, int64_t now_us, std::string_view call_id = {}) noexcept;

// The production refund, EVALSHA or FCALL as the decide call it compensates (which has just
// run there, so the Lua is loaded), or as a settle's.
size_t refund_command_len(std::string_view prefix, const RedisCheck* checks, size_t n,
                          CommandScript script = CommandScript::evalsha, std::string_view call_id = {}) noexcept;
size_t write_refund_command(char* buf, std::string_view prefix, const RedisCheck* checks, size_t n,
                            CommandScript script = CommandScript::evalsha, std::string_view call_id = {}) noexcept;

// ---- concurrency slots without the Lua ------------------------------------------------------
// One check's slots (max(cost, 1) of them, at most kMaxConcurrency), on the key of
// redis_key(prefix, zone, hash, Algo::concurrency): the decide call's key, so its cluster slot.

// Release: ZREM <key> <member>...; reply: an integer, the members removed (0 when they had
// expired).
size_t release_command_len(std::string_view prefix, const RedisCheck& c) noexcept;
size_t write_release_command(char* buf, std::string_view prefix, const RedisCheck& c) noexcept;

// Refresh: ZADD <key> XX <score_us> <member>... then PEXPIRE <key> <ms>, two commands and two
// integer replies (ZADD's 0: XX adds nothing, an expired slot stays gone; PEXPIRE's 1, or 0
// when the key is gone). score_us: the new expiry on Redis's clock (its time last seen in a
// reply + hold); ms = c.policy->period_us rounded up to the ms, plus 1, as the Lua sets it.
size_t refresh_command_len(std::string_view prefix, const RedisCheck& c, int64_t score_us) noexcept;
size_t write_refresh_command(char* buf, std::string_view prefix, const RedisCheck& c, int64_t score_us) noexcept;

// The same for n > 0 checks of one key (checks[0]'s zone and hash): every slot of each in one
// ZREM, or in one ZADD ... XX (then one PEXPIRE of the longest hold). 0 when n is 0.
size_t release_command_len(std::string_view prefix, const RedisCheck* checks, size_t n) noexcept;
size_t write_release_command(char* buf, std::string_view prefix, const RedisCheck* checks, size_t n) noexcept;
size_t refresh_command_len(std::string_view prefix, const RedisCheck* checks, size_t n, int64_t score_us) noexcept;
size_t write_refresh_command(char* buf, std::string_view prefix, const RedisCheck* checks, size_t n,
                             int64_t score_us) noexcept;

// A key's reset (the API's DELETE): the script's mode "reset" (src/core/wire/lua/13-reset.lua)
// deletes every algorithm's key of `hash` in `zone` and its block (redis_key + ":block"), and
// keeps the time of the reset kResetMemoryMs under "<prefix>{<zone>:<hash hex>}:reset" (so that
// the refunds and charges of admissions made before it are dropped: admitted_at), all in one
// hash tag, so one cluster slot. KEYS: the 14 keys, then the marker; ARGV: "reset", now_us (the
// test variant's clock; 0 in production, where Redis's clock decides), the marker's life in ms.
// Writes into buf, or only measures when buf is null; reply: an integer, the keys deleted.
constexpr int64_t kResetMemoryMs = 86400000;
size_t reset_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                     std::string_view zone, const KeyHash& hash, int64_t now_us) noexcept;

// Reads the reply of a one-group call (already parsed into its n integers) into
// out[0..nchecks), as decode_batch_reply does. The call admitted the request iff
// values[0] == 1, which is iff every out[i].allowed.
bool decode_decide_reply(const int64_t* values, size_t n, size_t nchecks, Decision* out, int64_t* redis_now) noexcept;

}  // namespace rl
