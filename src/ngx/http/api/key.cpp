// The key of an API request: bounded, strictly decoded.
#include "ngx/http/api/key.h"

namespace {

constexpr size_t kMaxKeyLen = 4096;  // a key's bytes once decoded (the request line bounds it too)

int hex_value(u_char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = static_cast<u_char>(c | 0x20);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}


// %XX decoded (strictly: a '%' not followed by two hex digits is an error; '+' is a '+').
const char* percent_decode(ngx_http_request_t* r, const ngx_str_t& in, ngx_str_t* out) {
    if (in.len > 3 * kMaxKeyLen) return "key too long (4096 bytes at most)";
    out->data = static_cast<u_char*>(ngx_pnalloc(r->pool, in.len + 1));
    if (out->data == nullptr) return "out of memory";
    size_t n = 0;
    for (size_t i = 0; i < in.len; i++) {
        u_char c = in.data[i];
        if (c == '%') {
            if (i + 2 >= in.len) return "malformed percent-encoding in the key";
            int hi = hex_value(in.data[i + 1]), lo = hex_value(in.data[i + 2]);
            if (hi < 0 || lo < 0) return "malformed percent-encoding in the key";
            c = static_cast<u_char>(hi * 16 + lo);
            i += 2;
        }
        out->data[n++] = c;
    }
    out->len = n;
    if (n > kMaxKeyLen) return "key too long (4096 bytes at most)";
    return nullptr;
}


}  // namespace

const char* rl_api_request_key(ngx_http_request_t* r, ngx_str_t* key) noexcept {
    ngx_str_t k, a;
    bool have_key = ngx_http_arg(r, const_cast<u_char*>(reinterpret_cast<const u_char*>("key")), 3, &k) == NGX_OK;
    bool have_addr = ngx_http_arg(r, const_cast<u_char*>(reinterpret_cast<const u_char*>("addr")), 4, &a) == NGX_OK;
    if (have_key && have_addr) return "give key= or addr=, not both";
    if (!have_key && !have_addr) return "missing key= (or addr=)";
    if (have_key) {
        if (const char* why = percent_decode(r, k, key)) return why;
        if (key->len == 0) return "empty key (a request with an empty key is exempt from its zone)";
        return nullptr;
    }
    ngx_str_t text;
    if (a.len > 64) return "addr= is not an IPv4 or IPv6 address";
    if (const char* why = percent_decode(r, a, &text)) return why;
    in_addr_t v4 = ngx_inet_addr(text.data, text.len);
    if (v4 != INADDR_NONE) {
        key->data = static_cast<u_char*>(ngx_pnalloc(r->pool, sizeof(v4)));
        if (key->data == nullptr) return "out of memory";
        ngx_memcpy(key->data, &v4, sizeof(v4));
        key->len = sizeof(v4);
        return nullptr;
    }
#if (NGX_HAVE_INET6)
    key->data = static_cast<u_char*>(ngx_pnalloc(r->pool, 16));
    if (key->data == nullptr) return "out of memory";
    if (text.len > 0 && ngx_inet6_addr(text.data, text.len, key->data) == NGX_OK) {
        key->len = 16;
        return nullptr;
    }
#endif
    return "addr= is not an IPv4 or IPv6 address";
}

