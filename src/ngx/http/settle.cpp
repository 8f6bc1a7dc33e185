// settle=: a request's real cost, known when it ends (the log phase: its status, upstream
// headers and trailers, bytes sent are there). Its values are evaluated here; the engine sends
// each difference to its limit's store (engine/settle.h).
#include "ngx/http/settle.h"

#include "ngx/engine/settle.h"

#include "core/text/rate.h"

namespace {

// The settle value of a result's limit, or -1 (none, or invalid: logged).
int64_t settle_value(rl_ctx_t* ctx, ngx_http_request_t* r, const rl_result_t& res) {
    const rl_limit_t* limit = res.applied->limit;
    ngx_str_t value;
    if (limit->settle_var != NGX_ERROR) {
        ngx_http_variable_value_t* vv = ngx_http_get_flushed_variable(r, static_cast<ngx_uint_t>(limit->settle_var));
        value.len = vv != nullptr && !vv->not_found ? vv->len : 0;
        value.data = vv != nullptr ? vv->data : nullptr;
    } else if (limit->settle_cv == nullptr) {
        return limit->settle;
    } else if (ngx_http_complex_value(r, rl_http_cv(limit->settle_cv), &value) != NGX_OK) {
        return -1;
    }
    return rl_settle_parse(ctx, res, value);
}

// The settle values into the results' `delta` and $ratelimit_settled.
void evaluate_settles(rl_ctx_t* ctx, ngx_http_request_t* r) {
    rl_http_ctx_t* h = rl_http(ctx);
    for (ngx_uint_t i = 0; i < ctx->nresults; i++) {
        rl_result_t& res = ctx->results[i];
        res.delta = 0;
        if (!res.applied->limit->settle_set || !rl_settle_admitted(ctx, res)) continue;
        int64_t v = settle_value(ctx, r, res);
        if (v < 0) continue;
        if (h->settle < 0) h->settle = v;
        res.delta = v - (res.cost > 0 ? res.cost : 0);
    }
}

// Whether `name` is a variable's name alone (what "$name" may be followed by is not in it).
bool variable_name(const ngx_str_t& name) {
    for (size_t i = 0; i < name.len; i++) {
        u_char c = name.data[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
    }
    return true;
}

}  // namespace

ngx_int_t rl_settle_handler(ngx_http_request_t* r) noexcept {
    try {
        if (r != r->main) return NGX_DECLINED;
        rl_ctx_t* ctx = rl_get_ctx(r);
        if (ctx == nullptr || rl_http(ctx)->settled) return NGX_DECLINED;
        rl_http(ctx)->settled = true;
        // Ended while delayed (its client left): the context's cleanup gives back all it took.
        if (ctx->phase == RL_PHASE_DELAYED) return NGX_DECLINED;
        evaluate_settles(ctx, r);
        rl_engine_settle(ctx);
    } catch (...) {
    }
    return NGX_DECLINED;
}

rl_param_e rl_settle_param(ngx_conf_t* cf, rl_limit_t* limit, ngx_str_t& arg) noexcept {
    ngx_str_t v;
    if (!rl_arg(arg, "settle=", v)) return RL_PARAM_OTHER;
    // Evaluated when the request ends: its variables may be the response's.
    limit->settle_set = true;
    ngx_str_t name{v.len - 1, v.data + 1};
    if (v.len > 1 && v.data[0] == '$' && variable_name(name)) {
        // One variable: read by its index (no script to run, nothing to copy).
        limit->settle_var = ngx_http_get_variable_index(cf, &name);
        if (limit->settle_var == NGX_ERROR) return RL_PARAM_ERROR;
    } else if (ngx_strlchr(v.data, v.data + v.len, '$') != nullptr) {
        limit->settle_cv = rl_http_compile(cf, &v);
        if (limit->settle_cv == nullptr) return RL_PARAM_ERROR;
    } else if (!rl::parse_int(rl_sv(v), 0, rl::kMaxRequests, limit->settle)) {
        return rl_param_error(cf, "invalid settle \"%V\"", &arg);
    }
    static_cast<rl_main_conf_t*>(ngx_http_conf_get_module_main_conf(cf, ngx_http_ratelimit_module))->settles = true;
    return RL_PARAM_READ;
}
