#!/usr/bin/env bash
# fp8-kv-scales-check.sh: a checkpoint's K/V cache scales end to end through
# `generate --kv-cache-dtype fp8` (docs/forward-cuda.md "Float8 KV cache"). The copy dummy model
# of ARCH (default qwen3-0.6b; docs/model.md: greedy tokens repeat the prompt with period 7) is
# written three times: as generated, with every layer's k_scale 0.5 / v_scale 2, and with both
# 0.001 (nearly every K/V value saturates). It prints the periodic tokens of each run and whether
# the scaled checkpoint under --kv-cache-dtype auto (scales unused) gives exactly the tokens of
# the plain one.
# Env: BIN (packserve binary, required), BACKEND (cuda), ARCH, OUT (default ./out), MAX_TOKENS (64),
# PROMPT_LENS (space list, default "1024 300 57 2000 9 600 128 1500").
set -uo pipefail
cd "$(dirname "$0")/.."
P=${BIN:?set BIN to the packserve binary}
BACKEND=${BACKEND:-cuda}; ARCH=${ARCH:-qwen3-0.6b}; OUT=${OUT:-out}; MAX_TOKENS=${MAX_TOKENS:-64}
PROMPT_LENS=${PROMPT_LENS:-1024 300 57 2000 9 600 128 1500}
mkdir -p "$OUT"; W=$(mktemp -d)
"$P" make-dummy-model --arch "$ARCH" --init copy --out "$W/plain" >/dev/null || exit 1
python3 scripts/add_kv_scales.py "$W/plain" "$W/scaled" 0.5 2.0 || exit 1
python3 scripts/add_kv_scales.py "$W/plain" "$W/tiny_scales" 0.001 0.001 || exit 1
python3 - $PROMPT_LENS > "$W/prompts.jsonl" <<'PY'
import json, random, sys
random.seed(7)
for n in sys.argv[1:]:
    print(json.dumps({"prompt_ids": [random.randrange(10, 250) for _ in range(int(n))]}))
PY
runs="plain:auto plain:fp8 scaled:auto scaled:fp8 tiny_scales:fp8"
for run in $runs; do
  model=${run%%:*}; kv=${run##*:}
  "$P" generate --model "$W/$model" --prompts "$W/prompts.jsonl" --backend "$BACKEND" \
    --kv-cache-dtype "$kv" --ignore-eos --max-tokens "$MAX_TOKENS" --temperature 0 \
    >"$OUT/kvscales_${model}_$kv.jsonl" 2>"$OUT/kvscales_${model}_$kv.err" || {
    echo "$model $kv failed: $(tail -1 "$OUT/kvscales_${model}_$kv.err")"; exit 1; }
done
python3 - "$W/prompts.jsonl" "$OUT" $runs <<'PY'
import json, sys
prompts = [json.loads(l)["prompt_ids"] for l in open(sys.argv[1])]
out, runs = sys.argv[2], [r.replace(":", "_") for r in sys.argv[3:]]
tokens = {}
for run in runs:
    outs = [json.loads(l)["token_ids"] for l in open(f"{out}/kvscales_{run}.jsonl")]
    tokens[run] = outs
    hit = total = 0
    for p, o in zip(prompts, outs):
        s = p + o
        for k in range(len(o)):
            total += 1
            hit += o[k] == s[len(p) + k - 1 - 7]  # the token after position n is the one at n - 7
    print(f"{run}: periodic {hit}/{total}")
print("scaled checkpoint under auto equals plain:", tokens["scaled_auto"] == tokens["plain_auto"])
PY
rm -rf "$W"
