// What every directive handler uses: errors that name the directive, file and line, as nginx's
// own do, and the reading of name=value arguments (conf.cpp).
#pragma once

#include "ngx/ngx_include.h"

#include <string_view>

inline std::string_view rl_sv(const ngx_str_t& s) { return {reinterpret_cast<const char*>(s.data), s.len}; }

// A configuration error that names the directive being read, as nginx's own do:
// "<message> in "<directive>" directive in <file>:<line>". Returns NGX_CONF_ERROR, so that a
// handler ends with `return rl_conf_error(...)`.
char* rl_conf_error(ngx_conf_t* cf, const char* fmt, ...) noexcept;
// The same for a line read earlier (found wrong at merge or when the block ends): the message
// names the directive, file and line given.
void rl_conf_error_at(ngx_conf_t* cf, const char* directive, const u_char* file, ngx_uint_t line, const char* fmt,
                      ...) noexcept;
// What a reader of parameters says of one argument (NGX_CONF_OK is nullptr: no room for "not mine").
enum rl_param_e {
    RL_PARAM_READ = 0,  // one of its parameters, read
    RL_PARAM_OTHER,     // not one of its parameters
    RL_PARAM_ERROR,     // one of its parameters, wrong: logged
};
// rl_conf_error for a reader of parameters.
rl_param_e rl_param_error(ngx_conf_t* cf, const char* fmt, ...) noexcept;
// Refuses a name=value parameter given twice in the directive being read (from argument
// `first` on): one of the values would otherwise be dropped silently.
bool rl_no_duplicate_params(ngx_conf_t* cf, ngx_uint_t first) noexcept;

// A "name=value" directive argument: true, with `value` set, when `arg` starts with `prefix`.
inline bool rl_arg(const ngx_str_t& arg, const char* prefix, ngx_str_t& value) {
    size_t n = ngx_strlen(prefix);
    if (arg.len < n || ngx_strncmp(arg.data, prefix, n) != 0) return false;
    value.data = arg.data + n;
    value.len = arg.len - n;
    return true;
}

// Whether `arg` is the word `word` (a parameter without a value: nodelay, ssl, cluster...).
inline bool rl_word(const ngx_str_t& arg, std::string_view word) { return rl_sv(arg) == word; }
