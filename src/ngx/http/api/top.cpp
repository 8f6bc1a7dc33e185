// The top keys as JSON: what a key's text says, how to reset it, the window it counts.
#include "ngx/http/api/top.h"

#include "ngx/engine/top.h"

namespace {

constexpr uint64_t kDefaultN = 10;

// An address key's text ("192.0.2.7", "2001:db8::/56") without its prefix length, if it is one.
bool address_text(const rl_zone_t* zone, const rl::TopItem& it, std::string_view* addr) {
    if (zone->key_kind == RL_KEY_TEXT || it.truncated) return false;
    std::string_view t(it.text, it.text_len);
    if (zone->key_kind == RL_KEY_PREFIX && t.rfind('/') != std::string_view::npos) t = t.substr(0, t.rfind('/'));
    auto* p = reinterpret_cast<u_char*>(const_cast<char*>(t.data()));
    if (ngx_inet_addr(p, t.size()) != INADDR_NONE) {
        *addr = t;
        return true;
    }
#if (NGX_HAVE_INET6)
    u_char a6[16];
    if (ngx_inet6_addr(p, t.size(), a6) == NGX_OK) {
        *addr = t;
        return true;
    }
#endif
    return false;  // a Unix socket's "unix:": its bytes are the key
}

// The query of a key's DELETE: addr=ADDRESS, or key= with every byte but the unreserved ones
// percent-encoded (the API decodes %XX strictly), in `out` (3 * 64 + 5 bytes at least).
size_t reset_query(const rl_zone_t* zone, const rl::TopItem& it, u_char* out) {
    static const char kHex[] = "0123456789ABCDEF";
    std::string_view addr;
    if (address_text(zone, it, &addr)) {
        u_char* p = ngx_cpymem(out, "addr=", 5);
        return static_cast<size_t>(ngx_cpymem(p, addr.data(), addr.size()) - out);
    }
    u_char* p = ngx_cpymem(out, "key=", 4);
    for (size_t i = 0; i < it.text_len; i++) {
        auto c = static_cast<u_char>(it.text[i]);
        if (isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
            *p++ = c;
        } else {
            *p++ = '%';
            *p++ = static_cast<u_char>(kHex[c >> 4]);
            *p++ = static_cast<u_char>(kHex[c & 15]);
        }
    }
    return static_cast<size_t>(p - out);
}

// n=: 1 to K (any larger number: K), default 10; nullptr or why not.
const char* read_n(ngx_http_request_t* r, const rl_zone_t* zone, size_t* n) {
    ngx_str_t v;
    uint64_t want = kDefaultN;
    if (ngx_http_arg(r, const_cast<u_char*>(reinterpret_cast<const u_char*>("n")), 1, &v) == NGX_OK) {
        want = 0;
        for (size_t i = 0; i < v.len; i++) {
            if (v.data[i] < '0' || v.data[i] > '9') return "n must be a number from 1 to the zone's top=";
            want = want > kRlTopMaxK ? want : want * 10 + (v.data[i] - '0');
        }
        if (want == 0) return "n must be a number from 1 to the zone's top=";
    }
    *n = static_cast<size_t>(want < zone->top_k ? want : zone->top_k);
    return nullptr;
}

}  // namespace

void rl_api_top_item(rl_json_t& j, const rl_zone_t* zone, const rl::TopItem& it) noexcept {
    j.raw("{");
    j.key("key");
    j.str(std::string_view(it.text, it.text_len));
    j.then_key("truncated");
    j.raw(it.truncated ? "true" : "false");
    j.then_num("rejected", static_cast<int64_t>(it.count));
    j.then_num("error", static_cast<int64_t>(it.error));
    j.then_num("blocked", static_cast<int64_t>(it.blocked));
    j.then_num("first_seen", it.first_us / 1000);
    j.then_num("last_seen", it.last_us / 1000);
    j.then_key("reset");
    if (it.truncated) {
        j.raw("null");
    } else {
        u_char q[5 + 3 * rl::kTopTextMax];
        j.str(std::string_view(reinterpret_cast<char*>(q), reset_query(zone, it, q)));
    }
    j.raw("}");
}

ngx_int_t rl_api_send_top(ngx_http_request_t* r, rl_zone_t* zone) noexcept {
    size_t n;
    if (const char* why = read_n(r, zone, &n)) return rl_json_error(r, NGX_HTTP_BAD_REQUEST, why);
    auto* items = static_cast<rl::TopItem*>(ngx_palloc(r->pool, (n + 1) * sizeof(rl::TopItem)));
    rl_json_t j;
    if (items == nullptr || !rl_json_alloc(r, &j, 512 + 6 * zone->name.len + n * kRlApiTopItemBytes)) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    rl::TopWindow w;
    size_t got = rl_top_read(zone, rl_top_now_us(), items, n, &w);
    j.raw("{");
    j.key("zone");
    j.str(rl_sv(zone->name));
    j.then_num("top_k", zone->top_k);
    j.then_ms("window_ms", rl::kTopWindowUs);
    j.then_num("from_ms", w.from_us / 1000);
    j.then_num("until_ms", w.until_us / 1000);
    j.then_num("rejections", static_cast<int64_t>(w.total));
    j.then_num("bound", static_cast<int64_t>(w.bound));
    j.raw(",\"top\":[");
    for (size_t i = 0; i < got; i++) {
        if (i > 0) j.raw(",");
        rl_api_top_item(j, zone, items[i]);
    }
    j.raw("]}");
    return rl_json_send(r, NGX_HTTP_OK, j);
}
