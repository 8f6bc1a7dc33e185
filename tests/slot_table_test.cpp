// The shared-memory slot table: lookup, exact LRU eviction, layout bounds.
#include "core/keys/key_hash.h"
#include "core/keys/slot_table.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace {

rl::KeyHash h(uint64_t i) { return rl::KeyHash{i * 0x9e3779b97f4a7c15ULL + 1, i}; }

constexpr uint64_t kSecret = 0x2545f4914f6cdd1dULL;

struct Block {
    explicit Block(size_t n) : mem(n / 8 + 1) {}
    void* data() { return mem.data(); }
    std::vector<uint64_t> mem;
};

TEST(SlotTable, SlotIs56BytesAndAKeyCostsAbout60) {
    EXPECT_EQ(sizeof(rl::Slot), 56u);
    uint32_t n = rl::table_capacity(1 << 20, rl::slot_size_for(0));
    // 1 MiB / (56 + 4) bytes, less the header.
    EXPECT_GE(n, 17000u);
    EXPECT_LE(n, 18725u);
}

TEST(SlotTable, FindsWhatItCreated) {
    Block b(64 * 1024);
    rl::TableHeader* t = rl::table_format(b.data(), 64 * 1024, rl::slot_size_for(0), kSecret);
    ASSERT_NE(t, nullptr);
    bool fresh = false;
    rl::Slot* s = rl::table_acquire(t, h(1), 0, &fresh);
    EXPECT_TRUE(fresh);
    s->state.a = 42;
    rl::Slot* again = rl::table_acquire(t, h(1), 0, &fresh);
    EXPECT_FALSE(fresh);
    EXPECT_EQ(again, s);
    EXPECT_EQ(again->state.a, 42);
}

TEST(SlotTable, SameKeyUnderTwoAlgorithmsHasTwoStates) {
    Block b(64 * 1024);
    rl::TableHeader* t = rl::table_format(b.data(), 64 * 1024, rl::slot_size_for(0), kSecret);
    rl::Slot* a = rl::table_acquire(t, h(7), 0, nullptr);
    rl::Slot* f = rl::table_acquire(t, h(7), 4, nullptr);
    EXPECT_NE(a, f);
    a->state.a = 1;
    f->state.a = 2;
    EXPECT_EQ(rl::table_acquire(t, h(7), 0, nullptr)->state.a, 1);
    EXPECT_EQ(rl::table_acquire(t, h(7), 4, nullptr)->state.a, 2);
}

TEST(SlotTable, HashesDifferingInOneHalfAreDistinctKeys) {
    Block b(64 * 1024);
    rl::TableHeader* t = rl::table_format(b.data(), 64 * 1024, rl::slot_size_for(0), kSecret);
    rl::Slot* x = rl::table_acquire(t, rl::KeyHash{5, 1}, 0, nullptr);
    rl::Slot* y = rl::table_acquire(t, rl::KeyHash{5, 2}, 0, nullptr);
    EXPECT_NE(x, y);
}

TEST(SlotTable, FullTableEvictsTheLeastRecentlyUsed) {
    Block b(16 * 1024);
    rl::TableHeader* t = rl::table_format(b.data(), 16 * 1024, rl::slot_size_for(0), kSecret);
    ASSERT_NE(t, nullptr);
    const uint32_t n = t->nslots;
    ASSERT_GT(n, 10u);
    for (uint64_t i = 0; i < n; i++) rl::table_acquire(t, h(i), 0, nullptr)->state.a = static_cast<int64_t>(i) + 1;
    // Touch key 0 so key 1 becomes the least recently used.
    EXPECT_EQ(rl::table_acquire(t, h(0), 0, nullptr)->state.a, 1);
    bool fresh = false;
    rl::table_acquire(t, h(n), 0, &fresh);
    EXPECT_TRUE(fresh);
    EXPECT_EQ(t->evictions, 1u);
    EXPECT_EQ(rl::table_acquire(t, h(0), 0, &fresh)->state.a, 1);
    EXPECT_FALSE(fresh);
    for (uint64_t i = 2; i < n; i++) {
        EXPECT_EQ(rl::table_acquire(t, h(i), 0, &fresh)->state.a, static_cast<int64_t>(i) + 1) << i;
        EXPECT_FALSE(fresh);
    }
    rl::Slot* gone = rl::table_acquire(t, h(1), 0, &fresh);  // it was evicted: a fresh key again
    EXPECT_TRUE(fresh);
    EXPECT_EQ(gone->state.a, 0);
}

TEST(SlotTable, ChurnKeepsEveryLiveKeyReachable) {
    // Random traffic over more keys than fit: after each step the last `n` distinct keys touched
    // must all be present with their own values (exact LRU).
    Block b(8 * 1024);
    rl::TableHeader* t = rl::table_format(b.data(), 8 * 1024, rl::slot_size_for(0), kSecret);
    const uint32_t n = t->nslots;
    std::mt19937_64 rng(1);
    std::vector<uint64_t> recent;  // most recent last, distinct
    for (int step = 0; step < 20000; step++) {
        uint64_t k = rng() % (3 * n);
        rl::Slot* s = rl::table_acquire(t, h(k), 0, nullptr);
        s->state.b = static_cast<int64_t>(k);
        for (size_t i = 0; i < recent.size(); i++) {
            if (recent[i] == k) { recent.erase(recent.begin() + static_cast<long>(i)); break; }
        }
        recent.push_back(k);
        if (recent.size() > n) recent.erase(recent.begin());
    }
    for (uint64_t k : recent) {
        bool fresh = true;
        rl::Slot* s = rl::table_acquire(t, h(k), 0, &fresh);
        ASSERT_FALSE(fresh) << k;
        EXPECT_EQ(s->state.b, static_cast<int64_t>(k));
    }
}

TEST(SlotTable, RingFollowsTheSlotAndStartsZeroed) {
    const uint32_t size = rl::slot_size_for(100 * sizeof(int64_t));
    EXPECT_EQ(size, 56u + 800u);
    Block b(64 * 1024);
    rl::TableHeader* t = rl::table_format(b.data(), 64 * 1024, size, kSecret);
    ASSERT_NE(t, nullptr);
    rl::Slot* s = rl::table_acquire(t, h(3), 5, nullptr);
    int64_t* ring = rl::slot_ring(s);
    for (int i = 0; i < 100; i++) EXPECT_EQ(ring[i], 0);
    for (int i = 0; i < 100; i++) ring[i] = -1;
    rl::Slot* other = rl::table_acquire(t, h(4), 5, nullptr);
    for (int i = 0; i < 100; i++) EXPECT_EQ(rl::slot_ring(other)[i], 0);
    EXPECT_EQ(rl::slot_ring(s)[99], -1);
}

TEST(SlotTable, TooSmallBlocksHoldNothing) {
    EXPECT_EQ(rl::table_capacity(64, rl::slot_size_for(0)), 0u);
    EXPECT_EQ(rl::table_capacity(1 << 20, rl::slot_size_for(8ull << 20)), 0u);
    std::vector<uint64_t> tiny(8);
    EXPECT_EQ(rl::table_format(tiny.data(), 64, rl::slot_size_for(0), kSecret), nullptr);
}

TEST(SlotTable, LayoutStaysInsideTheBlock) {
    for (size_t bytes : {size_t{4096}, size_t{32768}, size_t{100000}, size_t{1} << 20}) {
        for (uint32_t ring : {0u, 8u, 800u}) {
            uint32_t ss = rl::slot_size_for(ring);
            std::vector<uint8_t> mem(bytes + 64, 0xAB);
            rl::TableHeader* t = rl::table_format(mem.data(), bytes, ss, kSecret);
            if (!t) continue;
            for (uint64_t i = 0; i < uint64_t{t->nslots} * 2; i++) rl::table_acquire(t, h(i), 0, nullptr);
            for (size_t i = bytes; i < bytes + 64; i++) ASSERT_EQ(mem[i], 0xAB) << bytes << " " << ring;
        }
    }
}

}  // namespace

namespace {

// The bucket index before it was keyed: public, so keys could be chosen offline to share one.
uint32_t public_bucket(const rl::KeyHash& k, uint32_t nbuckets) {
    uint64_t mix = k.lo ^ 0;  // algo 0
    return static_cast<uint32_t>(mix >> 32 ^ mix) & (nbuckets - 1);
}

// Keys whose public-constant hashes all had bucket 0 of `nbuckets`.
std::vector<rl::KeyHash> crafted(uint32_t nbuckets, size_t n) {
    std::vector<rl::KeyHash> keys;
    char text[32];
    for (uint64_t i = 0; keys.size() < n; i++) {
        int len = snprintf(text, sizeof(text), "k%llu", static_cast<unsigned long long>(i));
        rl::KeyHash k = rl::hash_key(text, static_cast<size_t>(len), rl::kDefaultHashK0, rl::kDefaultHashK1);
        if (public_bucket(k, nbuckets) == 0) keys.push_back(k);
    }
    return keys;
}

}  // namespace

TEST(SlotTable, KeysChosenForOneBucketSpreadUnderASecret) {
    Block b(256 * 1024);
    for (uint64_t secret : {kSecret, uint64_t{0x9e3779b97f4a7c15ULL}, uint64_t{12345}}) {
        rl::TableHeader* t = rl::table_format(b.data(), 256 * 1024, rl::slot_size_for(0), secret);
        ASSERT_NE(t, nullptr);
        std::vector<rl::KeyHash> keys = crafted(t->nbuckets, 400);
        for (const auto& k : keys) rl::table_acquire(t, k, 0, nullptr);
        uint32_t longest = 0;
        for (const auto& k : keys) longest = std::max(longest, rl::table_chain_length(t, k, 0));
        // 400 keys in 4096 buckets: chains of a few at most, as for random keys (400 in one
        // chain under the old public index).
        EXPECT_LE(longest, 6u) << "secret " << secret << ", " << t->nbuckets << " buckets";
    }
}

TEST(SlotTable, TheSecretIsKeptInTheTable) {
    Block b(64 * 1024);
    rl::TableHeader* t = rl::table_format(b.data(), 64 * 1024, rl::slot_size_for(0), 42);
    EXPECT_EQ(t->secret, 43u);  // made odd
    rl::table_acquire(t, h(1), 0, nullptr)->state.a = 7;
    // A reload finds the same table, secret included, so every key is where it was.
    EXPECT_TRUE(rl::table_compatible(t, rl::slot_size_for(0)));
    EXPECT_EQ(rl::table_acquire(t, h(1), 0, nullptr)->state.a, 7);
}

namespace {

// A table of exactly one slot: every new key recycles it.
rl::TableHeader* one_slot_table(Block& b, uint64_t secret = kSecret) {
    for (size_t bytes = sizeof(rl::TableHeader) + 64; bytes < 4096; bytes += 8) {
        if (rl::table_capacity(bytes, rl::slot_size_for(0)) == 1) {
            return rl::table_format(b.data(), bytes, rl::slot_size_for(0), secret);
        }
    }
    return nullptr;
}

}  // namespace

TEST(SlotLives, ALifeIsFoundUntilItsSlotIsBornAgain) {
    Block b(64 * 1024);
    rl::TableHeader* t = rl::table_format(b.data(), 64 * 1024, rl::slot_size_for(0), kSecret);
    rl::Slot* s = rl::table_acquire(t, h(1), 0, nullptr);
    const rl::SlotLife life = rl::slot_life(t, s);
    EXPECT_EQ(life.ref, rl::table_ref(t, s));
    s->state = rl::State{5, 6, 7};  // what the key does with its state is the same life
    rl::table_acquire(t, h(2), 0, nullptr);
    EXPECT_EQ(rl::table_find_life(t, h(1), 0, life), s);
    EXPECT_EQ(rl::table_find_life(t, h(1), 4, life), nullptr) << "another algorithm's state";
    EXPECT_EQ(rl::table_find_life(t, h(2), 0, life), nullptr) << "another key";
    EXPECT_EQ(rl::table_find_life(t, h(1), 0, rl::SlotLife{}), nullptr) << "nothing taken";
    EXPECT_EQ(rl::table_find_life(t, h(1), 0, rl::SlotLife{t->used + 1, life.gen}), nullptr) << "beyond the slots used";
}

TEST(SlotLives, AResetIsANewLifeInTheSameSlot) {
    const uint32_t size = rl::slot_size_for(4 * sizeof(int64_t));
    Block b(64 * 1024);
    rl::TableHeader* t = rl::table_format(b.data(), 64 * 1024, size, kSecret);
    rl::Slot* s = rl::table_acquire(t, h(1), 5, nullptr);
    const rl::SlotLife old = rl::slot_life(t, s);
    s->state.a = 9;
    rl::slot_ring(s)[3] = 42;
    rl::table_reset(t, s);
    EXPECT_EQ(s->state, rl::State{});
    EXPECT_EQ(rl::slot_ring(s)[3], 0);
    EXPECT_EQ(rl::table_find_life(t, h(1), 5, old), nullptr);
    const rl::SlotLife now = rl::slot_life(t, s);
    EXPECT_EQ(now.ref, old.ref);
    EXPECT_EQ(now.gen, (old.gen + 1) & rl::kGenMask);
    EXPECT_EQ(rl::table_find_life(t, h(1), 5, now), s);
    bool fresh = true;
    EXPECT_EQ(rl::table_acquire(t, h(1), 5, &fresh), s);
    EXPECT_FALSE(fresh) << "still the key's slot";
}

TEST(SlotLives, AKeyDroppedAndMadeAgainIsANewLife) {
    // In the same slot (a table of one), and in another slot of a full table.
    Block b1(4096);
    rl::TableHeader* one = one_slot_table(b1);
    ASSERT_NE(one, nullptr);
    const rl::SlotLife a1 = rl::slot_life(one, rl::table_acquire(one, h(1), 0, nullptr));
    rl::table_acquire(one, h(2), 0, nullptr);  // drops key 1
    rl::Slot* again = rl::table_acquire(one, h(1), 0, nullptr);
    EXPECT_EQ(rl::table_ref(one, again), a1.ref);
    EXPECT_EQ(rl::table_find_life(one, h(1), 0, a1), nullptr);
    EXPECT_EQ(rl::slot_life(one, again).gen, (a1.gen + 2) & rl::kGenMask);

    Block b2(16 * 1024);
    rl::TableHeader* t = rl::table_format(b2.data(), 16 * 1024, rl::slot_size_for(0), kSecret);
    const uint32_t n = t->nslots;
    const rl::SlotLife k0 = rl::slot_life(t, rl::table_acquire(t, h(0), 0, nullptr));
    for (uint64_t i = 1; i <= n; i++) rl::table_acquire(t, h(i), 0, nullptr);  // key 0 dropped
    ASSERT_EQ(rl::table_find(t, h(0), 0), nullptr);
    rl::Slot* back = rl::table_acquire(t, h(0), 0, nullptr);
    EXPECT_NE(rl::table_ref(t, back), k0.ref) << "made again in the slot of the next least recently used";
    EXPECT_EQ(rl::table_find_life(t, h(0), 0, k0), nullptr);
    EXPECT_EQ(rl::table_find_life(t, h(0), 0, rl::slot_life(t, back)), back);
}

TEST(SlotLives, ATableLaidOutAnewStartsItsLivesElsewhere) {
    // A reload that changes the layout formats a new table over the old one, with a new
    // random secret: a key made again at the same place is not the old life.
    Block b(64 * 1024);
    rl::TableHeader* t = rl::table_format(b.data(), 64 * 1024, rl::slot_size_for(0), kSecret);
    const rl::SlotLife old = rl::slot_life(t, rl::table_acquire(t, h(1), 0, nullptr));
    t = rl::table_format(b.data(), 64 * 1024, rl::slot_size_for(0), 0x6a09e667f3bcc909ULL);
    rl::Slot* s = rl::table_acquire(t, h(1), 0, nullptr);
    EXPECT_EQ(rl::table_ref(t, s), old.ref);
    EXPECT_EQ(rl::table_find_life(t, h(1), 0, old), nullptr);
}

TEST(SlotLives, TheGenerationWrapsOnlyAfter2To24Births) {
    // The bound the README states: a request's give-back reaches a later life of its key only
    // if that one slot was born again a multiple of 2^24 times while the request ran.
    Block b(4096);
    rl::TableHeader* t = one_slot_table(b);
    ASSERT_NE(t, nullptr);
    rl::Slot* s = rl::table_acquire(t, h(1), 0, nullptr);
    const rl::SlotLife life = rl::slot_life(t, s);
    for (uint32_t i = 1; i < (1u << 24); i++) {
        rl::table_reset(t, s);
        ASSERT_NE(rl::slot_gen(s), life.gen) << i;
    }
    rl::table_reset(t, s);
    EXPECT_EQ(rl::table_find_life(t, h(1), 0, life), s);
}

TEST(SlotLives, TheLayoutIsNotTheOldOnes) {
    // A slot's generation is part of the layout: a table of the previous layout ("RLT3") is
    // not taken over by a reload, it is laid out anew.
    Block b(64 * 1024);
    rl::TableHeader* t = rl::table_format(b.data(), 64 * 1024, rl::slot_size_for(0), kSecret);
    EXPECT_TRUE(rl::table_compatible(t, rl::slot_size_for(0)));
    t->magic = 0x524c5433;
    EXPECT_FALSE(rl::table_compatible(t, rl::slot_size_for(0)));
}
