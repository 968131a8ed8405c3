#!/usr/bin/env bash
# spec-bench.sh: speculative decoding by prompt lookup (--num-speculative-tokens) against one
# token per step, through `packserve generate` on dummy models: greedy, --ignore-eos, prompts of
# PROMPT_LEN random ids, MAX_TOKENS output tokens each. Two inits bracket real models:
#   copy   (make-dummy-model --init copy: the output repeats the context with a period, so
#           nearly every draft is accepted: the best case)
#   random (near-flat logits: drafts are seldom proposed and seldom accepted: the cost of
#           trying)
# Prints a markdown table (and writes it to $OUT/spec-bench.md): arch, init, weights
# (--quantization), logprobs, prompts at once, --graph-capture-after, drafts per step, output
# tokens/s, steps, CUDA graph captures, drafts verified and accepted.
# Env: BIN (packserve executable; default build/src/packserve/cli/packserve), BACKEND (cpu |
# cuda; default cuda), ARCHS (default "qwen3-0.6b"), BATCHES (default "1 32"), SPECS (default
# "0 4"), CAPTURE_AFTER (--graph-capture-after values, default "1"), PROMPT_LEN (512),
# MAX_TOKENS (256), LOGPROBS (1: every request asks --logprobs, so the drafts are verified by
# draw rows instead of argmax rows; default 0), TEMPERATURE (default 0; above 0 the drafts are
# verified by rejection sampling in draw rows, --seed 1), INITS (default "copy random"), QUANT
# (--quantization values, default "none"; fp8 needs the cuda backend), OUT (default ./out).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/src/packserve/cli/packserve}
BACKEND=${BACKEND:-cuda}
ARCHS=${ARCHS:-qwen3-0.6b}
BATCHES=${BATCHES:-1 32}
SPECS=${SPECS:-0 4}
CAPTURE_AFTER=${CAPTURE_AFTER:-1}
PROMPT_LEN=${PROMPT_LEN:-512}
MAX_TOKENS=${MAX_TOKENS:-256}
LOGPROBS=${LOGPROBS:-0}
TEMPERATURE=${TEMPERATURE:-0}
INITS=${INITS:-copy random}
QUANT=${QUANT:-none}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
table="$OUT/spec-bench.md"
{
  echo "| arch | init | weights | logprobs | temperature | prompts | capture after | drafts/step | output tok/s | steps | graph captures | drafts verified | accepted |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
} >"$table"
for arch in $ARCHS; do
  for init in $INITS; do
    model="$work/$arch-$init"
    "$BIN" make-dummy-model --arch "$arch" --init "$init" --out "$model" >/dev/null
    for batch in $BATCHES; do
      python3 - "$batch" "$PROMPT_LEN" >"$work/prompts.jsonl" <<'EOF'
import json, random, sys
random.seed(7)
for _ in range(int(sys.argv[1])):
    print(json.dumps({"prompt_ids": [random.randrange(10, 250) for _ in range(int(sys.argv[2]))]}))
EOF
      for quant in $QUANT; do
        for after in $CAPTURE_AFTER; do
          for spec in $SPECS; do
            extra=()
            [[ $BACKEND == cuda ]] && extra=(--graph-capture-after "$after")
            [[ $LOGPROBS == 1 ]] && extra+=(--logprobs)
            [[ $TEMPERATURE != 0 ]] && extra+=(--seed 1)
            "$BIN" generate --model "$model" --prompts "$work/prompts.jsonl" --backend "$BACKEND" \
              --quantization "$quant" --temperature "$TEMPERATURE" --ignore-eos \
              --max-tokens "$MAX_TOKENS" "${extra[@]}" --num-speculative-tokens "$spec" \
              >/dev/null 2>"$work/err"
            line=$(grep '^generate:' "$work/err")
            field() { sed -n "s/.* $1=\([0-9.e+-]*\).*/\1/p" <<<"$line"; }
            printf '| %s | %s | %s | %s | %s | %s | %s | %s | %.0f | %s | %s | %s | %s |\n' \
              "$arch" "$init" "$quant" "$LOGPROBS" "$TEMPERATURE" "$batch" "$after" "$spec" \
              "$(field output_tokens_per_s)" "$(field steps)" "$(field graph_captures)" \
              "$(field draft_tokens)" "$(field accepted_draft_tokens)" >>"$table"
          done
        done
      done
    done
  done
done
cat "$table"
