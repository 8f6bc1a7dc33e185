// Prints keys chosen offline to share one bucket of a shared-memory table under the bucket
// index the module used before it was keyed (low bits of the public-constant SipHash): the
// hash-flooding test (t/16-hash-flood.t) sends them.
//   crafted_keys NBUCKETS COUNT [ALGO]
#include "core/algo/algorithm.h"
#include "core/keys/key_hash.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: crafted_keys NBUCKETS COUNT [ALGO]\n");
        return 2;
    }
    uint64_t nbuckets = std::strtoull(argv[1], nullptr, 10);
    uint64_t count = std::strtoull(argv[2], nullptr, 10);
    rl::Algo algo = rl::Algo::gcra;
    if (argc > 3 && !rl::parse_algo(argv[3], algo)) return 2;
    if (nbuckets == 0 || (nbuckets & (nbuckets - 1)) != 0) return 2;
    char key[32];
    for (uint64_t i = 0, found = 0; found < count; i++) {
        int len = std::snprintf(key, sizeof(key), "f%llx", static_cast<unsigned long long>(i));
        rl::KeyHash h = rl::hash_key(key, static_cast<size_t>(len), rl::kDefaultHashK0, rl::kDefaultHashK1);
        uint64_t mix = h.lo ^ (static_cast<uint64_t>(algo) * 0x9e3779b97f4a7c15ULL);
        if (((mix >> 32 ^ mix) & (nbuckets - 1)) != 0) continue;
        std::printf("%s\n", key);
        found++;
    }
    return 0;
}
