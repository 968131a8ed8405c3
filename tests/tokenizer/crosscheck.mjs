// crosscheck.mjs: the JavaScript half of tests/tokenizer/crosscheck.sh (issue 4).
//   node crosscheck.mjs corpus SEED COUNT            > corpus.jsonl   ({"text": ...} lines)
//   node crosscheck.mjs reference PREFIX TOKDIR      < corpus.jsonl > reference.jsonl
//        ({"ids": [...], "text": decode(ids)} by Hugging Face's @huggingface/tokenizers, the
//         implementation nobody here wrote, installed under PREFIX/node_modules)
//   node crosscheck.mjs compare CORPUS REFERENCE OURS OURS_DECODED
//        asserts our ids == reference ids on every line, and decode(encode(x)) == NFC(x)
//        (the tokenizer's normalizer is NFC, so NFC(x) is what a round trip can give back);
//        prints the first mismatches with the first differing position; exit 1 on any.
// The corpus is a deterministic function of SEED (mulberry32), so a failure reproduces.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function makeCorpus(seed, count) {
  const rand = mulberry32(seed);
  const int = (n) => Math.floor(rand() * n);
  const pick = (list) => list[int(list.length)];
  const range = (lo, hi) => String.fromCodePoint(lo + int(hi - lo + 1));
  const repeat = (n, f) => Array.from({ length: n }, f).join("");

  const english = ("the quick brown fox jumps over lazy dog and it was a dark stormy night " +
    "serving engine tokenizer request latency throughput batch model weights GPU memory " +
    "Hello World OpenAI HuggingFace Llama Qwen hello HELLO Über naïve café résumé").split(" ");
  const contractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve",
    "'LL", "'D", "'x", "'", "''", "\u2019s", "'sa", "'dd"];
  const punct = [".", ",", "!", "?", ";", ":", "...", "--", "(", ")", "[", "]", "\"", "'", "-",
    "/", "\\", "@", "#", "$", "%", "^", "&", "*", "~", "`", "|", "«", "»", "。", "、", "！", "？"];
  const specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
    "<tool_call>", "</tool_call>", "<|vision_start|>", "<|im_start", "<|im_end|", "<|", "|>",
    "<|fim_prefix|>", "<|IM_START|>", "< |im_start|>"];
  const whitespace = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n", "\n ",
    "\u00a0", "\u3000", "\u2009", "\u0085", "\u000b", "\u000c", "\r", " \t \n", "\u180e",
    "\ufeff", "\u200b"];
  const emoji = ["😀", "😂", "🥲", "🤖", "🚀", "🔥", "❤️", "👍🏽", "👋🏿", "🧑🏻‍💻", "👩‍👩‍👧‍👦",
    "👨🏾‍🦰", "🏳️‍🌈", "🏴‍☠️", "🇯🇵", "🇺🇸🇫🇷", "1️⃣", "#️⃣", "🫠", "🧬", "☺", "✌🏼", "🤷‍♀️"];
  const code = ["int main() {\n    return 0;\n}\n", "def f(x):\n\treturn x ** 2  # square\n",
    "for (let i = 0; i < n; ++i) { sum += a[i]; }", "{\"key\": [1, 2.5, null, true]}",
    "#include <vector>\nstd::vector<int> v{1,2,3};", "SELECT * FROM users WHERE id = 42;",
    "if x!=y:\n        print(f'{x=}')", "x = a->b; y = &c; z = ~d >> 2 << 3;",
    "    \n\t\n  // comment\n", "git commit -m \"fix: issue #4\" && make -j8",
    "<div class=\"a\">&nbsp;</div>", "λx. x + 1 ≤ ∞", "$ ls -la ~/.config\n"];

  const word = () => pick(english);
  const cjk = () => repeat(1 + int(12), () => pick([() => range(0x4e00, 0x9fa5),
    () => range(0x3041, 0x3093), () => range(0x30a1, 0x30f3), () => range(0xac00, 0xd7a3)])());
  const script = () => {
    const blocks = [[0x0621, 0x064a], [0x0905, 0x0939], [0x0410, 0x044f], [0x0391, 0x03c9],
      [0x05d0, 0x05ea], [0x0e01, 0x0e2e], [0x0531, 0x0556], [0x10d0, 0x10fa]];
    const [lo, hi] = pick(blocks);
    let s = repeat(1 + int(8), () => range(lo, hi));
    if (lo === 0x0905 && rand() < 0.5) s += range(0x093e, 0x094d);  // Devanagari vowel sign
    if (lo === 0x0621 && rand() < 0.5) s += range(0x064b, 0x0652);  // Arabic harakat
    return s;
  };
  const number = () => pick([() => String(int(10 ** (1 + int(12)))),
    () => (rand() * 1e6).toFixed(int(5)), () => "1,234,567.89", () => "2026-11-22",
    () => "+1 (555) 010-" + String(1000 + int(9000)), () => "٠١٢٣٤٥٦٧٨٩".slice(int(5)),
    () => "१२३४", () => "１２３", () => "3.14159e-10", () => "0x" + int(1 << 30).toString(16),
    () => "Ⅻ", () => "½ ¾ ²"])();
  const nonNfc = () => pick(["e\u0301", "A\u030a", "\u1100\u1161\u11a8", "o\u0308\u0304",
    "n\u0303", "\u212b", "\ufb01", "ç\u0327", "a\u0300\u0301"]);
  const fragment = () => {
    const r = int(12);
    if (r === 0) return word() + pick(contractions);
    if (r === 1) return cjk();
    if (r === 2) return script();
    if (r === 3) return pick(emoji);
    if (r === 4) return pick(code);
    if (r === 5) return pick(whitespace);
    if (r === 6) return number();
    if (r === 7) return pick(specials);
    if (r === 8) return pick(punct);
    if (r === 9) return nonNfc();
    return word();
  };
  const sentence = () => {
    const n = 3 + int(15);
    let s = "";
    for (let i = 0; i < n; ++i) {
      s += (i && rand() < 0.8 ? " " : "") + word();
      if (rand() < 0.15) s += pick(contractions);
      if (rand() < 0.1) s += pick(punct);
    }
    return s[0].toUpperCase() + s.slice(1) + pick([".", "!", "?", "", "\n"]);
  };
  const kinds = [
    () => sentence(),
    () => repeat(1 + int(3), sentence),
    () => cjk() + pick(["，", "。", "", " "]) + cjk(),
    () => repeat(2 + int(4), () => script() + " "),
    () => repeat(1 + int(5), () => pick(emoji) + pick(["", " ", "  "])),
    () => repeat(1 + int(3), () => pick(code)),
    () => repeat(1 + int(6), () => word() + pick(whitespace)) + pick(whitespace),
    () => repeat(1 + int(5), () => number() + pick([" ", ", ", "\n", ""])),
    () => pick(specials) + "user\n" + sentence() + pick(specials) + pick(["\n", ""]),
    () => repeat(2 + int(20), fragment),
    () => repeat(1 + int(4), () => word() + nonNfc()),
    () => repeat(1 + int(4), () => pick(whitespace)) + word() + repeat(int(6), () => " "),
    () => repeat(50 + int(400), fragment),
  ];
  const fixed = ["", " ", "\n", "a", "  leading", "trailing  ", "\t\t\t", "\n\n\n\n",
    "                                                                ", "I'm", "DON'T",
    "<|im_start|>", "<|im_start|><|im_end|>", "a<|endoftext|>b", "👨‍👩‍👧‍👦", "🇯🇵🇰🇷",
    "1234567890", "3.14", "😀😀😀", "ab\r\ncd", "x" + " ".repeat(3) + "\ny"];
  const texts = [...fixed];
  while (texts.length < count) texts.push(kinds[int(kinds.length)]());
  return texts;
}

function readLines(file) {
  const text = fs.readFileSync(file, "utf8");
  return text.split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
}

async function reference(prefix, tokdir) {
  const require = createRequire(path.join(path.resolve(prefix), "package.json"));
  const { Tokenizer } = require("@huggingface/tokenizers");
  const read = (f) => JSON.parse(fs.readFileSync(path.join(tokdir, f), "utf8"));
  const tokenizer = new Tokenizer(read("tokenizer.json"), read("tokenizer_config.json"));
  const out = [];
  for (const { text } of readLines("/dev/stdin")) {
    const ids = tokenizer.encode(text, { add_special_tokens: false }).ids;
    out.push(JSON.stringify({ ids, text: ids.length ? tokenizer.decode(ids) : "" }));
  }
  process.stdout.write(out.join("\n") + "\n");
}

function firstDifference(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; ++i) if (a[i] !== b[i]) return i;
  return n;
}

function compare(corpusFile, referenceFile, oursFile, decodedFile) {
  const corpus = readLines(corpusFile);
  const ref = readLines(referenceFile);
  const ours = readLines(oursFile);
  const decoded = readLines(decodedFile);
  for (const [name, list] of [["reference", ref], ["ours", ours], ["decoded", decoded]]) {
    if (list.length !== corpus.length) {
      console.error(`crosscheck: ${name} has ${list.length} lines, corpus ${corpus.length}`);
      process.exit(1);
    }
  }
  let idMismatches = 0;
  let roundTripMismatches = 0;
  let tokens = 0;
  for (let i = 0; i < corpus.length; ++i) {
    const text = corpus[i].text;
    tokens += ref[i].ids.length;
    const a = ref[i].ids;
    const b = ours[i].ids;
    if (a.length !== b.length || firstDifference(a, b) !== a.length) {
      if (idMismatches++ < 10) {
        const k = firstDifference(a, b);
        console.error(`MISMATCH line ${i + 1}: text=${JSON.stringify(text).slice(0, 300)}\n` +
          `  first difference at id index ${k}: reference ${JSON.stringify(a.slice(k, k + 8))}` +
          ` ours ${JSON.stringify(b.slice(k, k + 8))}`);
      }
    }
    const expected = text.normalize("NFC");
    if (decoded[i].text !== expected) {
      if (roundTripMismatches++ < 10) {
        console.error(`ROUND TRIP line ${i + 1}: decode(encode(x)) = ` +
          `${JSON.stringify(decoded[i].text).slice(0, 200)} != NFC(x) = ` +
          `${JSON.stringify(expected).slice(0, 200)}`);
      }
    }
    if (ref[i].text !== expected && roundTripMismatches === 0 && idMismatches === 0) {
      console.error(`note line ${i + 1}: the reference's own round trip differs from NFC(x)`);
    }
  }
  console.log(`crosscheck: ${corpus.length} strings, ${tokens} reference tokens, ` +
    `${idMismatches} id mismatches, ${roundTripMismatches} round-trip mismatches`);
  process.exit(idMismatches === 0 && roundTripMismatches === 0 ? 0 : 1);
}

const [mode, ...args] = process.argv.slice(2);
if (mode === "corpus") {
  const texts = makeCorpus(Number(args[0]), Number(args[1]));
  process.stdout.write(texts.map((text) => JSON.stringify({ text })).join("\n") + "\n");
} else if (mode === "reference") {
  await reference(args[0], args[1]);
} else if (mode === "compare") {
  compare(...args);
} else {
  console.error("usage: crosscheck.mjs corpus SEED COUNT | reference PREFIX TOKDIR | " +
    "compare CORPUS REFERENCE OURS DECODED");
  process.exit(2);
}
