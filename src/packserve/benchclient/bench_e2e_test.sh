#!/usr/bin/env bash
# bench_e2e_test.sh PACKSERVE WORK_DIR: `packserve bench` end to end (CTest bench_e2e, label
# cpu): a real `packserve serve` on the tiny dummy model on a free loopback port, a 12-request
# window of the bundled Mooncake slice replayed against it; asserts every request completed,
# result.json's counts and vLLM field names, the four PNGs, --compare of the run with itself
# (every defined ratio 1.000), and the same window --in-process. Fails loudly with the logs.
set -euo pipefail
bin=$1
work=$2
src_root=$(cd "$(dirname "$0")/../../.." && pwd)
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; for f in "$work"/*.log; do echo "--- $f" >&2; tail -20 "$f" >&2; done; exit 1; }

"$bin" make-dummy-model --arch tiny --out "$work/model" >/dev/null || fail "make-dummy-model"

http_status() {
  local code=""
  if { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; then
    printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$1" >&3
    read -r -t 5 _ code _ <&3 || true
    exec 3<&- 3>&-
  fi
  echo "$code"
}
server_pid=""
stop_server() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
}
trap stop_server EXIT
port=$((20000 + RANDOM % 20000))
ready=""
for attempt in 1 2 3 4 5; do
  while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
  "$bin" serve --model "$work/model" --port "$port" >"$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 300); do
    kill -0 "$server_pid" 2>/dev/null || break
    if [ "$(http_status /health)" = "200" ]; then ready=1; break; fi
    sleep 0.1
  done
  [ -n "$ready" ] && break
  stop_server
  port=$((port + 1))
done
[ -n "$ready" ] || fail "server never healthy"

trace="$src_root/data/traces/mooncake_slice.jsonl"
common=(--trace "$trace" --max-requests 12 --time-scale 0.2
        --max-input-tokens 600 --max-output-tokens 8 --slo-ttft-ms 60000 --slo-tpot-ms 60000)
# Over HTTP the prompts come from the built-in dummy tokenizer (--dummy-model tiny: no checkpoint
# is made), the one make-dummy-model wrote into the served model: the server's usage counts
# must agree with the synthesized lengths.
"$bin" bench "${common[@]}" --dummy-model tiny --url "http://127.0.0.1:$port" --out "$work/http" \
  >"$work/http_stdout.log" 2>"$work/http_stderr.log" || fail "bench --url exited $?"
stop_server
server_pid=""

r="$work/http/result.json"
for field in '"completed": 12' '"failed": 0' '"num_prompts": 12' '"prompt_token_mismatches": 0' \
             '"running_batch_source": "server /metrics"' '"server_prompt_token_mismatches": 0'; do
  grep -qF "$field" "$r" || fail "result.json lacks $field"
done
for field in duration total_input_tokens total_output_tokens request_throughput request_goodput \
             output_throughput total_token_throughput mean_ttft_ms median_ttft_ms p99_ttft_ms \
             mean_tpot_ms p99_tpot_ms mean_itl_ms mean_e2el_ms input_lens output_lens ttfts itls \
             errors; do
  grep -qF "\"$field\":" "$r" || fail "result.json lacks field $field"
done
# ignore_eos: every request produced its max_tokens (8, or the trace's shorter output).
grep -qF '"num_early_stops": 0' "$r" || fail "some outputs stopped early despite ignore_eos"
grep -qF "Successful requests:                     12" "$work/http_stdout.log" || fail "summary table"
for png in ttft_cdf tpot_cdf throughput_over_time running_batch_over_time; do
  head -c 8 "$work/http/$png.png" | od -An -tx1 | tr -d ' \n' | grep -q '^89504e470d0a1a0a$' ||
    fail "$png.png is not a PNG"
done

"$bin" bench --compare "$r" "$r" >"$work/compare.log" || fail "--compare exited $?"
grep -q "request_throughput .* 1.000$" "$work/compare.log" || fail "--compare ratio"
if grep -E '[0-9]\.[0-9]{3}$' "$work/compare.log" | grep -vqE ' 1\.000$'; then
  fail "--compare of a run with itself gave a ratio other than 1.000"
fi

"$bin" bench "${common[@]}" --model "$work/model" --in-process --out "$work/inproc" \
  --temperature 0.8 --top-k 5 --top-p 0.9 --logprobs --frequency-penalty 0.5 \
  >"$work/inproc_stdout.log" 2>"$work/inproc_stderr.log" || fail "bench --in-process exited $?"
grep -qF '"completed": 12' "$work/inproc/result.json" || fail "in-process run incomplete"
for field in '"top_k": 5' '"top_p": 0.9' '"logprobs": true' '"temperature": 0.8' \
  '"frequency_penalty": 0.5' '"presence_penalty": null'; do
  grep -qF "$field" "$work/inproc/result.json" || fail "in-process result.json lacks $field"
done
grep -qF '"running_batch_source": "engine num_running"' "$work/inproc/result.json" ||
  fail "in-process running batch source"

# Bad input: exit 2 with a message naming the flag.
set +e
"$bin" bench --trace "$trace" --url "http://127.0.0.1:$port" >/dev/null 2>"$work/bad.log"
rc=$?
set -e
[ "$rc" = 2 ] || fail "missing tokenizer: exit $rc, expected 2"
grep -q -- "--tokenizer" "$work/bad.log" || fail "missing tokenizer message"
set +e
"$bin" bench --trace "$trace" --dummy-model tiny --url "http://127.0.0.1:$port" --top-p 1.5 \
  >/dev/null 2>"$work/bad_top_p.log"
rc=$?
set -e
[ "$rc" = 2 ] || fail "--top-p 1.5: exit $rc, expected 2"
grep -qF -- "--top-p: expected a number in (0, 1]" "$work/bad_top_p.log" || fail "--top-p message"
set +e
"$bin" bench --trace "$trace" --dummy-model tiny --url "http://127.0.0.1:$port" \
  --presence-penalty 3 >/dev/null 2>"$work/bad_penalty.log"
rc=$?
set -e
[ "$rc" = 2 ] || fail "--presence-penalty 3: exit $rc, expected 2"
grep -qF -- "--presence-penalty: expected a number in [-2, 2]" "$work/bad_penalty.log" ||
  fail "--presence-penalty message"
echo "bench_e2e: ok"
