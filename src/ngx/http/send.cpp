// A whole response from memory.
#include "ngx/http/send.h"

ngx_int_t rl_http_send(ngx_http_request_t* r, ngx_uint_t status, const char* content_type, u_char* body,
                       size_t len) noexcept {
    ngx_buf_t* b = static_cast<ngx_buf_t*>(ngx_calloc_buf(r->pool));
    if (b == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    b->pos = body;
    b->last = body + len;
    b->memory = len > 0 ? 1 : 0;
    b->last_buf = r == r->main ? 1 : 0;
    b->last_in_chain = 1;
    r->headers_out.status = status;
    r->headers_out.content_length_n = static_cast<off_t>(len);
    r->headers_out.content_type.len = ngx_strlen(content_type);
    r->headers_out.content_type.data = reinterpret_cast<u_char*>(const_cast<char*>(content_type));
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = nullptr;
    ngx_int_t rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) return rc;
    ngx_chain_t out{b, nullptr};
    return ngx_http_output_filter(r, &out);
}
