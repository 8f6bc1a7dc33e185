#include "core/keys/top_keys.h"

#include <cstring>
#include <initializer_list>

namespace rl {

namespace {

constexpr uint32_t kMagic = 0x524c4b31;  // "RLK1": bump when the layout changes
constexpr uint8_t kTopLive = 1;          // the entry has a key (a dropped key's entry has none)
constexpr uint8_t kTopTruncated = 2;     // its text was cut at kTopTextMax
constexpr uint32_t kMinCells = 512;
constexpr uint32_t kMaxCells = 32768;

size_t align8(size_t n) { return (n + 7) & ~size_t{7}; }

uint32_t ceil_pow2(uint32_t n) {
    uint32_t p = 1;
    while (p < n) p <<= 1;
    return p;
}

uint32_t log2_of(uint32_t pow2) {
    uint32_t b = 0;
    while ((uint32_t{1} << b) < pow2) b++;
    return b;
}

uint32_t index_slots(uint32_t k) { return ceil_pow2(2 * k); }

size_t summary_size(uint32_t k, uint32_t nindex, uint32_t ncells) {
    return align8(sizeof(TopSummary) + size_t{k} * sizeof(TopEntry) + (size_t{k} + nindex) * sizeof(uint32_t) +
                  size_t{ncells} * sizeof(TopCell));
}

// ---- a summary's parts, by offset from the block ------------------------------------------------

TopSummary* summary(const TopKeys* t, uint32_t i) {
    const char* base = reinterpret_cast<const char*>(t) + align8(sizeof(TopKeys)) + i * t->summary_bytes;
    return reinterpret_cast<TopSummary*>(const_cast<char*>(base));
}
TopEntry* entries(const TopSummary* s) { return reinterpret_cast<TopEntry*>(const_cast<TopSummary*>(s) + 1); }
uint32_t* heap_of(const TopKeys* t, const TopSummary* s) { return reinterpret_cast<uint32_t*>(entries(s) + t->k); }
uint32_t* index_of(const TopKeys* t, const TopSummary* s) { return heap_of(t, s) + t->k; }
TopCell* cells_of(const TopKeys* t, const TopSummary* s) {
    return reinterpret_cast<TopCell*>(index_of(t, s) + t->nindex);
}

// Keyed multiply-shift (as the slot table's buckets): a client cannot choose keys that share
// an index run or a cell. The index and the cells read different halves of the hash.
uint32_t home(const TopKeys* t, const KeyHash& h) {
    return static_cast<uint32_t>((h.lo * t->secret) >> (64 - t->index_bits));
}
uint32_t cell_of(const TopKeys* t, const KeyHash& h) {
    return static_cast<uint32_t>((h.hi * (t->secret ^ 0x9e3779b97f4a7c14ULL)) >> (64 - t->cell_bits));
}

uint32_t saturate(uint64_t v) { return v > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(v); }

// ---- the cells: bounds for the keys not in the table ----------------------------------------------
//
// A cell keeps two counts: one for its owner (the first key counted in it, known by a 32-bit
// fingerprint of its hash) and one for every other key. Each bounds the rejections, not counted
// in the table, of the keys it stands for: a key rejected again while another key's count fills
// the cell is then not charged with that count (the flooders' counts stay exact where two keys
// share a cell). Keys with the same fingerprint share the owner's count: still a bound.

uint32_t fingerprint(const KeyHash& h) { return static_cast<uint32_t>(h.lo >> 32); }

uint32_t cell_bound(const TopCell& c, const KeyHash& h) {
    return c.own != 0 && c.fp == fingerprint(h) ? c.own : c.other;
}

// A rejection not counted in the table (`add` 1), or an evicted key's count (`at_least`).
void cell_charge(TopCell* c, const KeyHash& h, uint64_t add, uint64_t at_least) {
    uint32_t* n;
    if (c->own == 0) {
        c->fp = fingerprint(h);
        n = &c->own;
    } else {
        n = c->fp == fingerprint(h) ? &c->own : &c->other;
    }
    uint64_t v = uint64_t{*n} + add;
    *n = saturate(v > at_least ? v : at_least);
}

// ---- the index: key -> entry (index + 1), linear probing ----------------------------------------

// The index slot holding the key, or the empty slot where it would go.
uint32_t probe(const TopKeys* t, const TopSummary* s, const KeyHash& h) {
    const uint32_t* idx = index_of(t, s);
    const TopEntry* es = entries(s);
    uint32_t mask = t->nindex - 1;
    uint32_t i = home(t, h);
    while (idx[i] != 0 && !(es[idx[i] - 1].hash == h)) i = (i + 1) & mask;
    return i;
}

TopEntry* find(const TopKeys* t, const TopSummary* s, const KeyHash& h) {
    uint32_t ref = index_of(t, s)[probe(t, s, h)];
    return ref ? &entries(s)[ref - 1] : nullptr;
}

// Backward-shift deletion: the entries after it in its run move back to where a lookup finds them.
void index_remove(const TopKeys* t, TopSummary* s, const KeyHash& h) {
    uint32_t* idx = index_of(t, s);
    uint32_t mask = t->nindex - 1;
    uint32_t i = probe(t, s, h);
    if (idx[i] == 0) return;
    for (uint32_t j = i;;) {
        j = (j + 1) & mask;
        if (idx[j] == 0) break;
        uint32_t k = home(t, entries(s)[idx[j] - 1].hash);
        // Keep idx[j] where it is if its home lies cyclically in (i, j].
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            idx[i] = idx[j];
            i = j;
        }
    }
    idx[i] = 0;
}

// ---- the min-heap of counts ----------------------------------------------------------------------

void heap_set(uint32_t* heap, TopEntry* es, uint32_t pos, uint32_t e) {
    heap[pos] = e;
    es[e].heap = pos;
}

void sift_up(const TopKeys* t, TopSummary* s, uint32_t pos) {
    uint32_t* heap = heap_of(t, s);
    TopEntry* es = entries(s);
    uint32_t e = heap[pos];
    while (pos > 0) {
        uint32_t parent = (pos - 1) / 2;
        if (es[heap[parent]].count <= es[e].count) break;
        heap_set(heap, es, pos, heap[parent]);
        pos = parent;
    }
    heap_set(heap, es, pos, e);
}

void sift_down(const TopKeys* t, TopSummary* s, uint32_t pos) {
    uint32_t* heap = heap_of(t, s);
    TopEntry* es = entries(s);
    uint32_t n = s->used, e = heap[pos];
    for (;;) {
        uint32_t child = 2 * pos + 1;
        if (child >= n) break;
        if (child + 1 < n && es[heap[child + 1]].count < es[heap[child]].count) child++;
        if (es[heap[child]].count >= es[e].count) break;
        heap_set(heap, es, pos, heap[child]);
        pos = child;
    }
    heap_set(heap, es, pos, e);
}

// ---- windows ---------------------------------------------------------------------------------------

void clear(const TopKeys* t, TopSummary* s) {
    std::memset(s, 0, sizeof(*s));
    std::memset(index_of(t, s), 0, size_t{t->nindex} * sizeof(uint32_t));
    std::memset(static_cast<void*>(cells_of(t, s)), 0, size_t{t->ncells} * sizeof(TopCell));
}

int64_t window_end(int64_t now, int64_t w) {
    int64_t q = now / w;
    if (now % w < 0) q--;  // floor, for a clock before 1970
    return (q + 1) * w;
}

// The summary counting `now`, moved on to now's window first.
TopSummary* current(TopKeys* t, int64_t now) {
    TopSummary* s = summary(t, t->cur);
    if (s->until_us != 0 && now < s->until_us) return s;  // a clock gone back counts into it too
    TopSummary* o = summary(t, t->cur ^ 1);
    if (s->until_us != 0 && now < s->until_us + t->window_us) {
        clear(t, o);  // the window before the one ending becomes the previous: it goes
        o->until_us = s->until_us + t->window_us;
        t->cur ^= 1;
        return o;
    }
    clear(t, s);
    clear(t, o);
    s->until_us = window_end(now, t->window_us);
    return s;
}

// The summaries a read at `now` counts: the current window's and the previous one's.
void counted(const TopKeys* t, int64_t now, const TopSummary** newer, const TopSummary** older) {
    const TopSummary* s = summary(t, t->cur);
    const TopSummary* o = summary(t, t->cur ^ 1);
    *newer = *older = nullptr;
    if (s->until_us == 0) return;
    if (now < s->until_us) {
        *newer = s;
        if (o->until_us != 0 && o->until_us == s->until_us - t->window_us) *older = o;
    } else if (now < s->until_us + t->window_us) {
        *older = s;
    }
}

void write_text(TopEntry* e, const TopText& text) {
    size_t len = text.write ? text.write(text.arg, e->text, kTopTextMax) : 0;
    e->text_len = static_cast<uint16_t>(len > kTopTextMax ? kTopTextMax : len);
    if (len > kTopTextMax) e->flags |= kTopTruncated;
}

// ---- reading ---------------------------------------------------------------------------------------

// Largest first: the count, then the surer (smaller error), then the latest, then the hash.
bool ranks_above(const TopItem& a, const TopItem& b) {
    if (a.count != b.count) return a.count > b.count;
    if (a.error != b.error) return a.error < b.error;
    if (a.last_us != b.last_us) return a.last_us > b.last_us;
    if (a.hash.hi != b.hash.hi) return a.hash.hi > b.hash.hi;
    return a.hash.lo > b.hash.lo;
}

// out[0..n) as a heap whose root ranks lowest: the n best items seen so far.
void down(TopItem* out, size_t n, size_t pos) {
    for (;;) {
        size_t low = pos, l = 2 * pos + 1, r = l + 1;
        if (l < n && ranks_above(out[low], out[l])) low = l;
        if (r < n && ranks_above(out[low], out[r])) low = r;
        if (low == pos) return;
        TopItem tmp = out[pos];
        out[pos] = out[low];
        out[low] = tmp;
        pos = low;
    }
}

void offer(TopItem* out, size_t n, size_t* got, const TopItem& item) {
    if (*got < n) {
        size_t pos = (*got)++;
        out[pos] = item;
        while (pos > 0 && ranks_above(out[(pos - 1) / 2], out[pos])) {
            TopItem tmp = out[pos];
            out[pos] = out[(pos - 1) / 2];
            out[(pos - 1) / 2] = tmp;
            pos = (pos - 1) / 2;
        }
    } else if (ranks_above(item, out[0])) {
        out[0] = item;
        down(out, n, 0);
    }
}

TopItem item_of(const TopEntry& e) {
    TopItem it{};
    it.hash = e.hash;
    it.count = e.count;
    it.error = e.error;
    it.blocked = e.blocked;
    it.first_us = e.first_us;
    it.last_us = e.last_us;
    it.text_len = e.text_len;
    it.truncated = (e.flags & kTopTruncated) != 0;
    std::memcpy(it.text, e.text, e.text_len);
    return it;
}

// A key's counts in the other window: its entry's, or, absent there, its cell's bound.
void add_other(const TopKeys* t, const TopSummary* other, TopItem* it, bool* found) {
    *found = false;
    if (other == nullptr) return;
    if (const TopEntry* f = find(t, other, it->hash)) {
        *found = true;
        it->count += f->count;
        it->error += f->error;
        it->blocked += f->blocked;
        if (f->first_us < it->first_us) it->first_us = f->first_us;
        if (f->last_us > it->last_us) it->last_us = f->last_us;
        return;
    }
    uint32_t cell = cell_bound(cells_of(t, other)[cell_of(t, it->hash)], it->hash);
    it->count += cell;
    it->error += cell;
}

}  // namespace

size_t top_text_bytes(const void* arg, char* out, size_t cap) {
    const auto* b = static_cast<const TopTextBytes*>(arg);
    std::memcpy(out, b->data, b->len < cap ? b->len : cap);
    return b->len;
}

uint32_t top_keys_cells(uint32_t k) {
    uint64_t want = uint64_t{k} * 8;
    if (want < kMinCells) return kMinCells;
    return want > kMaxCells ? kMaxCells : ceil_pow2(static_cast<uint32_t>(want));
}

size_t top_keys_bytes(uint32_t k) {
    if (k == 0 || k > kTopMaxK) return 0;
    return align8(sizeof(TopKeys)) + 2 * summary_size(k, index_slots(k), top_keys_cells(k));
}

TopKeys* top_keys_format(void* mem, size_t bytes, uint32_t k, int64_t window_us, uint64_t secret) {
    size_t need = top_keys_bytes(k);
    if (mem == nullptr || need == 0 || bytes < need || window_us <= 0) return nullptr;
    auto* t = static_cast<TopKeys*>(mem);
    std::memset(t, 0, sizeof(*t));
    t->k = k;
    t->ncells = top_keys_cells(k);
    t->nindex = index_slots(k);
    t->cell_bits = log2_of(t->ncells);
    t->index_bits = log2_of(t->nindex);
    t->window_us = window_us;
    t->secret = secret | 1;
    t->summary_bytes = summary_size(k, t->nindex, t->ncells);
    clear(t, summary(t, 0));
    clear(t, summary(t, 1));
    t->magic = kMagic;
    return t;
}

bool top_keys_compatible(const TopKeys* t, uint32_t k, int64_t window_us) {
    return t != nullptr && t->magic == kMagic && t->k == k && t->window_us == window_us &&
           t->ncells == top_keys_cells(k) && t->nindex == index_slots(k) &&
           t->summary_bytes == summary_size(k, t->nindex, t->ncells);
}

void top_keys_record(TopKeys* t, const KeyHash& hash, const TopText& text, TopKind kind, int64_t now_us) {
    TopSummary* s = current(t, now_us);
    s->total++;
    uint32_t slot = probe(t, s, hash);
    uint32_t* idx = index_of(t, s);
    TopEntry* es = entries(s);
    if (idx[slot] != 0) {
        TopEntry* e = &es[idx[slot] - 1];
        e->count++;
        if (kind == TopKind::blocked) e->blocked++;
        e->last_us = now_us;
        sift_down(t, s, e->heap);
        return;
    }

    TopCell* cells = cells_of(t, s);
    TopCell* cell = &cells[cell_of(t, hash)];
    uint64_t before = cell_bound(*cell, hash);  // its rejections not counted in the table, at most
    uint32_t ref;
    if (s->used < t->k) {
        ref = s->used++;
        heap_set(heap_of(t, s), es, ref, ref);
    } else {
        TopEntry* victim = &es[heap_of(t, s)[0]];
        if (before + 1 <= victim->count) {
            cell_charge(cell, hash, 1, 0);  // not above the smallest count: counted in its cell
            return;
        }
        if (victim->flags & kTopLive) {
            // Its count goes to its cell, which then bounds it too.
            cell_charge(&cells[cell_of(t, victim->hash)], victim->hash, 0, victim->count);
            index_remove(t, s, victim->hash);
            slot = probe(t, s, hash);  // the removal may have moved the run
        }
        s->evictions++;
        ref = static_cast<uint32_t>(victim - es);
    }
    TopEntry* e = &es[ref];
    e->hash = hash;
    e->count = before + 1;
    e->error = before;
    e->blocked = kind == TopKind::blocked ? 1 : 0;
    e->first_us = e->last_us = now_us;
    e->flags = kTopLive;
    write_text(e, text);
    idx[slot] = ref + 1;
    // A new slot is the heap's last leaf (its count may be below its parent's); an evicted
    // root's successor counts more than the root did.
    sift_up(t, s, e->heap);
    sift_down(t, s, e->heap);
}

size_t top_keys_read(const TopKeys* t, int64_t now_us, TopItem* out, size_t n) {
    const TopSummary *newer, *older;
    counted(t, now_us, &newer, &older);
    size_t got = 0;
    if (n == 0) return 0;
    bool found;
    for (const TopSummary* s : {newer, older}) {
        if (s == nullptr) continue;
        const TopSummary* other = s == newer ? older : newer;
        const TopEntry* es = entries(s);
        for (uint32_t i = 0; i < s->used; i++) {
            if (!(es[i].flags & kTopLive)) continue;
            TopItem it = item_of(es[i]);
            add_other(t, other, &it, &found);
            if (found && s == older) continue;  // already counted with the newer window's entry
            offer(out, n, &got, it);
        }
    }
    // Sort: the lowest-ranked root goes to the end, repeatedly.
    for (size_t end = got; end > 1; end--) {
        TopItem tmp = out[0];
        out[0] = out[end - 1];
        out[end - 1] = tmp;
        down(out, end - 1, 0);
    }
    return got;
}

bool top_keys_drop(TopKeys* t, const KeyHash& hash) {
    bool any = false;
    for (uint32_t i = 0; i < 2; i++) {
        TopSummary* s = summary(t, i);
        TopEntry* e = find(t, s, hash);
        if (e == nullptr) continue;
        index_remove(t, s, hash);
        e->flags = 0;  // no key: it keeps its count and its place in the heap until evicted
        any = true;
    }
    return any;
}

TopWindow top_keys_window(const TopKeys* t, int64_t now_us) {
    const TopSummary *newer, *older;
    counted(t, now_us, &newer, &older);
    TopWindow w{0, 0, 0, 0};
    for (const TopSummary* s : {newer, older}) {
        if (s == nullptr) continue;
        w.total += s->total;
        w.bound += s->total / t->k;
        if (w.until_us == 0) w.until_us = s->until_us;
        w.from_us = s->until_us - t->window_us;
    }
    return w;
}

}  // namespace rl
