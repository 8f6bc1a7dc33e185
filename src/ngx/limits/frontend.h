// A front end of the engine (http{}, and stream{} later): what the engine needs of it to read
// the directives they share and to decide what is being limited there. The front end passes
// its own to the engine; the engine never names a front end.
#pragma once

#include "ngx/ngx_include.h"

struct rl_ctx_t;

// A value of the configuration that holds variables ("$binary_remote_addr", "$plan"), compiled
// by the front end that read it (ngx_http_complex_value_t for http): opaque to the engine.
struct rl_value_t;

struct rl_frontend_t {
    const char* name;       // "http", for messages
    ngx_module_t* module;   // the front end's module: the tag of its zones' shared memory
    // `text` (with variables) compiled; nullptr on error (logged).
    rl_value_t* (*compile)(ngx_conf_t* cf, ngx_str_t* text);
    // The value for what ctx limits (ctx->subject); false on error.
    bool (*evaluate)(rl_ctx_t* ctx, const rl_value_t* value, ngx_str_t* out);
    // The verdict is known (ctx->status): the front end logs what it says of it.
    void (*decided)(rl_ctx_t* ctx);
    // A wait is over: the front end goes on with what ctx limits (its verdict is known, or
    // ctx->phase asks for a new decision).
    void (*resume)(rl_ctx_t* ctx);
};

// Whether a parameter's text holds variables (then a front end compiles it: a value per
// request). nginx's rule: any '$'.
inline bool rl_has_variables(const ngx_str_t& text) { return ngx_strlchr(text.data, text.data + text.len, '$') != nullptr; }
