// The only way into nginx's C headers: everything under src/ngx includes this file.
#pragma once

extern "C" {
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
}
