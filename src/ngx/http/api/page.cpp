// The dashboard's files from the module's memory: no file is read at run time.
#include "ngx/http/api/page.h"

#include "ngx/http/api/json.h"
#include "ngx/http/send.h"

#include "ratelimit_dashboard.h"  // generated at build time (config.make)

namespace {

constexpr std::string_view kPage = "index.html";  // served at <api>/ alone

const rl_dashboard_file_t* find_file(std::string_view file) {
    if (file.empty()) file = kPage;
    else if (file == kPage) return nullptr;
    for (const rl_dashboard_file_t& f : rl_dashboard_files) {
        if (file == f.name) return &f;
    }
    return nullptr;
}

bool add_header(ngx_http_request_t* r, const char* name, const char* value) {
    return rl_http_add_header(r, name, reinterpret_cast<u_char*>(const_cast<char*>(value)), ngx_strlen(value));
}

// Whether the request's Accept names text/html (a browser asking for the page).
bool wants_html(ngx_http_request_t* r) {
    static const u_char kAccept[] = "accept";
    static const u_char kHtml[] = "text/html";
    ngx_list_part_t* part = &r->headers_in.headers.part;
    auto* h = static_cast<ngx_table_elt_t*>(part->elts);
    for (ngx_uint_t i = 0;; i++) {
        if (i >= part->nelts) {
            if (part->next == nullptr) return false;
            part = part->next;
            h = static_cast<ngx_table_elt_t*>(part->elts);
            i = 0;
            if (part->nelts == 0) continue;
        }
        if (h[i].key.len != sizeof(kAccept) - 1 || ngx_strncasecmp(h[i].key.data, const_cast<u_char*>(kAccept),
                                                                    sizeof(kAccept) - 1) != 0) {
            continue;
        }
        if (ngx_strlcasestrn(h[i].value.data, h[i].value.data + h[i].value.len, const_cast<u_char*>(kHtml),
                             sizeof(kHtml) - 2) != nullptr) {
            return true;
        }
    }
}

}  // namespace

bool rl_api_is_file(std::string_view file) noexcept { return find_file(file) != nullptr; }

ngx_int_t rl_api_send_file(ngx_http_request_t* r, std::string_view file) noexcept {
    const rl_dashboard_file_t* f = find_file(file);
    if (f == nullptr || (file.empty() && !wants_html(r))) {
        return rl_json_error(r, NGX_HTTP_NOT_FOUND, "unknown endpoint: use .../zones");
    }
    if (!(r->method & (NGX_HTTP_GET | NGX_HTTP_HEAD))) {
        return rl_json_error(r, NGX_HTTP_NOT_ALLOWED, "method not allowed: GET only");
    }
    if (!add_header(r, "X-Content-Type-Options", "nosniff") || !add_header(r, "Cache-Control", "no-cache") ||
        !add_header(r, "Referrer-Policy", "no-referrer")) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    // The page needs nothing else: no inline script or style, no other origin.
    if (file.empty() && !add_header(r, "Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; "
                                                                  "base-uri 'none'; form-action 'none'")) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    // The bytes are the module's own, never written: the buffer is marked memory (read only).
    return rl_http_send(r, NGX_HTTP_OK, f->type, const_cast<u_char*>(f->data), f->len);
}
