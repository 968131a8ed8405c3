#!/usr/bin/env python3
"""tokenizer_vs_hf.py: packserve's tokenizer against Hugging Face `tokenizers` on one
tokenizer.json: encode (with and without special tokens) and decode of a fixed set of texts
(ASCII, whitespace runs, newlines, tabs, accents, CJK, emoji, code, special tokens in the text),
plus each text's ids decoded back. Prints one JSON line: compared, mismatches, and the first
mismatches in full. Needs the `tokenizers` package (the GPU machine has it).

  scripts/tokenizer_vs_hf.py --packserve BIN --tokenizer DIR
"""
import argparse
import json
import subprocess

TEXTS = [
    "Hello world", "The capital of France is Paris.", "  two  spaces", "trailing space ",
    "\n", "line one\nline two\n\nline four", "tab\tseparated\tvalues", "café naïve résumé",
    "日本語のテキスト", "emoji 🦙🚀 and ZWJ 👩‍💻", "def f(x):\n    return x ** 2  # square",
    "<s> inside text </s>", "[INST] What is 2+2? [/INST]", "Ünïcödé ÀÉÎÕÜ ß ø å",
    "1234567890 3.14159 -42", "URL: https://example.com/a?b=c&d=e", "a" * 300,
    "  leading", "\u00a0non-breaking\u00a0space", "mixed 中文 and English 한국어 текст",
    "\u2581already a meta space", "<0x41> literal byte token text", "", " ",
    "</s>right after a special token", "<s>[INST] Hi[/INST] Hello</s>[INST]again[/INST]",
    "a</s>b c", "  </s>  ", "x\n</s>\ny",
]


def packserve_tokenize(binary, directory, lines, args):
    r = subprocess.run([binary, "tokenize", "--tokenizer", directory, *args],
                       input="\n".join(json.dumps(l) for l in lines) + "\n",
                       capture_output=True, text=True, check=True)
    return [json.loads(x) for x in r.stdout.splitlines()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--packserve", required=True)
    ap.add_argument("--tokenizer", required=True)
    args = ap.parse_args()
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(args.tokenizer + "/tokenizer.json")
    texts = [t for t in TEXTS if t]
    mismatches = []
    compared = 0
    for special in (False, True):
        ours = packserve_tokenize(args.packserve, args.tokenizer, [{"text": t} for t in texts],
                                  ["--add-special-tokens"] if special else [])
        for text, got in zip(texts, ours):
            want = hf.encode(text, add_special_tokens=special).ids
            compared += 1
            if got.get("ids") != want:
                mismatches.append({"text": text, "special": special, "ours": got, "hf": want})
    ids = [hf.encode(t, add_special_tokens=False).ids for t in texts]
    decoded = packserve_tokenize(args.packserve, args.tokenizer, [{"ids": i} for i in ids],
                                 ["--decode"])
    for text, i, got in zip(texts, ids, decoded):
        want = hf.decode(i, skip_special_tokens=False)
        compared += 1
        if got.get("text") != want:
            mismatches.append({"ids": i, "ours": got, "hf": want})
    print(json.dumps({"tokenizer": args.tokenizer, "compared": compared,
                      "mismatches": len(mismatches), "first": mismatches[:5]},
                     ensure_ascii=False))


if __name__ == "__main__":
    main()
