#include "core/algo/concurrency.h"

namespace rl {

Decision decide_concurrency(const State& s, const Policy& p, int64_t cost) {
    Decision d;
    d.limit = p.requests;
    d.next = s;
    int64_t taken = s.a > 0 ? s.a : 0;
    if (cost > p.requests) {
        d.retry_after_us = kNever;
    } else if (cost == 0 || taken + cost <= p.requests) {
        d.allowed = true;
        d.next.a = taken + cost;
    } else {
        d.retry_after_us = kConcurrencyRetryUs;
    }
    int64_t left = p.requests - d.next.a;
    d.remaining = left > 0 ? left : 0;
    return d;
}

bool holders_add(Holders& hs, int32_t pid, int32_t n) {
    Holder* free = nullptr;
    for (Holder& h : hs.h) {
        if (h.pid == pid) {
            h.count += n;
            return true;
        }
        if (h.pid == 0 && free == nullptr) free = &h;
    }
    if (free == nullptr) return false;
    *free = Holder{pid, n};
    return true;
}

int32_t holders_remove(Holders& hs, int32_t pid, int32_t n) {
    for (Holder& h : hs.h) {
        if (h.pid != pid) continue;
        int32_t took = h.count < n ? h.count : n;
        h.count -= took;
        if (h.count == 0) h.pid = 0;
        return took;
    }
    return 0;
}

}  // namespace rl
