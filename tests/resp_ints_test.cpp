#include "core/wire/resp_ints.h"

#include <gtest/gtest.h>
#include <hiredis/read.h>
#include <hiredis/hiredis.h>

#include <random>
#include <string>
#include <vector>

namespace {

using rl::RespInts;

struct Parsed {
    RespInts r;
    std::vector<int64_t> values;
    size_t used = 0;
};

Parsed parse(const std::string& in, size_t want) {
    Parsed p;
    p.values.assign(want, 0x5a5a);
    p.r = rl::parse_int_array(in.data(), in.size(), want, p.values.data(), &p.used);
    return p;
}

std::string reply_of(const std::vector<int64_t>& values) {
    std::string s = "*" + std::to_string(values.size()) + "\r\n";
    for (int64_t v : values) s += ":" + std::to_string(v) + "\r\n";
    return s;
}

// hiredis's reading of the same bytes: the oracle of what a reply means.
enum class Hiredis { kInts, kIncomplete, kOther };
Hiredis hiredis_reads(const std::string& in, size_t want, std::vector<int64_t>* values) {
    redisReader* reader = redisReaderCreate();
    redisReaderFeed(reader, in.data(), in.size());
    void* obj = nullptr;
    Hiredis out = Hiredis::kOther;
    if (redisReaderGetReply(reader, &obj) == REDIS_OK) {
        auto* reply = static_cast<redisReply*>(obj);
        if (reply == nullptr) {
            out = Hiredis::kIncomplete;
        } else if (reply->type == REDIS_REPLY_ARRAY && reply->elements == want) {
            out = Hiredis::kInts;
            for (size_t i = 0; i < reply->elements; i++) {
                if (reply->element[i]->type != REDIS_REPLY_INTEGER) out = Hiredis::kOther;
                else values->push_back(reply->element[i]->integer);
            }
        }
        if (reply != nullptr) freeReplyObject(reply);
    }
    redisReaderFree(reader);
    return out;
}

}  // namespace

TEST(RespInts, ReadsTheIntegersAndWhereTheReplyEnds) {
    std::vector<int64_t> v = {1, 1764412800123456, 0, -1, 12, INT64_MAX, INT64_MIN};
    std::string in = reply_of(v);
    Parsed p = parse(in + "*1\r\n:5\r\n", v.size());  // the next reply is left alone
    ASSERT_EQ(p.r, RespInts::kDone);
    EXPECT_EQ(p.values, v);
    EXPECT_EQ(p.used, in.size());
    EXPECT_EQ(parse("*0\r\n", 0).r, RespInts::kDone);
}

TEST(RespInts, EveryTruncationAsksForMore) {
    std::string in = reply_of({2, 1764412800123456, 1, 9, 1000000, -1});
    for (size_t n = 0; n < in.size(); n++) {
        EXPECT_EQ(parse(in.substr(0, n), 6).r, RespInts::kMore) << n;
    }
    EXPECT_EQ(parse(in, 6).r, RespInts::kDone);
}

TEST(RespInts, AnotherLengthIsNotItsReply) {
    std::string in = reply_of({1, 2, 3});
    EXPECT_EQ(parse(in, 2).r, RespInts::kOther);  // too long
    EXPECT_EQ(parse(in, 4).r, RespInts::kOther);  // too short
    EXPECT_EQ(parse("*-1\r\n", 0).r, RespInts::kOther);
    EXPECT_EQ(parse("*-1\r\n", 1).r, RespInts::kOther);
    EXPECT_EQ(parse("*99999999999999999999999\r\n", 3).r, RespInts::kOther);
    EXPECT_EQ(parse("*18446744073709551619\r\n", 3).r, RespInts::kOther);  // 3 modulo 2^64
    EXPECT_EQ(parse("*03\r\n:1\r\n:2\r\n:3\r\n", 3).r, RespInts::kOther);
    EXPECT_EQ(parse("*+3\r\n:1\r\n:2\r\n:3\r\n", 3).r, RespInts::kOther);
}

TEST(RespInts, ErrorsRedirectsAndOtherTypesAreNotItsReply) {
    for (const char* in : {"-ERR boom\r\n", "-NOSCRIPT No matching script\r\n", "-MOVED 3999 127.0.0.1:6381\r\n",
                           "-ASK 3999 127.0.0.1:6381\r\n", "+OK\r\n", ":1\r\n", "$1\r\n1\r\n", "_\r\n", "%1\r\n"}) {
        EXPECT_EQ(parse(in, 1).r, RespInts::kOther) << in;
    }
}

TEST(RespInts, NestedOrNonIntegerElementsAreNotItsReply) {
    EXPECT_EQ(parse("*2\r\n*1\r\n:1\r\n:2\r\n", 2).r, RespInts::kOther);  // too deep
    EXPECT_EQ(parse("*2\r\n:1\r\n$1\r\n2\r\n", 2).r, RespInts::kOther);
    EXPECT_EQ(parse("*2\r\n:1\r\n-ERR x\r\n", 2).r, RespInts::kOther);
    EXPECT_EQ(parse("*2\r\n:1\r\n$-1\r\n", 2).r, RespInts::kOther);
    EXPECT_EQ(parse("*1\r\n:abc\r\n", 1).r, RespInts::kOther);
    EXPECT_EQ(parse("*1\r\n:1.5\r\n", 1).r, RespInts::kOther);
    EXPECT_EQ(parse("*1\r\n:\r\n", 1).r, RespInts::kOther);
    EXPECT_EQ(parse("*1\r\n:-\r\n", 1).r, RespInts::kOther);
    EXPECT_EQ(parse("*1\r\n:-0\r\n", 1).r, RespInts::kOther);
    EXPECT_EQ(parse("*1\r\n:+1\r\n", 1).r, RespInts::kOther);
    EXPECT_EQ(parse("*1\r\n:007\r\n", 1).r, RespInts::kOther);
    EXPECT_EQ(parse("*1\r\n: 7\r\n", 1).r, RespInts::kOther);
    EXPECT_EQ(parse("*1\r\n:7\n", 1).r, RespInts::kOther);
    EXPECT_EQ(parse("*1\r\n:7\rx", 1).r, RespInts::kOther);
    EXPECT_EQ(parse("*1\r\n:9223372036854775808\r\n", 1).r, RespInts::kOther);  // INT64_MAX + 1
    EXPECT_EQ(parse("*1\r\n:-9223372036854775809\r\n", 1).r, RespInts::kOther);
    EXPECT_EQ(parse("*1\r\n:12345678901234567890123\r\n", 1).r, RespInts::kOther);
}

// Random bytes changed, inserted, dropped in a valid reply: whatever it makes of them, it never
// reads a reply hiredis would read otherwise, nor past what it was given.
TEST(RespInts, MutatedRepliesAgreeWithHiredisWhenTaken) {
    std::mt19937 rng(33);
    const std::string alphabet = "*:-+$0123456789\r\nx";
    std::vector<int64_t> base = {1, 1764412800123456, 1, 9, 1000000, 0, 0, 3, 0, 7, -1};
    std::string valid = reply_of(base);
    size_t done = 0, other = 0;
    for (int round = 0; round < 20000; round++) {
        std::string in = valid;
        int edits = 1 + static_cast<int>(rng() % 3);
        for (int e = 0; e < edits && !in.empty(); e++) {
            size_t at = rng() % in.size();
            char c = alphabet[rng() % alphabet.size()];
            switch (rng() % 3) {
                case 0: in[at] = c; break;
                case 1: in.insert(in.begin() + static_cast<long>(at), c); break;
                default: in.erase(at, 1);
            }
        }
        size_t want = base.size() + (rng() % 3) - 1;
        Parsed p = parse(in, want);
        std::vector<int64_t> theirs;
        Hiredis h = hiredis_reads(in, want, &theirs);
        if (p.r == RespInts::kDone) {
            done++;
            ASSERT_LE(p.used, in.size());
            ASSERT_EQ(h, Hiredis::kInts) << in;
            ASSERT_EQ(p.values, theirs) << in;
            std::vector<int64_t> again;
            ASSERT_EQ(hiredis_reads(in.substr(0, p.used), want, &again), Hiredis::kInts) << in;
        } else if (p.r == RespInts::kMore) {
            ASSERT_EQ(h, Hiredis::kIncomplete) << in;
        } else {
            other++;
        }
    }
    EXPECT_GT(done, 100u);  // the mutations reach both sides
    EXPECT_GT(other, 100u);
}
