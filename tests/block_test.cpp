// Block after abuse (core/algo/block.h): the decisions while a block holds, when one starts, and
// the Retry-After a starting block announces.
#include <gtest/gtest.h>

#include "algo_test_util.h"
#include "core/algo/block.h"
#include "core/algo/decide.h"

namespace {

constexpr int64_t kSec = 1000000;

rl::Policy blocking(rl::Algo algo, int64_t requests, int64_t period_us, int64_t block_us) {
    rl::Policy p = rltest::policy(algo, requests, period_us, rl::is_bucket(algo) ? requests - 1 : 0);
    p.block_us = block_us;
    return p;
}

TEST(Block, LiveUntilItsEnd) {
    EXPECT_TRUE(rl::block_live(10, 9));
    EXPECT_FALSE(rl::block_live(10, 10));
    EXPECT_FALSE(rl::block_live(0, 5));
}

TEST(Block, BlockedDecisionCountsDown) {
    rl::Policy p = blocking(rl::Algo::gcra, 10, kSec, 600 * kSec);
    rl::Decision d = rl::blocked_decision(p, 1000 + 599 * kSec, 1000);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.limit, 10);
    EXPECT_EQ(d.remaining, 0);
    EXPECT_EQ(d.retry_after_us, 599 * kSec);
    EXPECT_EQ(d.reset_us, 599 * kSec);
    EXPECT_EQ(d.block, rl::kBlockLive);
}

// A key rejected once stays rejected for the block, though its rate refills; the state is
// untouched meanwhile; then it is decided as before.
TEST(Block, RejectionStartsABlockThatOutlastsTheRefill) {
    for (rl::Algo algo : {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky, rl::Algo::fixed, rl::Algo::sliding,
                          rl::Algo::log}) {
        rl::Policy p = blocking(algo, 2, kSec, 10 * kSec);
        rltest::Key k(p);
        int64_t until = 0, t = 100 * kSec;
        for (int i = 0; i < 2; i++) {
            rl::Decision d = rl::decide_blocking(k.s, &until, p, t, 1, k.ring.data());
            ASSERT_TRUE(d.allowed) << rl::algo_name(algo);
            EXPECT_EQ(d.block, rl::kBlockNone);
            if (algo == rl::Algo::log) rl::commit_log(d, k.ring.data(), p, 1);
            k.s = d.next;
        }
        EXPECT_EQ(until, 0);
        rl::Decision d = rl::decide_blocking(k.s, &until, p, t, 1, k.ring.data());
        ASSERT_FALSE(d.allowed) << rl::algo_name(algo);
        EXPECT_EQ(d.block, rl::kBlockStarted);
        EXPECT_EQ(until, t + 10 * kSec);
        EXPECT_LT(d.retry_after_us, 10 * kSec);  // the limit's own wait, shorter than the block
        EXPECT_EQ(rl::block_retry_after(p, d), 10 * kSec);
        rl::State before = k.s;
        // 5 s later the rate has refilled, but the block holds and does not grow.
        d = rl::decide_blocking(k.s, &until, p, t + 5 * kSec, 1, k.ring.data());
        EXPECT_FALSE(d.allowed);
        EXPECT_EQ(d.block, rl::kBlockLive);
        EXPECT_EQ(d.retry_after_us, 5 * kSec);
        EXPECT_EQ(d.remaining, 0);
        EXPECT_EQ(until, t + 10 * kSec);
        EXPECT_EQ(k.s, before);
        // Its last microsecond, then its end.
        d = rl::decide_blocking(k.s, &until, p, t + 10 * kSec - 1, 0, k.ring.data());
        EXPECT_EQ(d.block, rl::kBlockLive);
        EXPECT_EQ(d.retry_after_us, 1);
        d = rl::decide_blocking(k.s, &until, p, t + 10 * kSec, 1, k.ring.data());
        EXPECT_TRUE(d.allowed) << rl::algo_name(algo);
        EXPECT_EQ(d.block, rl::kBlockNone);
    }
}

TEST(Block, NoBlockWithoutThePolicy) {
    rl::Policy p = rltest::policy(rl::Algo::fixed, 1, kSec);
    rltest::Key k(p);
    int64_t until = 0;
    k.s = rl::decide_blocking(k.s, &until, p, 0, 1).next;
    rl::Decision d = rl::decide_blocking(k.s, &until, p, 0, 1);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.block, rl::kBlockNone);
    EXPECT_EQ(until, 0);
    EXPECT_FALSE(rl::starts_block(p, d));
    EXPECT_EQ(rl::block_retry_after(p, d), d.retry_after_us);
}

TEST(Block, RetryAfterOfAStartingBlock) {
    rl::Policy p = blocking(rl::Algo::gcra, 1, kSec, 2 * kSec);
    rl::Decision d;
    d.block = rl::kBlockStarted;
    d.retry_after_us = 200000;
    EXPECT_EQ(rl::block_retry_after(p, d), 2 * kSec);
    d.retry_after_us = 3 * kSec;  // the limit's own wait is longer: it stands
    EXPECT_EQ(rl::block_retry_after(p, d), 3 * kSec);
    d.retry_after_us = rl::kNever;
    EXPECT_EQ(rl::block_retry_after(p, d), rl::kNever);
    d.block = rl::kBlockLive;
    d.retry_after_us = 7;
    EXPECT_EQ(rl::block_retry_after(p, d), 7);
}

}  // namespace
