// The engine's way into nginx's C headers: the core and the event loop, nothing of a front end
// (http/http.h adds ngx_http.h for the HTTP front end). Every file under src/ngx includes this
// one, or a front end's header that includes it.
#pragma once

extern "C" {
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_event_connect.h>
}
