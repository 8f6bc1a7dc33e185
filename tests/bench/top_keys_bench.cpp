// The top keys' summary (src/core/keys/top_keys.h), measured: its error against the stated
// bound (N / K) on streams of 10^6 rejections over 10^5 keys, issue 32's flooders (3 keys at
// 50x among 1,500 rejected once each), the nanoseconds a rejection costs it, against a lookup
// in the zone's slot table in the same run, and its bytes. Markdown on standard output.
//
//   tests/bench/top_keys.sh [--rounds N] [--seeds N]
#include "core/keys/key_hash.h"
#include "core/keys/slot_table.h"
#include "core/keys/top_keys.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr int64_t kMinute = 60000000;
constexpr int64_t kStart = 1700000040LL * 1000000;  // the start of a minute

struct Key {
    std::string text;
    rl::KeyHash hash;
};

struct Summary {
    std::vector<uint64_t> mem;
    rl::TopKeys* t;
    explicit Summary(uint32_t k, uint64_t secret) : mem(rl::top_keys_bytes(k) / 8 + 1) {
        t = rl::top_keys_format(mem.data(), mem.size() * 8, k, kMinute, secret);
    }
    void record(const Key& key, int64_t now) {
        rl::TopTextBytes b{key.text.data(), key.text.size()};
        rl::top_keys_record(t, key.hash, rl::TopText{rl::top_text_bytes, &b}, rl::TopKind::rejected, now);
    }
};

std::vector<Key> make_keys(size_t n, const char* prefix) {
    std::vector<Key> keys(n);
    for (size_t i = 0; i < n; i++) {
        keys[i].text = prefix + std::to_string(i);
        keys[i].hash = rl::hash_key(keys[i].text.data(), keys[i].text.size(), rl::kDefaultHashK0, rl::kDefaultHashK1);
    }
    return keys;
}

// A stream of key indexes: `n` rejections over `keys` keys, Zipf-distributed (exponent s) or
// uniform (s = 0), in random order.
std::vector<uint32_t> make_stream(size_t n, size_t keys, double s, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<uint32_t> out(n);
    if (s == 0) {
        for (size_t i = 0; i < n; i++) out[i] = static_cast<uint32_t>(i % keys);
        std::shuffle(out.begin(), out.end(), rng);
        return out;
    }
    std::vector<double> w(keys);
    for (size_t i = 0; i < keys; i++) w[i] = 1.0 / std::pow(static_cast<double>(i + 1), s);
    std::discrete_distribution<uint32_t> d(w.begin(), w.end());
    for (size_t i = 0; i < n; i++) out[i] = d(rng);
    return out;
}

// A stream of `heavy` keys that each reach the smallest count, then K + 1 keys in turn: made
// to evict counters (every arrival a miss), over `n` rejections.
std::vector<uint32_t> make_rotation(size_t n, uint32_t k) {
    std::vector<uint32_t> out;
    out.reserve(n);
    while (out.size() < n) {
        for (uint32_t i = 0; i <= k && out.size() < n; i++) out.push_back(i);
    }
    return out;
}

struct Accuracy {
    uint64_t bound = 0;
    uint64_t max_over = 0;       // count - true, the largest over the keys shown
    uint64_t max_error = 0;      // the largest error field
    uint64_t max_under = 0;      // true - (count - error), must be 0
    size_t above_bound = 0;      // keys rejected more than the bound
    size_t above_shown = 0;      // of them, shown
    size_t top10_found = 0;      // the 10 truly largest among the 10 shown first
};

Accuracy accuracy(uint32_t k, const std::vector<Key>& keys, const std::vector<uint32_t>& stream, uint64_t secret) {
    Summary s(k, secret);
    std::vector<uint64_t> truth(keys.size());
    int64_t step = kMinute / static_cast<int64_t>(stream.size() + 1);
    int64_t now = kStart;
    for (uint32_t i : stream) {
        s.record(keys[i], now);
        truth[i]++;
        now += step;
    }
    std::vector<rl::TopItem> items(k);
    items.resize(rl::top_keys_read(s.t, now, items.data(), items.size()));
    Accuracy a;
    a.bound = rl::top_keys_window(s.t, now).bound;
    std::unordered_map<uint64_t, size_t> index;
    for (size_t i = 0; i < keys.size(); i++) index[keys[i].hash.lo] = i;
    std::vector<bool> shown(keys.size());
    for (const rl::TopItem& it : items) {
        size_t i = index[it.hash.lo];
        shown[i] = true;
        uint64_t t = truth[i];
        if (it.count > t) a.max_over = std::max(a.max_over, it.count - t);
        if (it.count - it.error > t) a.max_under = std::max(a.max_under, it.count - it.error - t);
        a.max_error = std::max(a.max_error, it.error);
    }
    for (size_t i = 0; i < keys.size(); i++) {
        if (truth[i] > a.bound) {
            a.above_bound++;
            if (shown[i]) a.above_shown++;
        }
    }
    std::vector<size_t> order(keys.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 10, order.end(), [&](size_t x, size_t y) { return truth[x] > truth[y]; });
    for (size_t r = 0; r < 10 && r < items.size(); r++) {
        size_t i = index[items[r].hash.lo];
        if (std::find(order.begin(), order.begin() + 10, i) != order.begin() + 10) a.top10_found++;
    }
    return a;
}

void print_accuracy(uint64_t seed) {
    std::vector<Key> keys = make_keys(100000, "key");
    struct Stream {
        const char* name;
        std::vector<uint32_t> ids;
        bool ties;
    };
    std::vector<Stream> streams;
    streams.push_back({"Zipf s=1.0", make_stream(1000000, keys.size(), 1.0, seed), false});
    streams.push_back({"Zipf s=0.8", make_stream(1000000, keys.size(), 0.8, seed + 1), false});
    streams.push_back({"uniform (10 each: all tie)", make_stream(1000000, keys.size(), 0, seed + 2), true});
    printf("## Error against the bound: 10^6 rejections over 10^5 keys, one window\n\n");
    printf("Bound: every error <= N / K (N = 10^6). \"over\": the largest count - true count among the\n"
           "keys shown; \"error\": the largest error the summary reports; \"under\": the largest\n"
           "true count below count - error (must be 0); \"> bound shown\": keys rejected more than N / K,\n"
           "and how many of them are in the table (must be all); \"top 10\": of the 10 keys shown first,\n"
           "how many are among the 10 truly largest.\n\n");
    printf("| stream | K | bound N/K | max over | max error | max under | > bound shown | top 10 |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const Stream& st : streams) {
        for (uint32_t k : {16u, 64u, 256u}) {
            Accuracy a = accuracy(k, keys, st.ids, seed * 7 + k);
            std::string top10 = st.ties ? "- (all tie)" : std::to_string(a.top10_found);
            printf("| %s | %u | %llu | %llu | %llu | %llu | %zu / %zu | %s |\n", st.name, k,
                   static_cast<unsigned long long>(a.bound), static_cast<unsigned long long>(a.max_over),
                   static_cast<unsigned long long>(a.max_error), static_cast<unsigned long long>(a.max_under),
                   a.above_shown, a.above_bound, top10.c_str());
        }
    }
    for (uint32_t k : {16u, 64u}) {
        std::vector<Key> rot = make_keys(k + 1, "rot");
        Accuracy a = accuracy(k, rot, make_rotation(1000000, k), seed + k);
        printf("| K + 1 keys in turn (evicting) | %u | %llu | %llu | %llu | %llu | %zu / %zu | - |\n", k,
               static_cast<unsigned long long>(a.bound), static_cast<unsigned long long>(a.max_over),
               static_cast<unsigned long long>(a.max_error), static_cast<unsigned long long>(a.max_under),
               a.above_shown, a.above_bound);
    }
    printf("\n");
}

// Plain Space-Saving (every key not in the table evicts the smallest entry and starts at its
// count + 1), the comparison of the flooders' table: a map and a scan, not measured for speed.
struct PlainSpaceSaving {
    struct Counter {
        uint64_t count, error;
    };
    uint32_t k;
    std::unordered_map<const Key*, Counter> table;
    void record(const Key* key) {
        auto it = table.find(key);
        if (it != table.end()) {
            it->second.count++;
            return;
        }
        if (table.size() < k) {
            table[key] = Counter{1, 0};
            return;
        }
        auto min = table.begin();
        for (auto i = table.begin(); i != table.end(); ++i) {
            if (i->second.count < min->second.count) min = i;
        }
        uint64_t c = min->second.count;
        table.erase(min);
        table[key] = Counter{c + 1, c};
    }
    // The 3 largest: whether they are the flooders, and whether counted exactly (50).
    void top3(bool* all, bool* exact) const {
        std::vector<std::pair<uint64_t, const Key*>> v;
        for (const auto& [key, c] : table) v.emplace_back(c.count, key);
        std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
        *all = v.size() >= 3;
        *exact = *all;
        for (size_t i = 0; i < 3 && i < v.size(); i++) {
            bool flooder = v[i].second->text.compare(0, 7, "flooder") == 0;
            *all = *all && flooder;
            *exact = *exact && flooder && v[i].first == 50;
        }
    }
};

void print_flooders(int seeds) {
    printf("## Issue 32's flooders: 3 keys rejected 50 times among 1,500 rejected once, shuffled\n\n");
    printf("| K | bytes | runs | the 3 are the top 3 | their counts exact (50, each) | largest count shown of a flooder |"
           " plain Space-Saving: top 3 | exact |\n");
    printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    std::vector<Key> singles = make_keys(1500, "10.0.0.");
    std::vector<Key> flooders = make_keys(3, "flooder");
    for (uint32_t k : {4u, 8u, 16u, 34u, 64u, 128u}) {
        int top3 = 0, exact = 0, ss_top3 = 0, ss_exact = 0;
        uint64_t largest = 0;
        for (int seed = 1; seed <= seeds; seed++) {
            std::vector<const Key*> stream;
            for (const Key& s : singles) stream.push_back(&s);
            for (const Key& f : flooders) {
                for (int i = 0; i < 50; i++) stream.push_back(&f);
            }
            std::mt19937_64 rng(static_cast<uint64_t>(seed));
            std::shuffle(stream.begin(), stream.end(), rng);
            Summary s(k, rng());
            for (size_t i = 0; i < stream.size(); i++) s.record(*stream[i], kStart + static_cast<int64_t>(i));
            rl::TopItem items[3];
            size_t n = rl::top_keys_read(s.t, kStart + 10000, items, 3);
            bool all = n == 3, counts = n == 3;
            for (size_t i = 0; i < n; i++) {
                bool flooder = std::strncmp(items[i].text, "flooder", 7) == 0;
                all = all && flooder;
                counts = counts && flooder && items[i].count == 50;
                if (flooder) largest = std::max(largest, items[i].count);
            }
            top3 += all;
            exact += counts;
            PlainSpaceSaving ss{k, {}};
            for (const Key* key : stream) ss.record(key);
            ss.top3(&all, &counts);
            ss_top3 += all;
            ss_exact += counts;
        }
        printf("| %u | %zu | %d | %d | %d | %llu | %d | %d |\n", k, rl::top_keys_bytes(k), seeds, top3, exact,
               static_cast<unsigned long long>(largest), ss_top3, ss_exact);
    }
    printf("\n");
}

template <typename F>
double ns_per_op(size_t ops, F body) {
    auto t0 = std::chrono::steady_clock::now();
    body();
    auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(ops);
}

void print_speed(int rounds, uint64_t seed) {
    std::vector<Key> keys = make_keys(100000, "key");
    std::vector<uint32_t> zipf = make_stream(1000000, keys.size(), 1.0, seed);
    std::vector<uint32_t> uniform = make_stream(1000000, keys.size(), 0, seed);
    // The baseline: the zone's own lookup of the same keys (a slot table of 2^17 slots, full)
    std::vector<uint64_t> tmem((sizeof(rl::TableHeader) + (size_t{1} << 17) * 64) / 8);
    rl::TableHeader* table = rl::table_format(tmem.data(), tmem.size() * 8, rl::slot_size_for(0), 0x9e3779b97f4a7c15ULL);
    for (const Key& k : keys) rl::table_acquire(table, k.hash, 0, nullptr);

    printf("## Cost of a rejection (ns per record; median of %d rounds of 10^6)\n\n", rounds);
    printf("The same keys' lookup in a zone's slot table (`table_acquire`, 10^5 keys held) is measured\n"
           "in each round as the baseline: \"ratio\" is record / lookup.\n\n");
    printf("| stream | K | record ns | lookup ns | ratio |\n");
    printf("| --- | ---: | ---: | ---: | ---: |\n");
    struct Case {
        const char* name;
        const std::vector<uint32_t>* ids;
    };
    for (Case c : {Case{"Zipf s=1.0, 10^5 keys", &zipf}, Case{"uniform, 10^5 keys", &uniform}}) {
        for (uint32_t k : {16u, 64u, 256u, 1024u}) {
            std::vector<double> rec, look;
            for (int r = 0; r < rounds; r++) {
                Summary s(k, seed + static_cast<uint64_t>(r));
                int64_t now = kStart;
                rec.push_back(ns_per_op(c.ids->size(), [&] {
                    for (uint32_t i : *c.ids) s.record(keys[i], now++);
                }));
                uint64_t sink = 0;
                look.push_back(ns_per_op(c.ids->size(), [&] {
                    for (uint32_t i : *c.ids) sink += rl::table_acquire(table, keys[i].hash, 0, nullptr)->state.a;
                }));
                if (sink == 42) printf(" ");
            }
            std::sort(rec.begin(), rec.end());
            std::sort(look.begin(), look.end());
            double r = rec[rec.size() / 2], l = look[look.size() / 2];
            printf("| %s | %u | %.1f | %.1f | %.2fx |\n", c.name, k, r, l, r / l);
        }
    }
    printf("\n");
}

void print_bytes() {
    printf("## Bytes per zone (`top_keys_bytes(K)`: two windows' summaries, each K entries of %zu bytes,\n"
           "the heap and the index, and its cells of %zu bytes)\n\n", sizeof(rl::TopEntry), sizeof(rl::TopCell));
    printf("| K | cells | bytes | bytes per K |\n| ---: | ---: | ---: | ---: |\n");
    for (uint32_t k : {4u, 8u, 16u, 32u, 64u, 128u, 256u, 1024u, 4096u}) {
        size_t b = rl::top_keys_bytes(k);
        printf("| %u | %u | %zu | %.0f |\n", k, rl::top_keys_cells(k), b, static_cast<double>(b) / k);
    }
    printf("\n");
}

}  // namespace

// For callgrind (top_keys.sh): 10^6 records of a stream into a summary of K entries, then the
// same keys looked up in a slot table; the script counts the instructions of each function.
void run_for_callgrind(uint32_t k, bool uniform) {
    std::vector<Key> keys = make_keys(100000, "key");
    std::vector<uint32_t> ids = make_stream(1000000, keys.size(), uniform ? 0 : 1.0, 3);
    Summary s(k, 5);
    int64_t now = kStart;
    for (uint32_t i : ids) s.record(keys[i], now++);
    std::vector<uint64_t> tmem((sizeof(rl::TableHeader) + (size_t{1} << 17) * 64) / 8);
    rl::TableHeader* table = rl::table_format(tmem.data(), tmem.size() * 8, rl::slot_size_for(0), 0x9e3779b97f4a7c15ULL);
    for (const Key& key : keys) rl::table_acquire(table, key.hash, 0, nullptr);
    uint64_t sink = 0;
    for (uint32_t i : ids) sink += rl::table_acquire(table, keys[i].hash, 0, nullptr)->state.a;
    printf("%llu\n", static_cast<unsigned long long>(sink));
}

int main(int argc, char** argv) {
    int rounds = 5, seeds = 100;
    for (int i = 1; i < argc; i++) {
        if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            rounds = std::atoi(argv[++i]);
        } else if (std::strcmp(argv[i], "--seeds") == 0 && i + 1 < argc) {
            seeds = std::atoi(argv[++i]);
        } else if (std::strcmp(argv[i], "--callgrind") == 0 && i + 2 < argc) {
            run_for_callgrind(static_cast<uint32_t>(std::atoi(argv[i + 1])), std::strcmp(argv[i + 2], "uniform") == 0);
            return 0;
        } else {
            fprintf(stderr, "usage: %s [--rounds N] [--seeds N] | --callgrind K zipf|uniform\n", argv[0]);
            return 2;
        }
    }
    if (rounds < 1 || seeds < 1) return 2;
    print_bytes();
    print_flooders(seeds);
    print_accuracy(1);
    print_speed(rounds, 3);
    return 0;
}
