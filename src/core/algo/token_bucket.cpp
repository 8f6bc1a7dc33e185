// Token bucket: a = tokens in scaled units, b = time of the last refill, c = 1 once the key
// has been seen (a fresh key's bucket is full). Refilling (now - last) * refill units
// at each request is the same continuous bucket as GCRA.
#include "core/algo/bucket.h"
#include "core/algo/decide.h"

namespace rl {

Decision decide_token(const State& s, const Policy& p, int64_t now, int64_t cost) {
    Decision d;
    int64_t level = 0;
    if (s.c != 0) {
        int64_t tokens = s.a < p.depth ? s.a : p.depth;
        level = bucket_drain(p.depth - tokens, now - s.b, p);
    }
    int64_t after = bucket_decide(level, p, cost, d);
    if (after == level && s.c != 0) {
        d.next = s;  // nothing consumed: the last refill time stays, so no refill is lost
    } else {
        d.next.a = p.depth - after;
        d.next.b = s.c != 0 && s.b > now ? s.b : now;  // never move the refill time back
        d.next.c = 1;
    }
    return d;
}

}  // namespace rl
