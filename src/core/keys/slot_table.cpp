#include "core/keys/slot_table.h"

#include <cstring>

namespace rl {

namespace {

constexpr uint32_t kMagic = 0x524c5434;  // "RLT4": bump when the layout changes

uint32_t* buckets(TableHeader* t) { return reinterpret_cast<uint32_t*>(t + 1); }

size_t slots_offset(uint32_t nbuckets) {
    size_t off = sizeof(TableHeader) + size_t{nbuckets} * sizeof(uint32_t);
    return (off + 7) & ~size_t{7};
}

Slot* slot_at(TableHeader* t, uint32_t ref) {  // ref = index + 1
    char* base = reinterpret_cast<char*>(t) + slots_offset(t->nbuckets);
    return reinterpret_cast<Slot*>(base + size_t{ref - 1} * t->slot_size);
}

uint32_t bucket_of(const TableHeader* t, const KeyHash& h, uint8_t algo) {
    // Multiply-shift (Dietzfelbinger et al.): with a random odd multiplier, two distinct
    // 64-bit inputs share a bucket with probability at most 2 / nbuckets, whoever chose them.
    // The algorithm takes part so one key under two algorithms does not share a chain head.
    if (t->bucket_bits == 0) return 0;
    uint64_t x = h.lo ^ (uint64_t{algo} * 0x9e3779b97f4a7c15ULL);
    return static_cast<uint32_t>((x * t->secret) >> (64 - t->bucket_bits));
}

void lru_unlink(TableHeader* t, Slot* s) {
    if (s->lru_prev) slot_at(t, s->lru_prev)->lru_next = s->lru_next;
    else t->lru_head = s->lru_next;
    if (s->lru_next) slot_at(t, s->lru_next)->lru_prev = s->lru_prev;
    else t->lru_tail = s->lru_prev;
    s->lru_prev = s->lru_next = 0;
}

void lru_push_front(TableHeader* t, Slot* s, uint32_t ref) {
    s->lru_prev = 0;
    s->lru_next = t->lru_head;
    if (t->lru_head) slot_at(t, t->lru_head)->lru_prev = ref;
    t->lru_head = ref;
    if (!t->lru_tail) t->lru_tail = ref;
}

void chain_unlink(TableHeader* t, Slot* s, uint32_t ref) {
    uint32_t* link = &buckets(t)[bucket_of(t, s->hash, s->algo)];
    while (*link && *link != ref) link = &slot_at(t, *link)->chain;
    if (*link == ref) *link = s->chain;
    s->chain = 0;
}

void set_gen(Slot* s, uint32_t gen) {
    s->gen[0] = static_cast<uint8_t>(gen);
    s->gen[1] = static_cast<uint8_t>(gen >> 8);
    s->gen[2] = static_cast<uint8_t>(gen >> 16);
}

// A slot's first life in this layout: drawn from the table's random secret, so a table laid
// out anew over an old one (a reload that changed its layout) does not count its slots' lives
// from where the old one did (what an old worker took from the old table matches a new life
// only by a 1 in 2^24 chance).
uint32_t first_gen(const TableHeader* t) { return static_cast<uint32_t>(t->secret >> 40) & kGenMask; }

uint32_t floor_pow2(uint32_t n) {
    uint32_t p = 1;
    while (p <= n / 2) p <<= 1;
    return p;
}

}  // namespace

uint32_t slot_size_for(uint64_t ring_bytes) {
    uint64_t size = sizeof(Slot) + ((ring_bytes + 7) & ~uint64_t{7});
    return size > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(size);
}

namespace {

// The bucket count and slot count for a block: one bucket per slot at first guess, rounded
// down to a power of two, then as many slots as the rest of the block holds.
bool layout(size_t bytes, uint32_t slot_size, uint32_t* nbuckets, uint32_t* nslots) {
    if (slot_size < sizeof(Slot) || bytes < sizeof(TableHeader) + 8) return false;
    uint64_t guess = (bytes - sizeof(TableHeader) - 8) / (uint64_t{slot_size} + sizeof(uint32_t));
    if (guess == 0) return false;
    if (guess > UINT32_MAX / 2) guess = UINT32_MAX / 2;
    uint32_t nb = floor_pow2(static_cast<uint32_t>(guess));
    size_t off = slots_offset(nb);
    if (off >= bytes) return false;
    uint64_t fit = (bytes - off) / slot_size;
    if (fit == 0) return false;
    *nbuckets = nb;
    *nslots = static_cast<uint32_t>(fit > UINT32_MAX / 2 ? UINT32_MAX / 2 : fit);
    return true;
}

}  // namespace

uint32_t table_capacity(size_t bytes, uint32_t slot_size) {
    uint32_t nb, n;
    return layout(bytes, slot_size, &nb, &n) ? n : 0;
}

bool table_compatible(const TableHeader* t, uint32_t slot_size) {
    return t != nullptr && t->magic == kMagic && t->slot_size == slot_size;
}

TableHeader* table_format(void* mem, size_t bytes, uint32_t slot_size, uint64_t secret) {
    uint32_t nb, n;
    if (!layout(bytes, slot_size, &nb, &n)) return nullptr;
    auto* t = static_cast<TableHeader*>(mem);
    std::memset(t, 0, sizeof(*t));
    t->magic = kMagic;
    t->slot_size = slot_size;
    t->nbuckets = nb;
    while ((uint32_t{1} << t->bucket_bits) < nb) t->bucket_bits++;
    t->secret = secret | 1;
    t->nslots = n;
    std::memset(buckets(t), 0, size_t{t->nbuckets} * sizeof(uint32_t));
    return t;
}

Slot* table_acquire(TableHeader* t, const KeyHash& hash, uint8_t algo, bool* fresh) {
    uint32_t b = bucket_of(t, hash, algo);
    for (uint32_t ref = buckets(t)[b]; ref; ) {
        Slot* s = slot_at(t, ref);
        if (s->hash == hash && s->algo == algo) {
            if (t->lru_head != ref) {
                lru_unlink(t, s);
                lru_push_front(t, s, ref);
            }
            if (fresh) *fresh = false;
            return s;
        }
        ref = s->chain;
    }

    uint32_t ref, gen;
    if (t->used < t->nslots) {
        ref = ++t->used;
        gen = first_gen(t);
    } else {
        ref = t->lru_tail;  // full: the least recently used key forgets its state
        Slot* victim = slot_at(t, ref);
        chain_unlink(t, victim, ref);
        lru_unlink(t, victim);
        t->evictions++;
        gen = slot_gen(victim) + 1;
    }

    Slot* s = slot_at(t, ref);
    std::memset(static_cast<void*>(s), 0, t->slot_size);
    set_gen(s, gen);
    s->hash = hash;
    s->algo = algo;
    s->chain = buckets(t)[b];
    buckets(t)[b] = ref;
    lru_push_front(t, s, ref);
    if (fresh) *fresh = true;
    return s;
}

Slot* table_find(TableHeader* t, const KeyHash& hash, uint8_t algo) {
    for (uint32_t ref = buckets(t)[bucket_of(t, hash, algo)]; ref; ) {
        Slot* s = slot_at(t, ref);
        if (s->hash == hash && s->algo == algo) return s;
        ref = s->chain;
    }
    return nullptr;
}

SlotLife slot_life(const TableHeader* t, const Slot* s) { return SlotLife{table_ref(t, s), slot_gen(s)}; }

Slot* table_find_life(TableHeader* t, const KeyHash& hash, uint8_t algo, SlotLife life) {
    // Every slot handed out is in the table (an evicted one is made again at once): the
    // reference finds it without walking a chain.
    if (life.ref == 0 || life.ref > t->used) return nullptr;
    Slot* s = slot_at(t, life.ref);
    return s->hash == hash && s->algo == algo && slot_gen(s) == life.gen ? s : nullptr;
}

void table_reset(TableHeader* t, Slot* s) {
    s->state = State{};
    std::memset(static_cast<void*>(s + 1), 0, t->slot_size - sizeof(Slot));
    set_gen(s, slot_gen(s) + 1);
}

Slot* table_slot(TableHeader* t, uint32_t ref) { return slot_at(t, ref); }

uint32_t table_ref(const TableHeader* t, const Slot* s) {
    const char* base = reinterpret_cast<const char*>(t) + slots_offset(t->nbuckets);
    return static_cast<uint32_t>((reinterpret_cast<const char*>(s) - base) / t->slot_size) + 1;
}

uint32_t table_chain_length(TableHeader* t, const KeyHash& hash, uint8_t algo) {
    uint32_t n = 0;
    for (uint32_t ref = buckets(t)[bucket_of(t, hash, algo)]; ref; ref = slot_at(t, ref)->chain) n++;
    return n;
}

}  // namespace rl
