// The API's JSON (json.cpp): a bounded writer over a buffer of the request's pool, and the
// replies made of it.
#pragma once

#include "ngx/http/http.h"

#include "core/algo/policy.h"

#include <string_view>

// Bounded writer over a buffer from the request's pool (sized by the caller, with room to spare).
// Copies and its own digits rather than ngx_slprintf, which reads a format per call: a poll of
// the dashboard writes thousands of members.
struct rl_json_t {
    u_char* start;
    u_char* p;
    u_char* last;
    void put(const char* s, size_t n) {
        size_t room = static_cast<size_t>(last - p);
        n = n < room ? n : room;
        p = ngx_cpymem(p, s, n);
    }
    void raw(const char* s) { put(s, ngx_strlen(s)); }
    void integer(int64_t v) {
        char buf[NGX_INT64_LEN];
        char* d = buf + sizeof(buf);
        uint64_t u = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
        do {
            *--d = static_cast<char>('0' + u % 10);
            u /= 10;
        } while (u != 0);
        if (v < 0) *--d = '-';
        put(d, static_cast<size_t>(buf + sizeof(buf) - d));
    }
    void str(std::string_view s) {
        static const char kHex[] = "0123456789abcdef";
        if (p < last) *p++ = '"';
        for (unsigned char ch : s) {
            if (last - p < 7) break;
            if (ch == '"' || ch == '\\') {
                *p++ = '\\';
                *p++ = ch;
            } else if (ch < 0x20 || ch >= 0x7f || ch == '<' || ch == '>' || ch == '&') {
                // Not UTF-8 checked (Redis's text, keys): escaped byte by byte; no markup
                // either, should anything read the JSON as HTML
                *p++ = '\\';
                *p++ = 'u';
                *p++ = '0';
                *p++ = '0';
                *p++ = static_cast<u_char>(kHex[ch >> 4]);
                *p++ = static_cast<u_char>(kHex[ch & 15]);
            } else {
                *p++ = ch;
            }
        }
        if (p < last) *p++ = '"';
    }
    void key(const char* k) {
        put("\"", 1);
        raw(k);
        put("\":", 2);
    }
    void num(const char* k, int64_t v) {
        key(k);
        integer(v);
    }
    // Microseconds as milliseconds, rounded up (a wait is never announced shorter than it is).
    void ms(const char* k, int64_t us) {
        key(k);
        if (us < 0) {
            raw("null");
        } else {
            integer((us + 999) / 1000);
        }
    }
    // A member after another: the comma, then the member.
    void then_key(const char* k) { raw(","); key(k); }
    void then_num(const char* k, int64_t v) { raw(","); num(k, v); }
    void then_ms(const char* k, int64_t us) { raw(","); ms(k, us); }
    size_t len() const { return static_cast<size_t>(p - start); }
};


// A writer over `bytes` of the request's pool (sized by the caller, with room to spare).
bool rl_json_alloc(ngx_http_request_t* r, rl_json_t* j, size_t bytes) noexcept;
// Sends what `j` holds (and a newline) as the response.
ngx_int_t rl_json_send(ngx_http_request_t* r, ngx_uint_t status, rl_json_t& j) noexcept;
// {"error": why}
ngx_int_t rl_json_error(ngx_http_request_t* r, ngx_uint_t status, std::string_view why) noexcept;
// A policy's object: {"algorithm":..., "requests":..., ...}.
void rl_json_policy(rl_json_t& j, const rl::Policy& p) noexcept;
