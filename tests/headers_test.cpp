// Response header values: rounding of seconds, RFC 9651 strings, RateLimit(-Policy) lists,
// and the buffer bound the writers rely on.
#include "core/text/headers.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int64_t kSec = 1000000;

// Runs a writer into a buffer of exactly header_max_len() bytes followed by guard bytes,
// checks the bound and the guard, and returns the text written.
template <typename Writer>
std::string run(Writer write, const std::vector<rl::HeaderItem>& items) {
    const size_t max = rl::header_max_len(items.data(), items.size());
    std::vector<char> buf(max + 64, '\x5a');
    const size_t n = write(buf.data(), items.data(), items.size());
    EXPECT_LE(n, max);
    for (size_t i = max; i < buf.size(); i++) {
        if (buf[i] != '\x5a') {
            ADD_FAILURE() << "wrote past header_max_len() at " << i;
            break;
        }
    }
    return std::string(buf.data(), n);
}

std::string policy(const std::vector<rl::HeaderItem>& items) { return run(rl::format_policy, items); }
std::string state(const std::vector<rl::HeaderItem>& items) { return run(rl::format_state, items); }

std::string sf(std::string_view s) {
    std::vector<char> buf(2 + 2 * s.size());
    return std::string(buf.data(), rl::write_sf_string(buf.data(), s));
}

rl::HeaderItem item(std::string_view name, int64_t q, int64_t w, int64_t r, int64_t t) {
    rl::HeaderItem it;
    it.name = name;
    it.quota = q;
    it.window_s = w;
    it.remaining = r;
    it.reset_s = t;
    return it;
}

// --- seconds ------------------------------------------------------------------------------

TEST(HeaderSeconds, CeilRoundsUp) {
    EXPECT_EQ(rl::ceil_seconds(0), 0);
    EXPECT_EQ(rl::ceil_seconds(1), 1);
    EXPECT_EQ(rl::ceil_seconds(999999), 1);
    EXPECT_EQ(rl::ceil_seconds(kSec), 1);
    EXPECT_EQ(rl::ceil_seconds(kSec + 1), 2);
    EXPECT_EQ(rl::ceil_seconds(3600 * kSec), 3600);
    EXPECT_EQ(rl::ceil_seconds(INT64_MAX), INT64_MAX / kSec + 1);  // no overflow at the top
}

TEST(HeaderSeconds, CeilOfNegativeIsZero) {
    EXPECT_EQ(rl::ceil_seconds(-1), 0);
    EXPECT_EQ(rl::ceil_seconds(-kSec), 0);
    EXPECT_EQ(rl::ceil_seconds(INT64_MIN), 0);
}

TEST(HeaderSeconds, RetryAfterIsNeverBelowOne) {
    EXPECT_EQ(rl::retry_after_seconds(INT64_MIN), 1);
    EXPECT_EQ(rl::retry_after_seconds(-5), 1);
    EXPECT_EQ(rl::retry_after_seconds(0), 1);
    EXPECT_EQ(rl::retry_after_seconds(1), 1);
    EXPECT_EQ(rl::retry_after_seconds(kSec), 1);
    EXPECT_EQ(rl::retry_after_seconds(kSec + 1), 2);
    EXPECT_EQ(rl::retry_after_seconds(59 * kSec + 500000), 60);
}

// --- sf-string ----------------------------------------------------------------------------

TEST(SfString, Plain) {
    EXPECT_EQ(sf("api"), "\"api\"");
    EXPECT_EQ(sf(""), "\"\"");
    EXPECT_EQ(sf("a b~!"), "\"a b~!\"");
}

TEST(SfString, EscapesQuoteAndBackslash) {
    EXPECT_EQ(sf("a\"b"), "\"a\\\"b\"");
    EXPECT_EQ(sf("a\\b"), "\"a\\\\b\"");
    EXPECT_EQ(sf("\"\\"), "\"\\\"\\\\\"");
}

TEST(SfString, DropsBytesOutsidePrintableAscii) {
    EXPECT_EQ(sf(std::string_view("a\0b", 3)), "\"ab\"");
    EXPECT_EQ(sf("a\tb\r\nc\x7f" "d\x80\xff\x1f"), "\"abcd\"");
    EXPECT_EQ(sf("caf\xc3\xa9"), "\"caf\"");
    EXPECT_EQ(sf(" ~"), "\" ~\"");  // 0x20 and 0x7e are the edges kept
}

// --- RateLimit-Policy / RateLimit -----------------------------------------------------------

TEST(HeaderLists, OneItem) {
    EXPECT_EQ(policy({item("a", 5, 1, 3, 1)}), "\"a\";q=5;w=1");
    EXPECT_EQ(state({item("a", 5, 1, 3, 1)}), "\"a\";r=3;t=1");
}

TEST(HeaderLists, SeveralItemsInOrder) {
    std::vector<rl::HeaderItem> items = {item("a", 5, 1, 3, 1), item("b", 100, 60, 99, 120)};
    EXPECT_EQ(policy(items), "\"a\";q=5;w=1, \"b\";q=100;w=60");
    EXPECT_EQ(state(items), "\"a\";r=3;t=1, \"b\";r=99;t=120");

    items.push_back(item("day", 1000000000000LL, 86400, 0, 0));
    EXPECT_EQ(policy(items), "\"a\";q=5;w=1, \"b\";q=100;w=60, \"day\";q=1000000000000;w=86400");
    EXPECT_EQ(state(items), "\"a\";r=3;t=1, \"b\";r=99;t=120, \"day\";r=0;t=0");
}

TEST(HeaderLists, NoItemsIsEmpty) {
    EXPECT_EQ(rl::header_max_len(nullptr, 0), 0u);
    char c = 'x';
    EXPECT_EQ(rl::format_policy(&c, nullptr, 0), 0u);
    EXPECT_EQ(rl::format_state(&c, nullptr, 0), 0u);
    EXPECT_EQ(c, 'x');
}

TEST(HeaderLists, NamesAreEscaped) {
    EXPECT_EQ(policy({item("we\"ird\\", 1, 2, 3, 4)}), "\"we\\\"ird\\\\\";q=1;w=2");
    EXPECT_EQ(state({item("tab\there", 1, 2, 3, 4)}), "\"tabhere\";r=3;t=4");
}

TEST(HeaderLists, IntegersStayValidSfIntegers) {
    // RFC 9651 Integers have at most 15 digits and the draft's parameters are non-negative:
    // anything else would make a client drop the whole field.
    EXPECT_EQ(policy({item("x", INT64_MAX, 999999999999999LL, 0, 0)}),
              "\"x\";q=999999999999999;w=999999999999999");
    EXPECT_EQ(state({item("x", 0, 0, -1, INT64_MIN)}), "\"x\";r=0;t=0");
    EXPECT_EQ(state({item("x", 0, 0, 1000000000000000LL, 123456789012345LL)}),
              "\"x\";r=999999999999999;t=123456789012345");
}

TEST(HeaderLists, MaxLenBoundsAnyInput) {
    std::mt19937_64 rng(12345);
    const int64_t extremes[] = {INT64_MIN, INT64_MIN + 1, -1000000000000000LL, -1, 0, 1, 9, 10,
                                999999999999999LL, 1000000000000000LL, INT64_MAX - 1, INT64_MAX};
    auto pick_int = [&]() -> int64_t {
        switch (rng() % 3) {
            case 0: return extremes[rng() % (sizeof(extremes) / sizeof(extremes[0]))];
            case 1: return static_cast<int64_t>(rng());
            default: return static_cast<int64_t>(rng() % 100000);
        }
    };
    const char alphabet[] = {'"', '\\', 'a', 'Z', ' ', '\0', '\x7f', '\xff', '\n'};
    for (int round = 0; round < 3000; round++) {
        const size_t n = rng() % 6;
        std::vector<std::string> names(n);
        std::vector<rl::HeaderItem> items(n);
        for (size_t i = 0; i < n; i++) {
            const size_t len = rng() % 40;
            const int mode = static_cast<int>(rng() % 3);
            for (size_t j = 0; j < len; j++) {
                char c = mode == 0 ? (rng() % 2 ? '"' : '\\')  // all escapes: the worst case
                       : mode == 1 ? alphabet[rng() % sizeof(alphabet)]
                                   : static_cast<char>(rng());
                names[i].push_back(c);
            }
            items[i] = item(names[i], pick_int(), pick_int(), pick_int(), pick_int());
        }
        policy(items);  // run() checks the written length and the guard bytes
        state(items);
        if (::testing::Test::HasFailure()) {
            ADD_FAILURE() << "round " << round;
            return;
        }
    }
}

TEST(HeaderLists, WorstCaseNamesStayWithinTheBound) {
    // A name of only quotes doubles, and the widest integers take 15 digits.
    const std::string worst(50, '"');
    const std::vector<rl::HeaderItem> items = {item(worst, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX),
                                               item(worst, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX)};
    const size_t one = 2 + 100 + 2 * (3 + 15);  // quotes, escaped name, ";q=" + 15 digits twice
    EXPECT_EQ(policy(items).size(), 2 * one + 2);
    EXPECT_EQ(state(items).size(), 2 * one + 2);
    EXPECT_GE(rl::header_max_len(items.data(), items.size()), 2 * one + 2);
}

}  // namespace

TEST(PolicyHeader, ConcurrencyHasNoWindow) {
    EXPECT_EQ(policy({item("conc", 10, 0, 3, 0), item("api", 100, 60, 5, 2)}), "\"conc\";q=10, \"api\";q=100;w=60");
    EXPECT_EQ(state({item("conc", 10, 0, 3, 0)}), "\"conc\";r=3;t=0");
}
