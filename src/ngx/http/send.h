// A whole response from memory (send.cpp): what the endpoints (ratelimit_api, ratelimit_metrics)
// answer.
#pragma once

#include "ngx/http/http.h"

// Sends `len` bytes at `body` (in the request's pool) as the response, with `status` and
// `content_type` (static); returns what a content handler returns.
ngx_int_t rl_http_send(ngx_http_request_t* r, ngx_uint_t status, const char* content_type, u_char* body,
                       size_t len) noexcept;
// Adds a response header whose value is `len` bytes at `data` (static, or the request's pool).
// Inline: the header filter adds two on every limited response.
inline bool rl_http_add_header(ngx_http_request_t* r, const char* name, u_char* data, size_t len) noexcept {
    auto* h = static_cast<ngx_table_elt_t*>(ngx_list_push(&r->headers_out.headers));
    if (h == nullptr) return false;
    ngx_memzero(h, sizeof(ngx_table_elt_t));
    h->hash = 1;
    h->key.len = ngx_strlen(name);
    h->key.data = reinterpret_cast<u_char*>(const_cast<char*>(name));
    h->value.len = len;
    h->value.data = data;
    return true;
}
