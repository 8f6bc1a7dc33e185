// at=datagram (datagram.cpp): a stream filter that decides each client datagram of an admitted
// UDP session, dropping those over the limit. Shared memory and optimistic sync only: nothing
// waits there.
#pragma once

#include "ngx/stream/stream.h"

// Puts the filter in nginx's stream filter chain (postconfiguration).
void rl_stream_datagram_init() noexcept;
