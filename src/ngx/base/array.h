// A growable array of plain values in a worker's own memory (ngx_alloc), for what the engine
// collects in one pass: never in shared memory, never holding C++-managed objects.
#pragma once

#include "ngx/ngx_include.h"

#include <type_traits>

template <typename T>
struct rl_array_t {
    static_assert(std::is_trivially_copyable<T>::value, "plain values only");
    T* elts;
    size_t n;
    size_t cap;

    // Room for `more` values after the n there are; false without memory (nothing changed).
    bool reserve(size_t more, ngx_log_t* log) {
        if (n + more <= cap) return true;
        size_t want = cap ? cap * 2 : 16;
        while (want < n + more) want *= 2;
        auto* mem = static_cast<T*>(ngx_alloc(want * sizeof(T), log));
        if (mem == nullptr) return false;
        if (n) ngx_memcpy(mem, elts, n * sizeof(T));
        ngx_free(elts);
        elts = mem;
        cap = want;
        return true;
    }
    // A new value at the end (uninitialised), or nullptr without memory.
    T* push(ngx_log_t* log) { return reserve(1, log) ? &elts[n++] : nullptr; }
    void reset() {
        ngx_free(elts);
        *this = rl_array_t{};
    }
};
