#!/usr/bin/env python3
"""model_f32_check.py: our f32 CPU forward vs Hugging Face transformers in float32 and float64.

Tells a semantic difference (RoPE scaling, norms, tied embeddings...) from bf16 rounding: with
f32 on both sides the last-prompt-token logits must agree to ~1e-4 relative
(max|ours - hf| / max|hf|). Run ON the GPU machine (transformers there), with `packserve` (CPU
build) carried. For each --archs dummy model (`packserve make-dummy-model`, seed 0, bf16
weights, exact in f32) and variants cut from it to bisect a difference:
  full          the checkpoint as written
  L1            layer 0 only (config num_hidden_layers = 1, other layers' tensors dropped)
  L1-norescale  L1 with "rope_scaling": null (plain RoPE), only for configs that have scaling
it runs `packserve generate --max-tokens 1 --logits-out` (CPU backend, f32) and transformers
(GPU, TF32 off) in float32 and float64 on the same token ids (no BOS added on either side),
and prints one JSON line per (arch, variant): ours_vs_hf32, ours_vs_hf64, hf32_vs_hf64, argmax
agreement, and for full models transformers' bf16 path vs hf64 too. It also prints
transformers' rope parameters and max relative difference between its inv_freq and ours
(ops_cpu.cc's formulas restated in numpy), and its attention_scaling beside the attention
factor our config.json carries (yarn). With --cuda-bin PATH/forward_logits the CUDA bf16
backend's logits of the full model are compared with hf64 as well.
With --greedy N it instead decodes N greedy tokens (no stop tokens) per prompt of the full
models and prints how many prompts give identical tokens, and the mean first divergence, for
ours f32 vs transformers f32, CUDA bf16 vs transformers f32 / bf16 / ours f32, and
transformers bf16 vs transformers f32 (the yardstick: how much bf16 alone changes).
Usage: model_f32_check.py --bin PATH/packserve [--cuda-bin PATH/forward_logits]
                          [--archs tiny-llama,llama-3.2-1b] [--prompts 8] [--work DIR]
                          [--greedy N]
Exit 1 when some ours_vs_hf32 exceeds --tol (default 1e-3).
"""
import argparse, json, math, os, shutil, subprocess, sys, time

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from hf_greedy import greedy_tokens


def our_inv_freq(d, theta, sc, max_positions):
    """ops_cpu.cc rope_inv_freq (llama3, yarn, linear), in float64."""
    f = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    if not sc:
        return f
    kind, factor = sc.get("rope_type") or sc.get("type"), sc["factor"]
    if kind == "linear":
        return f / factor
    orig = float(sc.get("original_max_position_embeddings") or max_positions)
    if kind == "yarn":
        cdim = lambda b: d * math.log(orig / (2 * math.pi * b)) / (2 * math.log(theta))
        lo, hi = cdim(sc.get("beta_fast") or 32), cdim(sc.get("beta_slow") or 1)
        if sc.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, d - 1)
        hi = hi + 0.001 if lo == hi else hi
        ramp = np.clip((np.arange(d // 2) - lo) / (hi - lo), 0, 1)
        return ramp * f / factor + (1 - ramp) * f
    lo, hi = sc["low_freq_factor"], sc["high_freq_factor"]
    wl = 2 * math.pi / f
    s = (orig / wl - lo) / (hi - lo)
    return np.where(wl > orig / lo, f / factor,
                    np.where(wl < orig / hi, f, (1 - s) * f / factor + s * f))


def make_variant(src, dst, layers=None, no_rescale=False):
    os.makedirs(dst, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if os.path.exists(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), dst)
    cfg = json.load(open(os.path.join(src, "config.json")))
    t = load_file(os.path.join(src, "model.safetensors"))
    if layers is not None:
        cfg["num_hidden_layers"] = layers
        keep = tuple(f"model.layers.{i}." for i in range(layers))
        t = {k: v for k, v in t.items() if not k.startswith("model.layers.") or k.startswith(keep)}
    if no_rescale:
        cfg["rope_scaling"] = None
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)
    save_file(t, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})


def run_hf(model, prompts):
    out = []
    with torch.no_grad():
        for p in prompts:
            out.append(model(torch.tensor([p], device="cuda")).logits[0, -1].double().cpu().numpy())
    return np.stack(out)


def hf_logits(d, prompts):
    """transformers' logits in float32, then the same model cast to float64 (exact: bf16 weights)."""
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).cuda().eval()
    rot = model.model.rotary_emb
    info = {"rope_parameters": getattr(model.config, "rope_parameters", None),
            "rope_scaling": getattr(model.config, "rope_scaling", None),
            "attention_scaling": float(getattr(rot, "attention_scaling", 1.0)),
            "inv_freq": rot.inv_freq.double().cpu().numpy() if hasattr(rot, "inv_freq") else None}
    hf32 = run_hf(model, prompts)
    hf64 = run_hf(model.double(), prompts)
    del model
    torch.cuda.empty_cache()
    return hf32, hf64, info


def hf_greedy(d, prompts, dtype, tokens):
    model = AutoModelForCausalLM.from_pretrained(d, dtype=dtype).cuda().eval()
    out = greedy_tokens(model, prompts, tokens)
    del model
    torch.cuda.empty_cache()
    return out


def agreement(x, y, tokens):
    """(prompts whose tokens are identical, mean index of the first differing token)."""
    div = [next((k for k, (s, t) in enumerate(zip(a, b)) if s != t), tokens) for a, b in zip(x, y)]
    return sum(a == b for a, b in zip(x, y)), float(np.mean(div))


def greedy_check(a, arch, prompts):
    """Greedy agreement: our f32 CPU backend and CUDA bf16 backend vs transformers f32 and bf16."""
    base = os.path.join(a.work, arch)
    r = subprocess.run([a.bin, "make-dummy-model", "--arch", arch, "--out", base],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(json.dumps({"model": arch, "error": r.stderr[-800:]}), flush=True)
        return
    vocab = json.load(open(os.path.join(base, "config.json")))["vocab_size"]
    prompts = [[t % vocab for t in p] for p in prompts]  # tiny vocabularies
    ppath = os.path.join(a.work, arch + "-greedy-prompts.jsonl")
    with open(ppath, "w") as f:
        for p in prompts:
            f.write(json.dumps({"prompt_ids": p}) + "\n")
    n = a.greedy
    res = {"model": arch, "prompts": len(prompts), "tokens": n}
    t0 = time.time()
    r = subprocess.run([a.bin, "generate", "--model", base, "--prompts", ppath, "--max-tokens", str(n),
                        "--temperature", "0", "--ignore-eos", "--threads", str(os.cpu_count() or 1)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(json.dumps({"model": arch, "error": r.stderr[-800:]}), flush=True)
        return
    ours = [json.loads(l)["token_ids"] for l in r.stdout.splitlines() if l.startswith("{")]
    res["ours_f32_wall_s"] = round(time.time() - t0, 1)
    hf32 = hf_greedy(base, prompts, torch.float32, n)
    res["ours_f32_vs_hf_f32"] = agreement(ours, hf32, n)
    print(json.dumps(res), flush=True)
    if a.cuda_bin:
        c = subprocess.run([a.cuda_bin, "--model", base, "--prompts", ppath, "--max-tokens", str(n),
                            "--out", base + "-cuda.jsonl"], capture_output=True, text=True)
        if c.returncode == 0:
            cu = [json.loads(l)["ids"] for l in open(base + "-cuda.jsonl")]
            res["cuda_bf16_vs_hf_f32"] = agreement(cu, hf32, n)
            res["cuda_bf16_vs_ours_f32"] = agreement(cu, ours, n)
        else:
            res["cuda_error"] = c.stderr[-400:]
        print(json.dumps(res), flush=True)
    hfbf = hf_greedy(base, prompts, torch.bfloat16, n)
    res["hf_bf16_vs_hf_f32"] = agreement(hfbf, hf32, n)
    if a.cuda_bin and "cuda_bf16_vs_hf_f32" in res:
        res["cuda_bf16_vs_hf_bf16"] = agreement(cu, hfbf, n)
    print(json.dumps(res), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--cuda-bin")
    ap.add_argument("--archs", default="tiny-llama,llama-3.2-1b")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--work", default="/tmp/model_f32_check")
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--greedy", type=int, default=0,
                    help="instead: greedy agreement over this many tokens (full models only)")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    os.makedirs(a.work, exist_ok=True)
    rng = np.random.default_rng(0)  # the same prompts as model_gpu_check.py's first ones
    prompts = [rng.integers(100, 5000, size=int(rng.integers(8, 97))).tolist() for _ in range(a.prompts)]
    import transformers
    print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                      "device": torch.cuda.get_device_name(0)}), flush=True)
    err = lambda x, y: float(np.abs(x - y).max() / np.abs(y).max())
    if a.greedy > 0:
        for arch in a.archs.split(","):
            greedy_check(a, arch, prompts)
        return
    ok = True
    for arch in a.archs.split(","):
        base = os.path.join(a.work, arch)
        r = subprocess.run([a.bin, "make-dummy-model", "--arch", arch, "--out", base],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(json.dumps({"model": arch, "error": r.stderr[-800:]}), flush=True)
            ok = False
            continue
        cfg = json.load(open(os.path.join(base, "config.json")))
        arch_prompts = [[t % cfg["vocab_size"] for t in p] for p in prompts]  # tiny vocabularies
        ppath = os.path.join(a.work, arch + "-prompts.jsonl")
        with open(ppath, "w") as f:
            for p in arch_prompts:
                f.write(json.dumps({"prompt_ids": p}) + "\n")
        variants = [("full", base), ("L1", base + "-L1")]
        make_variant(base, base + "-L1", layers=1)
        if cfg.get("rope_scaling"):
            make_variant(base, base + "-L1-norescale", layers=1, no_rescale=True)
            variants.append(("L1-norescale", base + "-L1-norescale"))
        for name, d in variants:
            t0 = time.time()
            npy = d + ".npy"
            r = subprocess.run([a.bin, "generate", "--model", d, "--prompts", ppath, "--max-tokens", "1",
                                "--ignore-eos", "--threads", str(os.cpu_count() or 1),
                                "--logits-out", npy], capture_output=True, text=True)
            if r.returncode != 0:
                print(json.dumps({"model": arch, "variant": name, "error": r.stderr[-800:]}), flush=True)
                ok = False
                continue
            ours = np.load(npy).astype(np.float64)
            ours_s = time.time() - t0
            hf32, hf64, info = hf_logits(d, arch_prompts)
            v = hf32.shape[1]
            ours = ours[:, :v]
            dc = json.load(open(os.path.join(d, "config.json")))
            mine = our_inv_freq(dc["head_dim"], dc["rope_theta"], dc.get("rope_scaling"),
                                dc["max_position_embeddings"])
            ours_attention = (dc.get("rope_scaling") or {}).get("attention_factor", 1.0)
            res = {"model": arch, "variant": name, "prompts": len(prompts),
                   "ours_vs_hf32": max(err(ours[i], hf32[i]) for i in range(len(prompts))),
                   "ours_vs_hf64": max(err(ours[i], hf64[i]) for i in range(len(prompts))),
                   "hf32_vs_hf64": max(err(hf32[i], hf64[i]) for i in range(len(prompts))),
                   "argmax_same_ours_hf64": int(sum(ours[i].argmax() == hf64[i].argmax()
                                                    for i in range(len(prompts)))),
                   "hf_inv_freq_rel_max": (float((np.abs(info["inv_freq"] - mine) / mine).max())
                                           if info["inv_freq"] is not None else None),
                   "hf_rope": str(info["rope_parameters"] or info["rope_scaling"]),
                   "attention_scaling": info["attention_scaling"],
                   "ours_attention_factor": ours_attention, "ours_wall_s": round(ours_s, 1)}
            if name == "full":
                m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16).cuda().eval()
                hfbf = run_hf(m, arch_prompts)
                del m
                torch.cuda.empty_cache()
                res["hf_bf16_vs_hf64"] = max(err(hfbf[i], hf64[i]) for i in range(len(prompts)))
                if a.cuda_bin:
                    c = subprocess.run([a.cuda_bin, "--model", d, "--prompts", ppath, "--max-tokens", "1",
                                        "--logits-out", d + "-cuda.npy"], capture_output=True, text=True)
                    if c.returncode == 0:
                        cu = np.load(d + "-cuda.npy").astype(np.float64)[:, :v]
                        res["cuda_bf16_vs_hf64"] = max(err(cu[i], hf64[i]) for i in range(len(prompts)))
                        res["cuda_bf16_vs_ours_f32"] = max(err(cu[i], ours[i]) for i in range(len(prompts)))
                    else:
                        res["cuda_error"] = c.stderr[-400:]
            res["ok"] = res["ours_vs_hf32"] < a.tol
            ok &= res["ok"]
            print(json.dumps(res), flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
