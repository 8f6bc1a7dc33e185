// The verdict on one request against one limit. Times are microseconds.
#pragma once
#include <cstdint>
#include "core/algo/state.h"

namespace rl {

constexpr int64_t kNever = -1;  // retry_after_us when the cost exceeds what the limit can ever admit

struct Decision {
    bool allowed = false;
    int64_t limit = 0;           // the policy's quota (Policy::requests)
    int64_t remaining = 0;       // units that could still be admitted right now, after this request
    int64_t reset_us = 0;        // time until the key is back to a fresh state if nothing else arrives
    int64_t retry_after_us = 0;  // when rejected: exact wait until `cost` would be admitted; kNever if never
    int64_t delay_us = 0;        // when allowed: how long the request waits before it proceeds (delay.h)
    State next;                  // the key's state after this request (equal to the input when rejected)
    uint8_t block = 0;           // kBlock* (block.h): what a block after abuse did to this decision
};

}  // namespace rl
