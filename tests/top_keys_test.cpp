// The top keys' summary: exact while it has room, its error bound on streams made to break it
// (many distinct keys, ties, a key that stops, keys rotating to evict each other, windows that
// end), flooders found exactly among many keys rejected once, drops, the layout.
#include "core/keys/top_keys.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int64_t kMinute = 60000000;
constexpr int64_t kT0 = 1700000000LL * 1000000;  // November 2023, unix microseconds

int64_t minute_start(int64_t t) { return t - t % kMinute; }

rl::KeyHash hash_of(const std::string& key) {
    return rl::hash_key(key.data(), key.size(), rl::kDefaultHashK0, rl::kDefaultHashK1);
}

// A summary in a block of its own, with the truth beside it: every rejection by its window.
class Top {
public:
    explicit Top(uint32_t k, int64_t window = kMinute, uint64_t secret = 0x1234567887654321ULL)
        : mem_((rl::top_keys_bytes(k) + 7) / 8), window_(window) {
        t_ = rl::top_keys_format(mem_.data(), mem_.size() * 8, k, window, secret);
    }
    rl::TopKeys* t() { return t_; }

    void record(const std::string& key, int64_t now, rl::TopKind kind = rl::TopKind::rejected) {
        rl::TopTextBytes b{key.data(), key.size()};
        rl::top_keys_record(t_, hash_of(key), rl::TopText{rl::top_text_bytes, &b}, kind, now);
        int64_t w = now - ((now % window_) + window_) % window_;
        truth_[w][key]++;
    }

    std::vector<rl::TopItem> read(int64_t now, size_t n) {
        std::vector<rl::TopItem> out(n);
        out.resize(rl::top_keys_read(t_, now, out.data(), n));
        return out;
    }

    // The key's true rejections in the windows a read at `now` counts.
    uint64_t truth(const std::string& key, int64_t now) {
        rl::TopWindow w = rl::top_keys_window(t_, now);
        uint64_t n = 0;
        for (auto& [start, keys] : truth_) {
            if (w.until_us == 0 || start < w.from_us || start >= w.until_us) continue;
            auto it = keys.find(key);
            if (it != keys.end()) n += it->second;
        }
        return n;
    }

    // Every guarantee at `now`: each key shown has count - error <= true <= count and an error
    // within the bound; every key rejected more than the bound is shown; the totals agree.
    void check(int64_t now, const char* what) {
        SCOPED_TRACE(what);
        rl::TopWindow w = rl::top_keys_window(t_, now);
        std::vector<rl::TopItem> items = read(now, 2 * t_->k);
        std::map<std::string, bool> shown;
        for (size_t i = 0; i < items.size(); i++) {
            const rl::TopItem& it = items[i];
            std::string key(it.text, it.text_len);
            uint64_t truth_n = truth(key, now);
            EXPECT_LE(it.count - it.error, truth_n) << key;
            EXPECT_GE(it.count, truth_n) << key;
            EXPECT_LE(it.error, w.bound) << key;
            EXPECT_FALSE(shown[key]) << "twice: " << key;
            shown[key] = true;
            if (i > 0) {
                EXPECT_GE(items[i - 1].count, it.count) << "largest first";
            }
        }
        uint64_t total = 0;
        std::map<std::string, uint64_t> all;
        for (auto& [start, keys] : truth_) {
            if (w.until_us == 0 || start < w.from_us || start >= w.until_us) continue;
            for (auto& [key, n] : keys) all[key] += n;
        }
        for (auto& [key, n] : all) {
            total += n;
            if (n > w.bound) {
                EXPECT_TRUE(shown[key]) << key << " rejected " << n << " > bound " << w.bound;
            }
        }
        EXPECT_EQ(w.total, total);
    }

private:
    std::vector<uint64_t> mem_;
    int64_t window_;
    rl::TopKeys* t_;
    std::map<int64_t, std::map<std::string, uint64_t>> truth_;
};

const int64_t kStart = minute_start(kT0) + kMinute / 4;  // 15 s into a minute

TEST(TopKeys, Layout) {
    EXPECT_EQ(rl::top_keys_bytes(0), 0u);
    EXPECT_EQ(rl::top_keys_bytes(rl::kTopMaxK + 1), 0u);
    EXPECT_GT(rl::top_keys_bytes(16), 2 * 16 * sizeof(rl::TopEntry));
    EXPECT_LT(rl::top_keys_bytes(16), rl::top_keys_bytes(17));
    std::vector<uint64_t> mem(rl::top_keys_bytes(16) / 8 + 1);
    EXPECT_EQ(rl::top_keys_format(mem.data(), rl::top_keys_bytes(16) - 1, 16, kMinute, 1), nullptr);
    EXPECT_EQ(rl::top_keys_format(mem.data(), mem.size() * 8, 16, 0, 1), nullptr);
    EXPECT_EQ(rl::top_keys_format(mem.data(), mem.size() * 8, 0, kMinute, 1), nullptr);
    rl::TopKeys* t = rl::top_keys_format(mem.data(), rl::top_keys_bytes(16), 16, kMinute, 1);
    ASSERT_NE(t, nullptr);
    EXPECT_TRUE(rl::top_keys_compatible(t, 16, kMinute));
    EXPECT_FALSE(rl::top_keys_compatible(t, 17, kMinute));
    EXPECT_FALSE(rl::top_keys_compatible(t, 16, 2 * kMinute));
    EXPECT_FALSE(rl::top_keys_compatible(nullptr, 16, kMinute));
    // The last byte of the block is the second summary's: recording touches no byte beyond.
    std::vector<uint64_t> guard(rl::top_keys_bytes(8) / 8 + 4, 0xa5a5a5a5a5a5a5a5ULL);
    t = rl::top_keys_format(guard.data(), rl::top_keys_bytes(8), 8, kMinute, 7);
    ASSERT_NE(t, nullptr);
    for (int i = 0; i < 5000; i++) {
        std::string k = "k" + std::to_string(i % 300);
        rl::TopTextBytes b{k.data(), k.size()};
        rl::top_keys_record(t, hash_of(k), rl::TopText{rl::top_text_bytes, &b}, rl::TopKind::rejected,
                            kStart + i * 30000);
    }
    for (size_t i = rl::top_keys_bytes(8) / 8; i < guard.size(); i++) EXPECT_EQ(guard[i], 0xa5a5a5a5a5a5a5a5ULL);
}

TEST(TopKeys, EmptyAndZero) {
    Top top(8);
    EXPECT_TRUE(top.read(kStart, 8).empty());
    EXPECT_EQ(rl::top_keys_window(top.t(), kStart).total, 0u);
    top.record("a", kStart);
    EXPECT_TRUE(top.read(kStart, 0).empty());
}

TEST(TopKeys, ExactWhileThereIsRoom) {
    Top top(8);
    for (int i = 0; i < 7; i++) top.record("ten", kStart + i);
    top.record("one", kStart + 100);
    for (int i = 0; i < 3; i++) top.record("ten", kStart + 200 + i);
    for (int i = 0; i < 4; i++) top.record("four", kStart + 300 + i, i < 2 ? rl::TopKind::blocked : rl::TopKind::rejected);
    std::vector<rl::TopItem> items = top.read(kStart + 1000, 8);
    ASSERT_EQ(items.size(), 3u);
    EXPECT_EQ(std::string(items[0].text, items[0].text_len), "ten");
    EXPECT_EQ(items[0].count, 10u);
    EXPECT_EQ(items[0].error, 0u);
    EXPECT_EQ(items[0].first_us, kStart);
    EXPECT_EQ(items[0].last_us, kStart + 202);
    EXPECT_EQ(std::string(items[1].text, items[1].text_len), "four");
    EXPECT_EQ(items[1].count, 4u);
    EXPECT_EQ(items[1].blocked, 2u);
    EXPECT_EQ(std::string(items[2].text, items[2].text_len), "one");
    EXPECT_EQ(items[2].count, 1u);
    EXPECT_FALSE(items[2].truncated);
    // n smaller than the keys: the largest
    items = top.read(kStart + 1000, 1);
    ASSERT_EQ(items.size(), 1u);
    EXPECT_EQ(items[0].count, 10u);
    top.check(kStart + 1000, "room");
}

TEST(TopKeys, TextCutAtItsLength) {
    Top top(4);
    std::string longkey(100, 'x');
    longkey[0] = '"';  // any byte: escaping is the writer's (JSON), not the summary's
    top.record(longkey, kStart);
    std::vector<rl::TopItem> items = top.read(kStart, 4);
    ASSERT_EQ(items.size(), 1u);
    EXPECT_EQ(items[0].text_len, rl::kTopTextMax);
    EXPECT_TRUE(items[0].truncated);
    EXPECT_EQ(std::string(items[0].text, items[0].text_len), longkey.substr(0, rl::kTopTextMax));
    // A key without text (no writer) is shown by its counts only.
    rl::top_keys_record(top.t(), hash_of("x"), rl::TopText{nullptr, nullptr}, rl::TopKind::rejected, kStart);
    items = top.read(kStart, 4);
    ASSERT_EQ(items.size(), 2u);
    const rl::TopItem& bare = items[0].hash == hash_of("x") ? items[0] : items[1];
    EXPECT_TRUE(bare.hash == hash_of("x"));
    EXPECT_EQ(bare.text_len, 0u);
    EXPECT_FALSE(bare.truncated);
}

TEST(TopKeys, KeysRejectedOnceDoNotPushOutLargerCounts) {
    // A full table of keys rejected 5 times each; then keys rejected once each go to the cells
    // (their bound + 1 is not above the smallest count): the table keeps its keys, exactly.
    Top top(8);
    int64_t now = kStart;
    for (int k = 0; k < 8; k++) {
        for (int i = 0; i < 5; i++) top.record("five" + std::to_string(k), now++);
    }
    for (int i = 0; i < 300; i++) top.record("once" + std::to_string(i), now++);  // ~0.6 a cell
    std::vector<rl::TopItem> items = top.read(now, 8);
    ASSERT_EQ(items.size(), 8u);
    for (const rl::TopItem& it : items) {
        EXPECT_EQ(std::string(it.text, it.text_len).substr(0, 4), "five");
        EXPECT_EQ(it.count, 5u);
        EXPECT_EQ(it.error, 0u);
    }
    top.check(now, "once each");
}

TEST(TopKeys, BoundHoldsWithManyDistinctKeys) {
    Top top(16);
    int64_t now = kStart;
    for (int i = 0; i < 20000; i++) {
        top.record("d" + std::to_string(i), now + i);
        if (i % 997 == 0) top.check(now + i, "distinct");
    }
    top.check(now + 20000, "distinct, end");
}

TEST(TopKeys, BoundHoldsOnTies) {
    // Every key the same count: rotations of K + 1 and 2K keys, and K keys then newcomers.
    for (uint32_t keys : {17u, 32u, 100u}) {
        Top top(16);
        for (int round = 0; round < 200; round++) {
            for (uint32_t k = 0; k < keys; k++) top.record("t" + std::to_string(k), kStart + round * 1000 + k);
            if (round % 20 == 0) top.check(kStart + round * 1000 + 999, "ties");
        }
        top.check(kStart + 300000, "ties, end");
    }
}

TEST(TopKeys, BoundHoldsWhenKeysRotateToEvictTheCounters) {
    // K heavy keys fill the table, then rotations of fresh keys, each just enough to reach the
    // smallest count, try to push them out; then a key hides between fresh keys.
    Top top(16);
    int64_t now = kStart;
    for (int k = 0; k < 16; k++) {
        for (int i = 0; i < 50; i++) top.record("heavy" + std::to_string(k), now++);
    }
    for (int wave = 0; wave < 40; wave++) {
        for (int k = 0; k < 17; k++) {
            for (int i = 0; i <= wave; i++) top.record("rot" + std::to_string(wave) + "." + std::to_string(k), now++);
        }
        top.check(now, "rotation");
    }
    for (int i = 0; i < 3000; i++) {
        top.record("hidden", now++);
        top.record("junk" + std::to_string(i), now++);
    }
    top.check(now, "hidden");
    std::vector<rl::TopItem> items = top.read(now, 1);
    ASSERT_EQ(items.size(), 1u);
    EXPECT_EQ(std::string(items[0].text, items[0].text_len), "hidden");
}

TEST(TopKeys, AKeyThatStops) {
    Top top(8);
    int64_t now = kStart;
    for (int i = 0; i < 500; i++) top.record("stops", now++);
    std::mt19937_64 rng(5);
    for (int i = 0; i < 20000; i++) {
        top.record("k" + std::to_string(rng() % 400), now++);
        if (i % 1999 == 0) top.check(now, "after it stopped");
    }
    // Still in the window: still counted, as much as it was
    std::vector<rl::TopItem> items = top.read(now, 1);
    ASSERT_EQ(items.size(), 1u);
    EXPECT_EQ(std::string(items[0].text, items[0].text_len), "stops");
    EXPECT_GE(items[0].count, 500u);
    // Two windows later it is gone, and so is everything else
    now = minute_start(kStart) + 2 * kMinute + 1;
    EXPECT_TRUE(top.read(now, 8).empty());
    EXPECT_EQ(rl::top_keys_window(top.t(), now).total, 0u);
}

TEST(TopKeys, WindowsEnd) {
    Top top(8);
    int64_t m0 = minute_start(kStart);
    for (int i = 0; i < 5; i++) top.record("a", m0 + 1000 + i);
    for (int i = 0; i < 3; i++) top.record("b", m0 + 2000 + i);
    // The next minute: both minutes count, a key in one only included
    for (int i = 0; i < 2; i++) top.record("a", m0 + kMinute + i);
    top.record("c", m0 + kMinute + 10);
    std::vector<rl::TopItem> items = top.read(m0 + kMinute + 100, 8);
    ASSERT_EQ(items.size(), 3u);
    EXPECT_EQ(std::string(items[0].text, items[0].text_len), "a");
    EXPECT_EQ(items[0].count, 7u);
    EXPECT_EQ(items[0].error, 0u);
    EXPECT_EQ(items[0].first_us, m0 + 1000);
    EXPECT_EQ(items[0].last_us, m0 + kMinute + 1);
    EXPECT_EQ(items[1].count, 3u);
    EXPECT_EQ(items[2].count, 1u);
    rl::TopWindow w = rl::top_keys_window(top.t(), m0 + kMinute + 100);
    EXPECT_EQ(w.from_us, m0);
    EXPECT_EQ(w.until_us, m0 + 2 * kMinute);
    EXPECT_EQ(w.total, 11u);
    top.check(m0 + kMinute + 100, "two minutes");
    // Read (not recorded) a minute later: the first minute is gone, the second still counts
    items = top.read(m0 + 2 * kMinute + 5, 8);
    ASSERT_EQ(items.size(), 2u);
    EXPECT_EQ(items[0].count, 2u);
    EXPECT_EQ(items[1].count, 1u);
    top.check(m0 + 2 * kMinute + 5, "read a minute on");
    // Recorded after a gap of minutes: only the new rejection
    top.record("d", m0 + 10 * kMinute);
    items = top.read(m0 + 10 * kMinute, 8);
    ASSERT_EQ(items.size(), 1u);
    EXPECT_EQ(std::string(items[0].text, items[0].text_len), "d");
    top.check(m0 + 10 * kMinute, "after a gap");
    // A clock gone back counts into the current window
    top.record("d", m0 + 9 * kMinute);
    EXPECT_EQ(top.read(m0 + 10 * kMinute, 8)[0].count, 2u);
}

TEST(TopKeys, BoundHoldsAcrossWindowsOnARandomStream) {
    Top top(32);
    std::mt19937_64 rng(11);
    std::discrete_distribution<int> zipf = [] {
        std::vector<double> w(3000);
        for (size_t i = 0; i < w.size(); i++) w[i] = 1.0 / static_cast<double>(i + 1);
        return std::discrete_distribution<int>(w.begin(), w.end());
    }();
    int64_t now = kStart;
    for (int i = 0; i < 200000; i++) {
        now += static_cast<int64_t>(rng() % 2000);  // ~7 minutes in all
        top.record("z" + std::to_string(zipf(rng)), now);
        if (i % 9973 == 0) top.check(now, "random");
    }
    top.check(now, "random, end");
}

// Issue 32's figure: 3 keys flooding at 50x among 1,500 keys rejected once each, shuffled.
TEST(TopKeys, ThreeFloodersAmongManyAreTheTopThreeExactly) {
    for (uint32_t k : {4u, 8u, 16u, 64u}) {
        for (uint64_t seed = 1; seed <= 25; seed++) {
            SCOPED_TRACE("K=" + std::to_string(k) + " seed=" + std::to_string(seed));
            std::vector<std::string> stream;
            for (int i = 0; i < 1500; i++) stream.push_back("10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250));
            for (int f = 0; f < 3; f++) {
                for (int i = 0; i < 50; i++) stream.push_back("flooder" + std::to_string(f));
            }
            std::mt19937_64 rng(seed);
            std::shuffle(stream.begin(), stream.end(), rng);
            Top top(k, kMinute, rng());
            for (size_t i = 0; i < stream.size(); i++) top.record(stream[i], kStart + static_cast<int64_t>(i) * 10);
            std::vector<rl::TopItem> items = top.read(kStart + 20000, 3);
            ASSERT_EQ(items.size(), 3u);
            for (const rl::TopItem& it : items) {
                EXPECT_EQ(std::string(it.text, it.text_len).substr(0, 7), "flooder");
                EXPECT_EQ(it.count, 50u);
            }
            top.check(kStart + 20000, "flooders");
        }
    }
}

TEST(TopKeys, DropForgetsAKey) {
    Top top(4);
    int64_t m0 = minute_start(kStart);
    for (int i = 0; i < 9; i++) top.record("gone", m0 + i);
    for (int i = 0; i < 5; i++) top.record("gone", m0 + kMinute + i);  // in both windows
    top.record("stays", m0 + kMinute + 10);
    EXPECT_TRUE(rl::top_keys_drop(top.t(), hash_of("gone")));
    EXPECT_FALSE(rl::top_keys_drop(top.t(), hash_of("gone")));
    EXPECT_FALSE(rl::top_keys_drop(top.t(), hash_of("never")));
    std::vector<rl::TopItem> items = top.read(m0 + kMinute + 20, 4);
    ASSERT_EQ(items.size(), 1u);
    EXPECT_EQ(std::string(items[0].text, items[0].text_len), "stays");
    // Rejected again: counted from the drop on
    top.record("gone", m0 + kMinute + 30);
    items = top.read(m0 + kMinute + 40, 4);
    ASSERT_EQ(items.size(), 2u);
    for (const rl::TopItem& it : items) EXPECT_EQ(it.count, 1u);
    // The dropped entries keep their counts without a key: the others' bounds still hold
    for (int i = 0; i < 2000; i++) top.record("n" + std::to_string(i % 50), m0 + kMinute + 100 + i);
    std::vector<rl::TopItem> all = top.read(m0 + kMinute + 5000, 8);
    rl::TopWindow w = rl::top_keys_window(top.t(), m0 + kMinute + 5000);
    for (const rl::TopItem& it : all) {
        std::string key(it.text, it.text_len);
        if (key == "gone") continue;  // its truth restarted at the drop
        EXPECT_LE(it.count - it.error, top.truth(key, m0 + kMinute + 5000));
        EXPECT_GE(it.count, top.truth(key, m0 + kMinute + 5000));
        EXPECT_LE(it.error, w.bound);
    }
}

TEST(TopKeys, SecretPlacesKeys) {
    // Two summaries with other secrets disagree on where keys go (cells): the same stream
    // over more keys than cells gives other errors.
    Top a(4, kMinute, 1), b(4, kMinute, 0xfeedfacecafebeefULL);
    for (int i = 0; i < 30000; i++) {
        std::string k = "s" + std::to_string((i * 7919) % 5000);
        a.record(k, kStart + i);
        b.record(k, kStart + i);
    }
    std::vector<rl::TopItem> ia = a.read(kStart + 40000, 4), ib = b.read(kStart + 40000, 4);
    ASSERT_EQ(ia.size(), 4u);
    ASSERT_EQ(ib.size(), 4u);
    bool differ = false;
    for (size_t i = 0; i < 4; i++) differ = differ || ia[i].count != ib[i].count || !(ia[i].hash == ib[i].hash);
    EXPECT_TRUE(differ);
    a.check(kStart + 40000, "secret a");
    b.check(kStart + 40000, "secret b");
}

}  // namespace
