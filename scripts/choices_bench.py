#!/usr/bin/env python3
"""choices_bench.py: one streaming /v1/completions request with n choices of one long prompt
against a running `packserve serve` (scripts/gpu-serve-check.sh `choices` step; stdlib only).

For each n in --n-list and each of --rounds rounds it sends a fresh random token-id prompt of
--prompt-tokens (seeded per run, so no run finds another's prompt in the prefix cache), asks
for --max-tokens per choice (ignore_eos, temperature 1, plus the --extra fields), and prints one
JSON line:
  ttft_first_ms / ttft_last_ms: arrival to the first token of the first / of the last choice
  e2e_ms: arrival to [DONE]; output_tokens: the choices' tokens (usage); out_tok_s =
  output_tokens / e2e; cached_tokens_after: a repeat of the same prompt with n = 1 reports how
  many prompt tokens the cache then holds (the pages the n choices shared);
  engine_cached_delta: the engine's cached prompt tokens over the request (from /metrics:
  packserve_prefix_cache_hits_total), i.e. how many of the n x prompt tokens were not
  computed again.
"""
import argparse
import http.client
import json
import random
import sys
import time
import urllib.parse
import urllib.request


def metrics(url):
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def cached_tokens(m):
    return m.get("packserve_prefix_cache_hits_total", 0.0)


def post(url, body, stream):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError(f"HTTP {res.status}: {res.read()[:300]!r}")
    if not stream:
        return json.loads(res.read())
    return res


def run(a, n, seed):
    rng = random.Random(seed)
    prompt = [rng.randrange(min(1000, a.vocab // 2), a.vocab) for _ in range(a.prompt_tokens)]
    body = {"model": a.model, "prompt": prompt, "n": n, "max_tokens": a.max_tokens,
            "temperature": 1.0, "ignore_eos": True, "stream": True, "logprobs": 0,
            "stream_options": {"include_usage": True}, **a.extra}
    before = metrics(a.url)
    t0 = time.perf_counter()
    res = post(a.url, body, True)
    first = {}
    usage = None
    while True:
        line = res.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("usage"):
            usage = chunk["usage"]
        for c in chunk.get("choices", []):
            # logprobs: every chunk lists its tokens, also those whose text is held back
            if (c.get("logprobs") or {}).get("tokens") and c["index"] not in first:
                first[c["index"]] = time.perf_counter() - t0
    e2e = time.perf_counter() - t0
    after = metrics(a.url)
    again = post(a.url, {"model": a.model, "prompt": prompt, "max_tokens": 1}, False)
    return {"n": n, "prompt_tokens": a.prompt_tokens, "max_tokens": a.max_tokens,
            "choices_with_tokens": len(first),
            "ttft_first_ms": round(1000 * min(first.values()), 1),
            "ttft_last_ms": round(1000 * max(first.values()), 1),
            "e2e_ms": round(1000 * e2e, 1),
            "output_tokens": usage["completion_tokens"],
            "out_tok_s": round(usage["completion_tokens"] / e2e, 1),
            "usage_prompt_tokens": usage["prompt_tokens"],
            "engine_cached_delta": round(cached_tokens(after) - cached_tokens(before)),
            "cached_tokens_after": again["usage"]["prompt_tokens_details"]["cached_tokens"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", required=True, help="the served model name")
    ap.add_argument("--vocab", type=int, default=32000, help="prompt ids are drawn below this")
    ap.add_argument("--n-list", default="1,16")
    ap.add_argument("--prompt-tokens", type=int, default=4000)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--label", default="")
    ap.add_argument("--extra", type=json.loads, default={},
                    help='JSON object of more request fields, e.g. \'{"frequency_penalty": 0.5}\'')
    a = ap.parse_args()
    for r in range(a.rounds):
        for n in map(int, a.n_list.split(",")):
            row = run(a, n, seed=1000 * r + n)
            row["label"] = a.label
            row["extra"] = a.extra
            row["round"] = r + 1
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    sys.exit(main())
