// The API's JSON replies: errors, policies.
#include "ngx/http/api/json.h"

#include "ngx/http/send.h"

#include "core/algo/algorithm.h"

bool rl_json_alloc(ngx_http_request_t* r, rl_json_t* j, size_t bytes) noexcept {
    j->start = static_cast<u_char*>(ngx_pnalloc(r->pool, bytes));
    j->p = j->start;
    j->last = j->start ? j->start + bytes : nullptr;
    return j->start != nullptr;
}

ngx_int_t rl_json_send(ngx_http_request_t* r, ngx_uint_t status, rl_json_t& j) noexcept {
    if (j.p < j.last) *j.p++ = '\n';
    return rl_http_send(r, status, "application/json", j.start, j.len());
}

ngx_int_t rl_json_error(ngx_http_request_t* r, ngx_uint_t status, std::string_view why) noexcept {
    rl_json_t j;
    if (!rl_json_alloc(r, &j, why.size() * 6 + 32)) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    j.raw("{");
    j.key("error");
    j.str(why);
    j.raw("}");
    return rl_json_send(r, status, j);
}

void rl_json_policy(rl_json_t& j, const rl::Policy& p) noexcept {
    j.raw("{");
    j.key("algorithm");
    j.str(rl::algo_name(p.algo));
    if (p.algo == rl::Algo::concurrency) {
        j.then_num("concurrency", p.requests);
        j.then_ms("hold_ms", p.period_us);
    } else {
        j.then_num("requests", p.requests);
        j.then_ms("period_ms", p.period_us);
        if (rl::is_bucket(p.algo)) {
            j.then_num("burst", p.burst);
        }
        if (p.block_us > 0) {
            j.then_ms("block_ms", p.block_us);
        }
    }
    j.raw("}");
}

