// The HTTP front end's way into nginx's headers: the engine's (ngx/ngx_include.h) and ngx_http.h.
// Only src/ngx/http/ includes it.
#pragma once

#include "ngx/ngx_include.h"

extern "C" {
#include <ngx_http.h>
}

extern "C" ngx_module_t ngx_http_ratelimit_module;
