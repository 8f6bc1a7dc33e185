#!/usr/bin/env bash
# The top keys' summary (src/core/keys/top_keys.h): its error against the bound on 10^6
# rejections over 10^5 keys, issue 32's flooders, ns per rejection against a slot-table lookup,
# its bytes (tests/bench/top_keys_bench.cpp); then, with valgrind, the instructions of one
# rejection's record against those of one slot-table lookup (callgrind: the machine's speed
# and load do not move them). A benchmark, not a test. ~2 minutes.
#
#   tests/bench/top_keys.sh [--rounds N] [--seeds N]
#
# Builds into build/bench (cmake -DRL_BENCH=ON, RelWithDebInfo: -O2, as the module).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT="$ROOT/build/bench"
cmake -S "$ROOT/tests" -B "$OUT" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRL_BENCH=ON >/dev/null
cmake --build "$OUT" --target rl_top_keys_bench -j"$(nproc 2>/dev/null || echo 2)" >/dev/null
BIN="$OUT/bench/rl_top_keys_bench"
"$BIN" "$@"

command -v valgrind >/dev/null || { echo "(no valgrind: no instruction counts)"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Instructions inside one function (its callees included) over the run's 10^6 calls.
per_call() {
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" --toggle-collect="$1" "$BIN" --callgrind "$2" "$3" \
        >/dev/null 2>&1
    callgrind_annotate "$tmp/cg" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); printf "%.0f", $1 / 1000000 }'
}
echo "## Instructions per call (callgrind, 10^6 calls over 10^5 keys)"
echo
echo "| stream | K | top_keys_record | table_acquire (the zone's lookup) | ratio |"
echo "| --- | ---: | ---: | ---: | ---: |"
for stream in zipf uniform; do
    for k in 16 256; do
        rec=$(per_call 'rl::top_keys_record*' "$k" "$stream")
        look=$(per_call 'rl::table_acquire*' "$k" "$stream")
        awk -v s="$stream" -v k="$k" -v r="$rec" -v l="$look" \
            'BEGIN { printf "| %s | %s | %d | %d | %.2fx |\n", s, k, r, l, r / l }'
    done
done
