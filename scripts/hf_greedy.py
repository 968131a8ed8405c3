"""hf_greedy.py: greedy tokens from a Hugging Face transformers model, shared by
model_gpu_check.py and model_f32_check.py (run from scripts/, so a plain import finds it)."""
import torch


def greedy_tokens(model, prompts, tokens):
    """`tokens` greedy tokens after each prompt (lists of ids), one prompt at a time, no stop
    tokens."""
    model.generation_config.eos_token_id = None
    out = []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p], device="cuda")
            out.append(model.generate(ids, max_new_tokens=tokens, do_sample=False,
                                      pad_token_id=0)[0, len(p):].tolist())
    return out
