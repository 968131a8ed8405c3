#!/usr/bin/env bash
# cost-sweep.sh: calibrates the planner's CostModel (attention/plan.h) on the GPU it runs on.
# Runs bench/gpu/attention_bench once per point of a grid of (alpha, item, wide_key) and
# prints one markdown row per point with the graph-replay milliseconds of every case, so that
# a new kind of device (its memory/compute balance moves what a key, a row and an item cost)
# gets its own defaults measured rather than the H100's guessed.
#   scripts/cost-sweep.sh BIN [ROUNDS]
#   BIN: attention_bench; ROUNDS (default 2): passes over the grid, alternating points so that
#   drift of the machine lands on every point alike.
# Env: CASES (default pat,decode,mixed), ALPHAS (default "1"), ITEMS (default "48 96 144 192"),
#   WIDE_KEYS (default "1.5 2 2.5 3 4"), RAW (a file that keeps the raw JSON lines as they come,
#   so a run cut short still leaves what it measured; default a temporary file).
set -euo pipefail
bin=${1:?usage: cost-sweep.sh ATTENTION_BENCH [ROUNDS]}
rounds=${2:-2}
cases=${CASES:-pat,decode,mixed}
read -r -a alphas <<<"${ALPHAS:-1}"
read -r -a items <<<"${ITEMS:-48 96 144 192}"
read -r -a wides <<<"${WIDE_KEYS:-1.5 2 2.5 3 4}"
tmp=$(mktemp -d)
raw=${RAW:-$tmp/rows}
: >"$raw"
for ((r = 0; r < rounds; r++)); do
  for a in "${alphas[@]}"; do
    for i in "${items[@]}"; do
      for w in "${wides[@]}"; do
        "$bin" --cases "$cases" --cost-alpha "$a" --cost-item "$i" --cost-wide-key "$w" \
          2>/dev/null | grep '^{"case"' | sed "s/^/$a $i $w /" >>"$raw"
      done
    done
  done
done
python3 - "$raw" <<'PY'
import json, sys, collections
runs = collections.defaultdict(list)  # (alpha, item, wide) -> case/policy -> [graph ms]
names = []
for line in open(sys.argv[1]):
    a, i, w, js = line.split(" ", 3)
    b = json.loads(js)
    key = b["case"] + "/" + b["policy"]
    if key not in names: names.append(key)
    runs[(a, i, w)].append((key, b["graph_ms"]))
print("| alpha | item | wide_key | " + " | ".join(names) + " |")
print("|---|---|---|" + "---|" * len(names))
for point, vals in runs.items():
    by = collections.defaultdict(list)
    for k, v in vals: by[k].append(v)
    cells = ["/".join(f"{v:.4f}" for v in by[k]) for k in names]
    print("| " + " | ".join(point) + " | " + " | ".join(cells) + " |")
PY
rm -rf "$tmp"
