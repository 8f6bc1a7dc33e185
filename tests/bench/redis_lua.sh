#!/usr/bin/env bash
# Redis's cost of the Lua per check: FCALL of the function library against EVALSHA of the
# script (tests/bench/redis_lua.cpp), on one private redis-server. A benchmark, not a test.
#
#   tests/bench/redis_lua.sh [--rounds N] [--checks N] [--algos gcra,log] [--quota run] [--raw] ...
#   BASELINE_REV=e301042 tests/bench/redis_lua.sh      also that revision's EVAL script, as "baseline"
#   tests/bench/redis_lua.sh --parts [--groups N] [--keys-count N] [--proto NAME=FILE]...
#       where Redis's time per check goes in the Lua: variants of the function library, each with
#       one part done twice or left out, against production (tests/bench/lua_parts.py)
#
# Builds into build/bench (cmake -DRL_BENCH=ON).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT="$ROOT/build/bench"
cmake -S "$ROOT/tests" -B "$OUT" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRL_BENCH=ON >/dev/null
cmake --build "$OUT" --target rl_redis_lua_bench -j"$(nproc 2>/dev/null || echo 2)" >/dev/null

if [[ ${1:-} == --parts ]]; then
    shift
    RL_LUA_BENCH="$OUT/bench/rl_redis_lua_bench" exec python3 -B "$ROOT/tests/bench/lua_parts.py" "$@"
fi

extra=()
if [[ -n ${BASELINE_REV:-} ]]; then
    # That revision's production script, printed by a small program built on its src/core.
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    git -C "$ROOT" archive "$BASELINE_REV" src/core | tar -x -C "$tmp"
    inc=$(cd "$tmp/src" && find core -name redis_script.h)  # its place in that revision's tree
    printf '#include "%s"\n#include <cstdio>\nint main() { auto t = rl::script_text(false); fwrite(t.data(), 1, t.size(), stdout); }\n' "$inc" \
        >"$tmp/dump.cpp"
    # Since the Lua has its own files (src/core/wire/lua/*.lua), the build makes its header.
    mkdir -p "$tmp/generated"
    embed=$(find "$tmp/src/core" -path '*/lua/embed.sh')
    [[ -z $embed ]] || sh "$embed" "$tmp/generated/redis_script_lua.h"
    # All of src/core, as a revision's script may use any of it; the calendar's needs date/tz.
    g++ -std=c++17 -O1 -DUSE_OS_TZDB=1 -I"$tmp/src" -I"$tmp/generated" "$tmp/dump.cpp" \
        $(find "$tmp/src/core" -name "*.cpp") -ldate-tz -o "$tmp/dump"
    "$tmp/dump" >"$tmp/baseline.lua"
    extra=(--eval "baseline=$tmp/baseline.lua")
fi
"$OUT/bench/rl_redis_lua_bench" "$@" "${extra[@]}"
