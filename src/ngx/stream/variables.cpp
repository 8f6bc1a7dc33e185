// $ratelimit_status: PASSED, REJECTED, REJECTED_DRY_RUN, EXEMPT, ERROR, DELAYED... of the
// session's accept stage, then of its preread stage; $ratelimit_dropped: its datagrams dropped.
#include "ngx/stream/variables.h"

#include "ngx/stream/session.h"

namespace {

enum { RL_VAR_STATUS = 0, RL_VAR_DROPPED };

ngx_str_t status_names[] = {
    ngx_null_string, ngx_string("PASSED"), ngx_string("REJECTED"), ngx_string("REJECTED_DRY_RUN"),
    ngx_string("EXEMPT"), ngx_string("ERROR"), ngx_string("DELAYED"), ngx_string("DELAYED_DRY_RUN"),
    ngx_string("BLOCKED"),
};

ngx_int_t variable(ngx_stream_session_t* s, ngx_stream_variable_value_t* v, uintptr_t which) noexcept {
    rl_stream_session_t* ss = rl_stream_session(s, false);
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    if (which == RL_VAR_DROPPED) {
        auto* p = static_cast<u_char*>(ngx_pnalloc(s->connection->pool, NGX_INT64_LEN));
        if (p == nullptr) return NGX_ERROR;
        v->data = p;
        v->len = static_cast<unsigned>(ngx_sprintf(p, "%uL", ss != nullptr ? ss->dropped : 0) - p);
        return NGX_OK;
    }
    rl_status_e status = ss != nullptr ? ss->status : RL_STATUS_NONE;
    // A stage whose every key was empty has no verdict: the engine says EXEMPT in its context.
    for (ngx_uint_t at : {RL_AT_PREREAD, RL_AT_ACCEPT}) {
        if (status == RL_STATUS_NONE && ss != nullptr && ss->ctx[at] != nullptr) status = ss->ctx[at]->status;
    }
    if (status == RL_STATUS_NONE) {
        v->not_found = 1;
        return NGX_OK;
    }
    v->data = status_names[status].data;
    v->len = static_cast<unsigned>(status_names[status].len);
    return NGX_OK;
}

struct var_def {
    ngx_str_t name;
    uintptr_t which;
};

var_def vars[] = {
    {ngx_string("ratelimit_status"), RL_VAR_STATUS},
    {ngx_string("ratelimit_dropped"), RL_VAR_DROPPED},
};

}  // namespace

ngx_int_t rl_stream_add_variables(ngx_conf_t* cf) noexcept {
    for (auto& def : vars) {
        ngx_stream_variable_t* var = ngx_stream_add_variable(cf, &def.name, NGX_STREAM_VAR_NOCACHEABLE);
        if (var == nullptr) return NGX_ERROR;
        var->get_handler = variable;
        var->data = def.which;
    }
    return NGX_OK;
}
