// The stream front end's way into nginx's headers: the engine's (ngx/ngx_include.h) and
// ngx_stream.h. Only src/ngx/stream/ includes it.
#pragma once

#include "ngx/ngx_include.h"

extern "C" {
#include <ngx_stream.h>
}

extern "C" ngx_module_t ngx_stream_ratelimit_module;
