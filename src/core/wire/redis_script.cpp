// The Lua source is src/core/wire/lua/*.lua, one file per part in the order Redis runs them;
// the build turns it into redis_script_lua.h (lua/embed.sh), assembled here two ways: as the
// EVAL script (its body runs on every call) and as a Redis Function library (its top level runs
// once, at FUNCTION LOAD; each FCALL runs only the registered function). Both carry the same
// local functions; the two test/production variants differ only in `clock`.
#include "core/wire/redis_script.h"

#include <cstddef>

#include "core/wire/sha1.h"
#include "redis_script_lua.h"  // generated from lua/*.lua at build time (lua/embed.sh)

namespace rl {

namespace {

// The library: "#!lua name=<name>\n", the pieces, then the registration of <name>.
constexpr char kLibraryHead[] = "#!lua name=";
constexpr char kRegisterHead[] = "redis.register_function{function_name = '";
constexpr char kRegisterTail[] = "', callback = run}\n";

// Compile-time concatenation of string literals into one NUL-terminated array.
template <size_t N>
struct Text {
    char s[N];
};

template <size_t... Ns>
constexpr Text<(Ns + ...) - sizeof...(Ns) + 1> join(const char (&... parts)[Ns]) {
    Text<(Ns + ...) - sizeof...(Ns) + 1> t{};
    const char* ptrs[] = {parts...};
    const size_t lens[] = {(Ns - 1)...};
    size_t k = 0;
    for (size_t i = 0; i < sizeof...(Ns); i++) {
        for (size_t j = 0; j < lens[i]; j++) t.s[k++] = ptrs[i][j];
    }
    t.s[k] = '\0';
    return t;
}

constexpr auto kProduction = join(RL_LUA_SCRIPT_REDIS);
constexpr auto kInjected = join(RL_LUA_SCRIPT_ARGV);
// A library's body and registration, without its name: what the name is a hash of.
constexpr auto kLibraryProduction = join(RL_LUA_LIBRARY_REDIS, kRegisterTail);
constexpr auto kLibraryInjected = join(RL_LUA_LIBRARY_ARGV, kRegisterTail);

constexpr size_t kNamePrefixLen = sizeof(kFunctionNamePrefix) - 1;
static_assert(kNamePrefixLen + kFunctionHashLen == kFunctionNameLen, "function name layout");
static_assert(kFunctionHashLen <= kSha1HexLen, "the name's hash is a prefix of a SHA-1");

struct Sha1Text {
    char hex[kSha1HexLen + 1];
};

Sha1Text sha1_of(std::string_view text) {
    Sha1Text h;
    sha1_hex(text.data(), text.size(), h.hex);
    return h;
}

// A library's text: its head, body (the registration's tail included) and name, placed.
template <size_t N>
struct Library {
    char name[kFunctionNameLen + 1];
    char text[sizeof(kLibraryHead) - 1 + kFunctionNameLen + 1 + sizeof(kRegisterHead) - 1 + kFunctionNameLen + N];
    size_t len;
};

template <size_t N>
Library<N> library_of(const Text<N>& body) {
    Library<N> lib;
    const Sha1Text h = sha1_of(std::string_view(body.s, N - 1));
    size_t k = 0;
    for (size_t i = 0; i < kNamePrefixLen; i++) lib.name[k++] = kFunctionNamePrefix[i];
    for (size_t i = 0; i < kFunctionHashLen; i++) lib.name[k++] = h.hex[i];
    lib.name[k] = '\0';

    // The body ends with the registration's tail: the name and its head go just before it.
    const size_t tail = sizeof(kRegisterTail) - 1, before = N - 1 - tail;
    k = 0;
    auto put = [&lib, &k](const char* s, size_t n) {
        for (size_t i = 0; i < n; i++) lib.text[k++] = s[i];
    };
    put(kLibraryHead, sizeof(kLibraryHead) - 1);
    put(lib.name, kFunctionNameLen);
    put("\n", 1);
    put(body.s, before);
    put(kRegisterHead, sizeof(kRegisterHead) - 1);
    put(lib.name, kFunctionNameLen);
    put(body.s + before, tail);
    lib.text[k] = '\0';
    lib.len = k;
    return lib;
}

// Function statics, as for script_sha1 (one per variant).
const Library<sizeof(kLibraryInjected.s)>& injected_library() {
    static const Library<sizeof(kLibraryInjected.s)> lib = library_of(kLibraryInjected);
    return lib;
}

const Library<sizeof(kLibraryProduction.s)>& production_library() {
    static const Library<sizeof(kLibraryProduction.s)> lib = library_of(kLibraryProduction);
    return lib;
}

}  // namespace

std::string_view script_text(bool injected_time) noexcept {
    if (injected_time) return std::string_view(kInjected.s, sizeof(kInjected.s) - 1);
    return std::string_view(kProduction.s, sizeof(kProduction.s) - 1);
}

const char* script_sha1(bool injected_time) noexcept {
    // Function statics: computed once, on the first call, without the heap.
    if (injected_time) {
        static const Sha1Text injected = sha1_of(script_text(true));
        return injected.hex;
    }
    static const Sha1Text production = sha1_of(script_text(false));
    return production.hex;
}

std::string_view function_library_text(bool injected_time) noexcept {
    if (injected_time) return std::string_view(injected_library().text, injected_library().len);
    return std::string_view(production_library().text, production_library().len);
}

const char* function_name(bool injected_time) noexcept {
    return injected_time ? injected_library().name : production_library().name;
}

}  // namespace rl
