// The sync zones' calls to the Redis Lua (RESP, ready to write to the socket) and their
// replies: the same function library / script as redis_command.h, modes "sync" and "hosts".
//
//   sync:  FCALL|EVALSHA|EVAL ... <n> KEYS[1..n] "sync" <now> <items> <call id>
//     KEYS   = redis_key(prefix, zone, hash, algo) of every item (the per-request zone's key:
//              one global state, one format); a key appears at most once per call
//     ARGV[2] = now in microseconds for the test variant; "0", and ignored, in production
//     ARGV[3] = per item 17 little-endian doubles (136 bytes) in KEYS order: algo, requests,
//              period_us, burst, refill, token, depth, weight_scale (as redis_command.h), then
//              delta.units, delta.prev, delta.at, want, need, hosts, give_back, give_back_at,
//              give_back_top, then the ShareAsk: epoch_us, demand, rate[0..1], burst[0..1],
//              back_at, back_rate[0..1], back_burst[0..1] (28 doubles, 224 bytes)
//     ARGV[4] = the call's id (at most kSyncCallIdMax bytes; empty: none). The reply is kept
//              kSyncCallMemoryMs under "<KEYS[1]>:call:<id>" (the first key's slot); a call
//              with the id of one that ran gets that reply and changes nothing: a call sent
//              again because its reply was lost is applied once.
//     reply  = {now_us, then per item: a, b, c (the global state after the item), granted,
//              retry_after_us, then the ShareGrant: epoch_at, rate[0..1], burst[0..1]}
//   The count form of a sync call (write_sync_command sends it when it can, as redis_command.h
//   its lean form): every item a count ask (want == need, no delta, nothing given back, no
//   share asked or given back: a cold key's requests, sync.h) of one gcra policy. ARGV[1] =
//   "count", ARGV[2] and ARGV[4] as above, ARGV[3] = the policy's 8 doubles once, then each
//   item's need (8 + n doubles). hosts and the times of an empty delta or give-back decide
//   nothing then. The Lua decides each item exactly as sync_key (lua/13-sync.lua: inline, a
//   value holding a book of shares through the general item code), writes the same states with
//   the same TTLs, and keeps the reply under the call id as a sync call. Its reply has no
//   ShareGrant (a count ask is granted none): {now_us, then per item a, b, c, granted,
//   retry_after_us}.
//     A bucket key holding shares keeps its book after its state: 12 doubles (96 bytes).
//   Per item, at Redis's now (sync_key, which the Lua mirrors): give_back, apply_delta of the
//   delta clamped to Redis's clock (clamp_delta), grant;
//   the state is written once (SET ... PX, the TTL of the grant's decision, as decide's),
//   and not at all when nothing changed. `log` is refused (bad item).
//
//   hosts: ... 1 KEYS[1] = hosts_key(prefix, zone) "hosts" <now> <window_us> <host_id>
//     ZADD host_id now; members older than now - window dropped; the key expires after two
//     windows without a heartbeat. reply = the number of hosts (an integer).
//
// Writers take a buffer of at least the _len() size (or sync_command_bound's): no heap, no
// exceptions; they return the bytes written.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include "core/keys/key_hash.h"
#include "core/wire/redis_command.h"
#include "core/reconcile/share.h"
#include "core/reconcile/sync.h"

namespace rl {

struct SyncItem {                     // one key in a sync call
    std::string_view zone;
    KeyHash hash;
    const Policy* policy = nullptr;   // finished; never null; not Algo::log
    Delta delta;                      // optimistic: what this host admitted since its last send
    int64_t want = 0, need = 0;       // lease: units asked, of which `need` a request waits for
    int64_t hosts = 1;                // lease: hosts seen (fair share)
    int64_t give_back = 0;            // lease: unspent units returned (a Lease's units) ...
    int64_t give_back_at = 0;         // ... its `at`
    int64_t give_back_top = 0;        // ... its `top` (buckets)
    ShareAsk share;                   // lease on a bucket: shares asked and given back (share.h)
};

struct SyncResult {
    State global;                // the key's global state after the item
    int64_t granted = 0;
    int64_t retry_after_us = 0;  // need > 0 and nothing granted: when it would fit (kNever: never)
    ShareGrant share;            // lease on a bucket: the shares granted
};

// What the Lua does for one item at `now`: give_back, apply_delta, grant. *decision (may be
// null) is the grant's decision, whose reset_us is the TTL of a written state.
// A bucket key with a share book (*book, kept after the state in the key's value; null: none),
// or an item asking shares, goes the shares' way instead (at max(now, the book's settled_at)):
// share_settle, share_give_back, the delta poured then (less `give_back`: the units of the host's
// bucket given back with its shares), share_grant (`need` admitted from the pool, `want` units
// moved into a first share's bucket: granted = both); a count ask (no share asked: a cold key's requests) gets its `need` from the pool, as far as it holds it. Its state and book are written on every call, for
// the TTL of the decision plus the rest of the book's epochs.
SyncResult sync_key(const State& s, const SyncItem& item, int64_t now, Decision* decision = nullptr,
                    ShareBook* book = nullptr) noexcept;

constexpr size_t kSyncItemBytes = 8 * 28;
constexpr size_t kCountPolicyBytes = 8 * 8;  // the count form: algo .. weight_scale
constexpr size_t kCountItemBytes = 8;        // need
constexpr size_t kSyncCallIdMax = kCallIdMax;        // redis_command.h: the same call ids
constexpr int64_t kSyncCallMemoryMs = kCallMemoryMs;
constexpr size_t kSyncReplyPerItem = 10;
constexpr size_t kSyncCountReplyPerItem = 5;  // the count form's: no share fields (a count ask gets none)

// call_id: at most kSyncCallIdMax bytes (cut beyond), any bytes. SyncForm::best sends the count
// form when the call allows it; general never does (the tests compare the two); count always
// does: for items the caller found in it (sync_count_form), not looked at again.
enum class SyncForm : uint8_t { best, general, count };
size_t sync_command_len(CommandScript script, bool injected_time, std::string_view prefix, const SyncItem* items,
                        size_t n, int64_t now_us, std::string_view call_id = {},
                        SyncForm form = SyncForm::best) noexcept;
size_t write_sync_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                          const SyncItem* items, size_t n, int64_t now_us, std::string_view call_id = {},
                          SyncForm form = SyncForm::best) noexcept;
// Whether SyncForm::best sends these items in the count form. The engine sends such a call
// without an id and not again once its reply is lost: a count call's keys have nothing to merge
// back, and a reply lost after Redis ran it leaves their units counted there (their requests
// are decided by the fallback): it limits more, never less, and no call keeps a reply for it.
bool sync_count_form(const SyncItem* items, size_t n) noexcept;
// An upper bound of the production call's size (zone names of at most kMaxZoneLen bytes, a
// call id of at most kSyncCallIdMax).
size_t sync_command_bound(std::string_view prefix, const SyncItem* items, size_t n) noexcept;

// 1 + 10 n integers; a call in the count form (`counted`: sync_count_form) 1 + 5 n.
size_t sync_reply_len(size_t n, bool counted = false) noexcept;
// out[0..nitems) from the reply's integers; false, writing nothing, on a bad shape: a count
// other than sync_reply_len, a state field beyond kExact, granted < 0 or beyond kExact,
// retry < kNever, now < 0. (The caller checks granted against what it asked.) A count form's
// reply has no share fields: out's shares are none.
bool decode_sync_reply(const int64_t* values, size_t nvalues, size_t nitems, SyncResult* out, int64_t* redis_now,
                       bool counted = false) noexcept;

// The heartbeat; host_id any bytes (a bulk string).
size_t hosts_command_len(CommandScript script, bool injected_time, std::string_view prefix, std::string_view zone,
                         std::string_view host_id, int64_t window_us, int64_t now_us) noexcept;
size_t write_hosts_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                           std::string_view zone, std::string_view host_id, int64_t window_us, int64_t now_us) noexcept;

}  // namespace rl
