// at=accept (accept.cpp): the pre-access phase handler, where stream's limit_conn decides:
// after PROXY protocol and realip, before access, TLS and any read, in the server chosen by
// address.
#pragma once

#include "ngx/stream/stream.h"

ngx_int_t rl_stream_accept_handler(ngx_stream_session_t* s) noexcept;
