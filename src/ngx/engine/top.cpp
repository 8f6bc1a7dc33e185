// The top keys: a rejection counted under the zone's lock, its key's text written only when the
// key enters the summary (its bytes, or an address as text).
#include "ngx/engine/top.h"

#include "core/algo/block.h"

namespace {

// An address key ($binary_remote_addr, $ratelimit_client_prefix): 4 or 16 bytes, and the
// prefix length to show (0: none).
struct addr_key_t {
    const ngx_str_t* key;
    unsigned bits;
};

// Writes an address key as text: "192.0.2.7", "2001:db8::/56"; any other length (a Unix
// socket's "unix:") as its bytes.
size_t write_addr(const void* arg, char* out, size_t cap) {
    const auto* a = static_cast<const addr_key_t*>(arg);
    u_char buf[NGX_SOCKADDR_STRLEN];
    size_t n = 0;
    auto* data = const_cast<u_char*>(a->key->data);
    if (a->key->len == 4) {
        n = ngx_inet_ntop(AF_INET, data, buf, sizeof(buf));
#if (NGX_HAVE_INET6)
    } else if (a->key->len == 16) {
        n = ngx_inet_ntop(AF_INET6, data, buf, sizeof(buf));
#endif
    }
    if (n == 0) {
        rl::TopTextBytes bytes{reinterpret_cast<const char*>(a->key->data), a->key->len};
        return rl::top_text_bytes(&bytes, out, cap);
    }
    if (a->bits > 0) n = static_cast<size_t>(ngx_snprintf(buf + n, sizeof(buf) - n, "/%ud", a->bits) - buf);
    ngx_memcpy(out, buf, n < cap ? n : cap);
    return n;
}

// The prefix length a zone's key of `len` bytes shows (IPv4 and IPv4-mapped clients: 4 bytes).
unsigned prefix_bits(const rl_zone_t* zone, size_t len) {
    if (zone->key_kind != RL_KEY_PREFIX) return 0;
    uint8_t bits = len == 4 ? zone->prefix_v4 : len == 16 ? zone->prefix_v6 : 0;
    return bits == kRlPrefixMixed ? 0 : bits;
}

}  // namespace

int64_t rl_top_now_us() noexcept {
    ngx_time_t* tp = ngx_timeofday();
    return static_cast<int64_t>(tp->sec) * 1000000 + static_cast<int64_t>(tp->msec) * 1000;
}

void rl_top_record(const rl_ctx_t* ctx) noexcept {
    int64_t now = 0;
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        const rl_result_t& res = ctx->results[i];
        rl_zone_t* zone = res.applied->zone;
        if (!rl_decided(res) || res.decision.allowed || zone->top == nullptr) continue;
        if (now == 0) now = rl_top_now_us();
        rl::TopTextBytes bytes{reinterpret_cast<const char*>(res.key.data), res.key.len};
        addr_key_t addr{&res.key, prefix_bits(zone, res.key.len)};
        rl::TopText text = zone->key_kind == RL_KEY_TEXT ? rl::TopText{rl::top_text_bytes, &bytes}
                                                         : rl::TopText{write_addr, &addr};
        rl::TopKind kind = res.decision.block == rl::kBlockLive ? rl::TopKind::blocked : rl::TopKind::rejected;
        ngx_shmtx_lock(&zone->shpool->mutex);
        rl::top_keys_record(zone->top, res.hash, text, kind, now);
        ngx_shmtx_unlock(&zone->shpool->mutex);
    }
}

size_t rl_top_read(rl_zone_t* zone, int64_t now_us, rl::TopItem* out, size_t n, rl::TopWindow* w) noexcept {
    *w = rl::TopWindow{0, 0, 0, 0};
    if (zone->top == nullptr) return 0;
    ngx_shmtx_lock(&zone->shpool->mutex);
    *w = rl::top_keys_window(zone->top, now_us);
    size_t got = rl::top_keys_read(zone->top, now_us, out, n);
    ngx_shmtx_unlock(&zone->shpool->mutex);
    return got;
}

bool rl_top_drop(rl_zone_t* zone, const rl::KeyHash& hash) noexcept {
    if (zone->top == nullptr) return false;
    ngx_shmtx_lock(&zone->shpool->mutex);
    bool dropped = rl::top_keys_drop(zone->top, hash);
    ngx_shmtx_unlock(&zone->shpool->mutex);
    return dropped;
}

void rl_top_prefix(rl_zone_t* zone, unsigned v4_bits, unsigned v6_bits) noexcept {
    if (zone->key_kind != RL_KEY_PREFIX) return;
    auto seen = [](uint8_t* at, unsigned bits) {
        if (*at == 0) {
            *at = static_cast<uint8_t>(bits);
        } else if (*at != bits) {
            *at = kRlPrefixMixed;
        }
    };
    seen(&zone->prefix_v4, v4_bits);
    seen(&zone->prefix_v6, v6_bits);
}
