// What a server's listens allow (listen.cpp), checked once the stream{} block is read: a UDP
// server cannot hold connections with delay=, a TCP-only one has no datagrams, and (nginx
// 1.25.5+, servers selected by name) at=accept applies only in a default server.
#pragma once

#include "ngx/stream/stream.h"

bool rl_stream_check_listens(ngx_conf_t* cf) noexcept;
