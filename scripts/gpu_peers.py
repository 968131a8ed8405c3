#!/usr/bin/env python3
"""gpu_peers.py: the PyTorch peers of bench/gpu/attention_bench.cu on the same configurations.

bf16, head_dim 128, 32 query / 8 KV heads; lengths lognormal (median 1000, sigma 1.0, cap
16k; numpy's generator, so the same distribution as the C++ bench, not the same draws).
Peers, each where present:
  sdpa_padded  torch.nn.functional.scaled_dot_product_attention on [B, H, Lmax, D] padded
               K/V with a boolean length mask (enable_gqa), decode and prefill
  flex         torch.nn.attention.flex_attention (compiled) over the packed batch with a
               document + causal mask
  varlen       torch.nn.attention.varlen.varlen_attn (flash attention 2 varlen), causal via
               window_size=(-1, 0) when the argument exists, else is_causal=True; KV heads
               repeated to 32 when the installed version has no enable_gqa
Bytes are the K/V bytes *needed* (each request's context once, 8 KV heads), as in the C++
bench, so padding and repeated heads show up as lost efficiency. Timing: eager = median of
triton.testing.do_bench (L2 flushed); graph = median per call of CUDA-graph replays of 10
back-to-back calls. One JSON line per (case, peer); errors are reported, never fatal.
Usage: python3 scripts/gpu_peers.py [--cases decode,prefill] [--skip-flex]
"""
import argparse
import inspect
import json
import math
import statistics
import sys

import numpy as np
import torch
import torch.nn.functional as F

QO, KV, D = 32, 8, 128
DEV = "cuda"
DT = torch.bfloat16


def decode_lens(batch, seed):
    rng = np.random.default_rng(seed)
    return [int(min(max(1, x), 16384)) for x in rng.lognormal(math.log(1000), 1.0, batch)]


def prefill_lens():
    rng = np.random.default_rng(48)
    lens = [int(min(max(1, x), 8192)) for x in rng.lognormal(math.log(200), 1.0, 48)]
    return lens + [8192]


def graph_ms(fn, calls=10, reps=15):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / calls)
    return statistics.median(times)


def eager_ms(fn):
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def report(case, peer, fn, kv_bytes, flops, note=""):
    try:
        fn()
        torch.cuda.synchronize()
        e = eager_ms(fn)
        try:
            g = graph_ms(fn)
        except Exception as ex:  # noqa: BLE001 - graph capture unsupported for this peer
            g = float("nan")
            print(f"# {case} {peer}: graph capture failed: {ex}", file=sys.stderr)
        t = g if g == g else e
        print(json.dumps({"case": case, "peer": peer, "graph_ms": round(g, 4), "eager_ms": round(e, 4),
                          "effective_gbps": round(kv_bytes / (t * 1e-3) / 1e9, 1),
                          "useful_tflops": round(flops / (t * 1e-3) / 1e12, 1), "note": note}), flush=True)
    except Exception as ex:  # noqa: BLE001
        print(json.dumps({"case": case, "peer": peer, "error": str(ex)[:300]}), flush=True)
    torch.cuda.empty_cache()


def varlen_fn():
    try:
        from torch.nn.attention.varlen import varlen_attn
    except Exception:  # noqa: BLE001
        return None, {}
    params = inspect.signature(varlen_attn).parameters
    return varlen_attn, params


def run_case(case, q_lens, kv_lens, skip_flex):
    b = len(q_lens)
    kv_bytes = sum(kv_lens) * KV * D * 2 * 2
    flops = 4.0 * D * QO * sum(sum(k - q + i + 1 for i in range(q)) for q, k in zip(q_lens, kv_lens))
    tq, tk = sum(q_lens), sum(kv_lens)
    q = torch.randn(tq, QO, D, device=DEV, dtype=DT)
    k = torch.randn(tk, KV, D, device=DEV, dtype=DT)
    v = torch.randn(tk, KV, D, device=DEV, dtype=DT)
    cu_q = torch.tensor([0] + list(np.cumsum(q_lens)), device=DEV, dtype=torch.int32)
    cu_k = torch.tensor([0] + list(np.cumsum(kv_lens)), device=DEV, dtype=torch.int32)

    # SDPA with padding (skip when the padded K/V would not fit comfortably).
    lq, lk = max(q_lens), max(kv_lens)
    if b * lk * QO * D * 2 * 3 < 40e9 and b * QO * lq * lk < 4e9:
        qp = torch.zeros(b, QO, lq, D, device=DEV, dtype=DT)
        kp = torch.zeros(b, KV, lk, D, device=DEV, dtype=DT)
        vp = torch.zeros(b, KV, lk, D, device=DEV, dtype=DT)
        mask = torch.zeros(b, 1, lq, lk, device=DEV, dtype=torch.bool)
        for i, (ql, kl) in enumerate(zip(q_lens, kv_lens)):
            qp[i, :, :ql] = q[cu_q[i]:cu_q[i + 1]].transpose(0, 1)
            kp[i, :, :kl] = k[cu_k[i]:cu_k[i + 1]].transpose(0, 1)
            vp[i, :, :kl] = v[cu_k[i]:cu_k[i + 1]].transpose(0, 1)
            pos = torch.arange(ql, device=DEV)[:, None] + (kl - ql)
            mask[i, 0, :ql, :kl] = torch.arange(kl, device=DEV)[None, :] <= pos
        mask[:, :, :, 0] |= True  # padded query rows see one key (no NaN)
        report(case, "sdpa_padded",
               lambda: F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, enable_gqa=True),
               kv_bytes, flops)
        del qp, kp, vp, mask
    else:
        print(json.dumps({"case": case, "peer": "sdpa_padded", "error": "padded tensors too large"}))

    fn, params = varlen_fn()
    if fn is not None:
        kw = {}
        kk, vv = k, v
        if "enable_gqa" in params:
            kw["enable_gqa"] = True
        else:
            kk, vv = k.repeat_interleave(QO // KV, dim=1), v.repeat_interleave(QO // KV, dim=1)
        if "window_size" in params:
            kw["window_size"] = (-1, 0)
        else:
            kw["is_causal"] = True
        note = ("gqa native" if "enable_gqa" in kw else "kv heads repeated x4") + ", " + (
            "window_size=(-1,0)" if "window_size" in kw else "is_causal")
        report(case, "varlen", lambda: fn(q, kk, vv, cu_q, cu_k, lq, lk, **kw), kv_bytes, flops, note)
        del kk, vv
    else:
        print(json.dumps({"case": case, "peer": "varlen", "error": "torch.nn.attention.varlen absent"}))

    if not skip_flex:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention

            doc_q = torch.repeat_interleave(torch.arange(b, device=DEV), torch.tensor(q_lens, device=DEV))
            doc_k = torch.repeat_interleave(torch.arange(b, device=DEV), torch.tensor(kv_lens, device=DEV))
            pos_q = torch.cat([torch.arange(kl - ql, kl, device=DEV) for ql, kl in zip(q_lens, kv_lens)])
            pos_k = torch.cat([torch.arange(kl, device=DEV) for kl in kv_lens])

            def mask_mod(bb, h, qi, ki):
                return (doc_q[qi] == doc_k[ki]) & (pos_k[ki] <= pos_q[qi])

            bm = create_block_mask(mask_mod, 1, None, tq, tk, device=DEV)
            flex = torch.compile(flex_attention)
            qf = q.transpose(0, 1).unsqueeze(0)
            kf = k.transpose(0, 1).unsqueeze(0)
            vf = v.transpose(0, 1).unsqueeze(0)
            report(case, "flex", lambda: flex(qf, kf, vf, block_mask=bm, enable_gqa=True), kv_bytes, flops)
        except Exception as ex:  # noqa: BLE001
            print(json.dumps({"case": case, "peer": "flex", "error": str(ex)[:300]}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="decode,prefill")
    ap.add_argument("--skip-flex", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(0)
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name()}))
    if "decode" in a.cases:
        for batch in (32, 128, 512):
            kv = decode_lens(batch, 1000 + batch)
            run_case(f"decode_b{batch}", [1] * batch, kv, a.skip_flex)
    if "prefill" in a.cases:
        lens = prefill_lens()
        run_case("prefill_48", lens, lens, a.skip_flex)


if __name__ == "__main__":
    main()
