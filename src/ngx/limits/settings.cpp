// Settings of a level of limits, shared by the front ends.
#include "ngx/limits/settings.h"

#include "ngx/limits/limit.h"

#include "core/algo/algorithm.h"

namespace {

char* check_status(ngx_conf_t* cf, void*, void* data) noexcept {
    ngx_int_t status = *static_cast<ngx_int_t*>(data);
    if (status >= 400 && status <= 599) return NGX_CONF_OK;
    return rl_conf_error(cf, "value must be between 400 and 599");
}

}  // namespace

ngx_conf_enum_t rl_on_error_modes[] = {
    {ngx_string("allow"), RL_ON_ERROR_ALLOW},
    {ngx_string("deny"), RL_ON_ERROR_DENY},
    {ngx_string("local"), RL_ON_ERROR_LOCAL},
    {ngx_null_string, 0},
};

ngx_conf_enum_t rl_log_levels[] = {
    {ngx_string("info"), NGX_LOG_INFO},
    {ngx_string("notice"), NGX_LOG_NOTICE},
    {ngx_string("warn"), NGX_LOG_WARN},
    {ngx_string("error"), NGX_LOG_ERR},
    {ngx_null_string, 0},
};

ngx_conf_post_t rl_status_post = {check_status};

char* rl_set_enum(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    auto* value = reinterpret_cast<ngx_uint_t*>(static_cast<char*>(conf) + cmd->offset);
    if (*value != NGX_CONF_UNSET_UINT) return const_cast<char*>("is duplicate");
    auto* arg = &static_cast<ngx_str_t*>(cf->args->elts)[1];
    auto* e = static_cast<ngx_conf_enum_t*>(cmd->post);
    u_char names[128];
    u_char* p = names;
    for (ngx_uint_t i = 0; e[i].name.len != 0; i++) {
        if (e[i].name.len == arg->len && ngx_strcasecmp(e[i].name.data, arg->data) == 0) {
            *value = e[i].value;
            return NGX_CONF_OK;
        }
        p = ngx_slprintf(p, names + sizeof(names), i == 0 ? "\"%V\"" : ", \"%V\"", &e[i].name);
    }
    return rl_conf_error(cf, "invalid value \"%V\", it must be one of %*s", arg, static_cast<size_t>(p - names), names);
}

char* rl_set_algo(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    auto* value = reinterpret_cast<ngx_uint_t*>(static_cast<char*>(conf) + cmd->offset);
    auto* args = static_cast<ngx_str_t*>(cf->args->elts);
    if (*value != NGX_CONF_UNSET_UINT) return const_cast<char*>("is duplicate");
    rl::Algo algo;
    if (!rl::parse_algo(rl_sv(args[1]), algo)) return rl_conf_error(cf, "invalid algorithm \"%V\"", &args[1]);
    *value = static_cast<ngx_uint_t>(algo);
    return NGX_CONF_OK;
}
