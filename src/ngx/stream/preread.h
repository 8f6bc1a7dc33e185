// at=preread (preread.cpp): the server's content handler wrapped, so that a limit on what the
// preread phase learnt ($ssl_preread_server_name) decides in the server the SNI selected,
// all or nothing with the accept stage.
#pragma once

#include "ngx/stream/stream.h"

void rl_stream_preread_handler(ngx_stream_session_t* s) noexcept;
