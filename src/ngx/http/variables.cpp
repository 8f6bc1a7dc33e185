// $ratelimit_status, $ratelimit_limit, $ratelimit_remaining, $ratelimit_reset, $ratelimit_zone,
// $ratelimit_delay, $ratelimit_settled; $ratelimit_client_prefix is client_prefix.cpp's.
#include "ngx/http/variables.h"

#include "ngx/http/client_prefix.h"
#include "ngx/http/headers.h"
#include "ngx/http/request.h"

#include "core/text/headers.h"

namespace {

enum rl_var_e { RL_VAR_STATUS, RL_VAR_LIMIT, RL_VAR_REMAINING, RL_VAR_RESET, RL_VAR_ZONE, RL_VAR_DELAY, RL_VAR_SETTLED };

ngx_str_t rl_status_names[] = {
    ngx_null_string, ngx_string("PASSED"), ngx_string("REJECTED"), ngx_string("REJECTED_DRY_RUN"),
    ngx_string("EXEMPT"), ngx_string("ERROR"), ngx_string("DELAYED"), ngx_string("DELAYED_DRY_RUN"),
    ngx_string("BLOCKED"),
};

void set_value(ngx_http_variable_value_t* v, u_char* data, size_t len) {
    v->len = len;
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->data = data;
}

ngx_int_t set_number(ngx_http_request_t* r, ngx_http_variable_value_t* v, int64_t n) {
    auto* p = static_cast<u_char*>(ngx_pnalloc(r->pool, NGX_INT64_LEN));
    if (p == nullptr) return NGX_ERROR;
    set_value(v, p, ngx_sprintf(p, "%L", n) - p);
    return NGX_OK;
}

ngx_int_t rl_variable(ngx_http_request_t* r, ngx_http_variable_value_t* v, uintptr_t which) noexcept {
    rl_ctx_t* ctx = rl_get_ctx(r);
    if (ctx == nullptr || ctx->status == RL_STATUS_NONE) {
        v->not_found = 1;
        return NGX_OK;
    }
    if (which == RL_VAR_STATUS) {
        set_value(v, rl_status_names[ctx->status].data, rl_status_names[ctx->status].len);
        return NGX_OK;
    }
    if (which == RL_VAR_DELAY) return set_number(r, v, ctx->delay_ms);
    if (which == RL_VAR_SETTLED) {
        // Known once the request has ended (the log phase: http/settle.cpp).
        if (rl_http(ctx)->settle < 0) {
            v->not_found = 1;
            return NGX_OK;
        }
        return set_number(r, v, rl_http(ctx)->settle);
    }
    if (ctx->decider < 0) {
        v->not_found = 1;
        return NGX_OK;
    }
    const rl_result_t& res = ctx->results[ctx->decider];
    if (which == RL_VAR_ZONE) {
        set_value(v, res.applied->zone->name.data, res.applied->zone->name.len);
        return NGX_OK;
    }
    return set_number(r, v, which == RL_VAR_LIMIT ? res.policy->requests
                          : which == RL_VAR_REMAINING ? res.decision.remaining
                          : rl::ceil_seconds(res.decision.reset_us));
}

struct rl_var_def {
    ngx_str_t name;
    rl_var_e which;
};

rl_var_def rl_vars[] = {
    {ngx_string("ratelimit_status"), RL_VAR_STATUS},
    {ngx_string("ratelimit_limit"), RL_VAR_LIMIT},
    {ngx_string("ratelimit_remaining"), RL_VAR_REMAINING},
    {ngx_string("ratelimit_reset"), RL_VAR_RESET},
    {ngx_string("ratelimit_zone"), RL_VAR_ZONE},
    {ngx_string("ratelimit_delay"), RL_VAR_DELAY},
    {ngx_string("ratelimit_settled"), RL_VAR_SETTLED},
};

}  // namespace

ngx_int_t rl_add_variables(ngx_conf_t* cf) noexcept {
    for (auto& def : rl_vars) {
        ngx_http_variable_t* var = ngx_http_add_variable(cf, &def.name, NGX_HTTP_VAR_NOCACHEABLE);
        if (var == nullptr) return NGX_ERROR;
        var->get_handler = rl_variable;
        var->data = def.which;
    }
    return rl_client_prefix_add_variable(cf);
}
