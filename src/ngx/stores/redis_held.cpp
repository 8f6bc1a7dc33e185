// In-flight slots held in Redis: refreshed while their requests run, given back when they end.
#include "ngx/stores/redis_held.h"

#include "ngx/stores/redis_state.h"

#include "core/wire/redis_keys.h"
#include "ngx/metrics/metrics.h"
#include "ngx/redis/resend.h"

#include <sys/random.h>

namespace {

uint64_t owner_id = 0;
uint64_t last_seq = 0;

int64_t local_now_us() {
    ngx_time_t* tp = ngx_timeofday();
    return static_cast<int64_t>(tp->sec) * 1000000 + static_cast<int64_t>(tp->msec) * 1000;
}

// One release (a ZREM) or one refresh (its ZADD, then its PEXPIRE: one command each, so that
// replies stay matched to commands even when the second cannot be queued), with its bytes,
// until Redis answered each: they follow MOVED and ASK (resend.h), so a key whose slot moved
// to another node since the map was last read has its slots given back or kept there.
struct held_cmd_t {
    rl_resend_t parts[2];
    ngx_uint_t pending;      // parts sent and not yet done
    const char* what;        // for the log
    u_char bytes[1];
};

void part_done(rl_resend_t* part, rl_redis_node_t* node, const redisReply* reply, bool taken) {
    auto* cmd = static_cast<held_cmd_t*>(part->data);
    // Not retried further: a release not done expires after hold; a refresh goes again next time.
    rl_resend_failed(node, cmd->what, reply, taken);
    if (--cmd->pending == 0) ngx_free(cmd);
}

held_cmd_t* cmd_new(rl_redis_t* redis, size_t len, const char* what) {
    auto* cmd = static_cast<held_cmd_t*>(ngx_alloc(sizeof(held_cmd_t) + len, redis->conn.log));
    if (cmd != nullptr) {
        cmd->pending = 0;
        cmd->what = what;
    }
    return cmd;
}

// Sends the `len` bytes written in cmd->bytes, for a key of cluster slot `slot`: one command,
// or two when `split` > 0 ([0, split) and the rest).
void cmd_send(held_cmd_t* cmd, rl_redis_t* redis, uint16_t slot, size_t len, size_t split) {
    rl_redis_node_t* node = rl_resend_route(redis, slot);
    const size_t bounds[3] = {0, split > 0 ? split : len, len};
    for (ngx_uint_t i = 0; i < (split > 0 ? 2 : 1); i++) {
        rl_resend_t* part = &cmd->parts[i];
        *part = rl_resend_t{part_done, cmd, cmd->bytes + bounds[i], bounds[i + 1] - bounds[i], 0, 0};
        if (!rl_resend_send(part, node)) break;  // (a PEXPIRE without its ZADD is of no use)
        cmd->pending++;
    }
    if (cmd->pending == 0) ngx_free(cmd);
}

constexpr ngx_uint_t kPerCommand = 64;  // requests' slots per ZREM or ZADD: bounds one command

bool same_key(const rl_held_t* a, const rl_held_t* b) {
    return a->slot == b->slot && a->check.hash == b->check.hash && a->check.zone == b->check.zone;
}

// Takes from `from` the first held slot and up to kPerCommand - 1 more of its key, in `out`
// (their checks in `checks`); they are moved to `to` (or left where they are when `to` is
// nullptr and they stay held). Returns how many.
ngx_uint_t take_key(ngx_queue_t* from, ngx_queue_t* to, ngx_queue_t** cursor, rl::RedisCheck* checks,
                    rl_held_t** out) {
    ngx_queue_t* q = *cursor;
    rl_held_t* first = ngx_queue_data(q, rl_held_t, link);
    ngx_uint_t n = 0;
    for (ngx_queue_t* next; q != ngx_queue_sentinel(from) && n < kPerCommand; q = next) {
        next = ngx_queue_next(q);
        rl_held_t* held = ngx_queue_data(q, rl_held_t, link);
        if (n > 0 && !same_key(first, held)) continue;
        out[n] = held;
        checks[n++] = held->check;
        if (to != nullptr) {
            ngx_queue_remove(q);
            ngx_queue_insert_tail(to, q);
        }
    }
    *cursor = to != nullptr ? ngx_queue_head(from) : ngx_queue_next(&first->link);
    return n;
}

// Slots given back in this loop turn, one ZREM per key (a hot key's requests end together).
void on_release(ngx_event_t* ev) noexcept {
    auto* redis = static_cast<rl_redis_t*>(ev->data);
    std::string_view prefix = rl_sv(redis->prefix);
    ngx_queue_t done;
    ngx_queue_init(&done);
    rl::RedisCheck checks[kPerCommand];
    rl_held_t* group[kPerCommand];
    ngx_queue_t* cursor = ngx_queue_head(&redis->store->releasing);
    while (!ngx_queue_empty(&redis->store->releasing)) {
        ngx_uint_t n = take_key(&redis->store->releasing, &done, &cursor, checks, group);
        if (held_cmd_t* cmd = cmd_new(redis, rl::release_command_len(prefix, checks, n), "a slot's release failed")) {
            auto* buf = reinterpret_cast<char*>(cmd->bytes);
            cmd_send(cmd, redis, group[0]->slot, rl::write_release_command(buf, prefix, checks, n), 0);
        }
    }
    while (!ngx_queue_empty(&done)) {
        ngx_queue_t* q = ngx_queue_head(&done);
        ngx_queue_remove(q);
        ngx_free(ngx_queue_data(q, rl_held_t, link));
    }
}

void on_refresh(ngx_event_t* ev) noexcept {
    static const char kExpire[] = "*3\r\n$7\r\nPEXPIRE\r\n";
    auto* redis = static_cast<rl_redis_t*>(ev->data);
    std::string_view prefix = rl_sv(redis->prefix);
    rl::RedisCheck checks[kPerCommand];
    rl_held_t* group[kPerCommand];
    // Redis's clock now, as the last reply showed it: every slot lives `hold` from here.
    int64_t score = local_now_us() + redis->store->clock_offset_us;
    // One pass per key: the slots of a key are moved to the end as they are sent.
    ngx_queue_t sent;
    ngx_queue_init(&sent);
    ngx_queue_t* cursor = ngx_queue_head(&redis->store->held);
    while (!ngx_queue_empty(&redis->store->held)) {
        ngx_uint_t n = take_key(&redis->store->held, &sent, &cursor, checks, group);
        int64_t hold = 0;
        for (ngx_uint_t i = 0; i < n; i++) hold = checks[i].policy->period_us > hold ? checks[i].policy->period_us : hold;
        held_cmd_t* cmd = cmd_new(redis, rl::refresh_command_len(prefix, checks, n, score + hold), "a slot's refresh failed");
        if (cmd == nullptr) continue;
        auto* buf = reinterpret_cast<char*>(cmd->bytes);
        size_t len = rl::write_refresh_command(buf, prefix, checks, n, score + hold);
        size_t split = std::string_view(buf, len).rfind(kExpire);
        if (split != std::string_view::npos && split > 0) {
            cmd_send(cmd, redis, group[0]->slot, len, split);
        } else {
            ngx_free(cmd);
        }
    }
    if (ngx_queue_empty(&sent)) return;  // nothing held: the next slot taken starts the timer
    ngx_queue_add(&redis->store->held, &sent);
    ngx_add_timer(ev, redis->store->refresh_ms);
}

}  // namespace

uint64_t rl_held_owner() noexcept {
    if (owner_id == 0) {
        if (getrandom(&owner_id, sizeof(owner_id), GRND_NONBLOCK) != static_cast<ssize_t>(sizeof(owner_id))) {
            owner_id = (static_cast<uint64_t>(ngx_pid) << 24) ^ static_cast<uint64_t>(local_now_us());
        }
        owner_id &= (uint64_t{1} << 48) - 1;
        if (owner_id == 0) owner_id = 1;
    }
    return owner_id;
}

uint64_t rl_held_next_seq() noexcept { return ++last_seq; }

void rl_held_clock(rl_redis_t* redis, int64_t redis_now_us) noexcept {
    redis->store->clock_offset_us = redis_now_us - local_now_us();
}

rl_held_t* rl_held_add(rl_redis_t* redis, const rl::RedisCheck& check, uint16_t slot,
                       rl_metrics_zone_t* metrics) noexcept {
    auto* held = static_cast<rl_held_t*>(ngx_alloc(sizeof(rl_held_t), redis->conn.log));
    if (held == nullptr) return nullptr;
    held->next = nullptr;
    held->redis = redis;
    held->metrics = metrics;
    held->slot = slot;
    held->policy = *check.policy;
    held->check = check;
    held->check.policy = &held->policy;
    ngx_queue_insert_tail(&redis->store->held, &held->link);
    rl_redis_store_t* st = redis->store;
    if (!st->held_refresh.timer_set && st->refresh_ms > 0) ngx_add_timer(&st->held_refresh, st->refresh_ms);
    if (metrics != nullptr) rl_metrics_add(&metrics->in_flight, 1);
    return held;
}

void rl_held_release(rl_held_t* held) noexcept {
    rl_redis_t* redis = held->redis;
    ngx_queue_remove(&held->link);
    ngx_queue_insert_tail(&redis->store->releasing, &held->link);
    if (held->metrics != nullptr) rl_metrics_add(&held->metrics->in_flight, -1);
    ngx_post_event(&redis->store->held_release, &ngx_posted_events);  // (once: it checks)
}

void rl_held_init(rl_redis_t* redis, ngx_log_t* log) noexcept {
    rl_redis_store_t* st = redis->store;
    ngx_queue_init(&st->held);
    st->held_refresh.handler = on_refresh;
    st->held_refresh.data = redis;
    st->held_refresh.log = log;
    st->held_refresh.cancelable = 1;  // an old worker refreshes while its requests run, but waits for none
    ngx_queue_init(&st->releasing);
    st->held_release.handler = on_release;
    st->held_release.data = redis;
    st->held_release.log = log;
}

void rl_held_exit(rl_redis_t* redis) noexcept {
    rl_redis_store_t* st = redis->store;
    if (st->held_refresh.timer_set) ngx_del_timer(&st->held_refresh);
    if (st->held_release.posted) {  // (a macro of several statements)
        ngx_delete_posted_event(&st->held_release);
    }
    for (ngx_queue_t* list : {&st->held, &st->releasing}) {
        while (!ngx_queue_empty(list)) {
            ngx_queue_t* q = ngx_queue_head(list);
            ngx_queue_remove(q);
            ngx_free(ngx_queue_data(q, rl_held_t, link));
        }
    }
}
