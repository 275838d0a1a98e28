"""The DS4 forward pass against HF transformers goldens (tests/data/hf), and bit-identity of the
logits across prefill chunk sizes, thread counts and SIMD levels.

Run by CTest (python_forward_hf) with DSV4_BIN and DSV4_DATA set.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

BIN = os.environ.get("DSV4_BIN", "build/dsv4")
DATA = os.environ.get("DSV4_DATA", "tests/data")
HERE = os.path.dirname(os.path.abspath(__file__))
CASES = ["tiny_a", "tiny_d", "tiny_e"]
# HF's own full-sequence vs token-by-token difference on these models is ~1e-5 (fp32 summation
# order); the bound is 1e-4 × max|logit| (the issue's), and dsv4 is ~1e-5.


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory):
    out = {}
    d = tmp_path_factory.mktemp("hf_gguf")
    for c in CASES:
        path = str(d / f"{c}.gguf")
        subprocess.run([sys.executable, os.path.join(HERE, "hf_to_gguf_f32.py"), os.path.join(DATA, "hf", c), path],
                       check=True)
        out[c] = path
    return out


def logits(model, case, tmp_path, *extra, env=None):
    out = str(tmp_path / f"{case}_{'_'.join(extra) or 'full'}.npy")
    tokens = os.path.join(DATA, "hf", case, "tokens.json")
    r = subprocess.run([BIN, *extra, "logits", "-m", model, "--tokens-file", tokens, "--out", out],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return np.load(out)


@pytest.mark.parametrize("case", CASES)
def test_matches_hf(ggufs, case, tmp_path):
    ours = logits(ggufs[case], case, tmp_path)
    hf = np.load(os.path.join(DATA, "hf", case, "logits.npy"))
    assert ours.shape == hf.shape
    diff = np.abs(ours - hf).max(axis=1)
    worst = int(diff.argmax())
    bound = 1e-4 * np.abs(hf).max()
    print(f"{case}: max |dlogit| {diff.max():.3g} (bound {bound:.3g}) at position {worst}")
    assert diff.max() <= bound, f"{case}: max |dlogit| {diff.max():.3g} > {bound:.3g} at position {worst}"
    assert (ours.argmax(1) == hf.argmax(1)).all()


@pytest.mark.parametrize("case", CASES)
def test_bit_identical_across_chunks_threads_simd(ggufs, case, tmp_path):
    ref = logits(ggufs[case], case, tmp_path).view(np.uint32)
    n = ref.shape[0]
    window = {"tiny_a": 8, "tiny_d": 16, "tiny_e": 8}[case]
    variants = [["--chunk", c] for c in ("1", "3", "7", str(window + 5), "64", str(n - 1))]
    variants.append(["--repeat", "2", "--chunk", "5"])
    for v in variants:
        tokens = os.path.join(DATA, "hf", case, "tokens.json")
        out = str(tmp_path / f"{case}_{'_'.join(v)}.npy")
        r = subprocess.run([BIN, "logits", "-m", ggufs[case], "--tokens-file", tokens, "--out", out, *v],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        got = np.load(out).view(np.uint32)
        assert (got == ref).all(), f"{case}: {' '.join(v)} differs from the full prefill"
    for glob in (["--threads", "1"], ["--threads", "2"], ["--threads", "3"], ["--simd", "scalar"], ["--simd", "avx2"]):
        got = logits(ggufs[case], case, tmp_path, *glob).view(np.uint32)
        assert (got == ref).all(), f"{case}: {' '.join(glob)} differs"


@pytest.mark.parametrize("case", CASES)
def test_greedy_continuation_equals_hf(ggufs, case, tmp_path):
    golden_path = os.path.join(DATA, "hf", case, "greedy.json")
    if not os.path.exists(golden_path):
        pytest.fail(f"{golden_path} missing: regenerate with tests/reference/make_hf_goldens.py")
    golden = json.load(open(golden_path))
    prompt = json.load(open(os.path.join(DATA, "hf", case, "tokens.json")))[: golden["prompt_tokens"]]
    p = tmp_path / "prompt.json"
    p.write_text(json.dumps(prompt))
    n = len(golden["generated"])
    for chunk in ("0", "1", "5"):
        r = subprocess.run([BIN, "generate", "-m", ggufs[case], "--tokens-file", str(p), "-n", str(n), "--greedy",
                            "--json", "--chunk", chunk], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == golden["generated"], f"{case} chunk {chunk}"


def convert(case, tmp_path, typ):
    out = str(tmp_path / f"{case}_{typ}.gguf")
    r = subprocess.run([BIN, "convert", "--hf", os.path.join(DATA, "hf", case), "--out", out, "--type", typ],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("case", CASES)
def test_dsv4_convert_gives_the_same_logits(ggufs, case, tmp_path):
    """dsv4's own converter and the independent gguf-py path give the same f32 model, bit for bit."""
    ref = logits(ggufs[case], case, tmp_path)
    ours = logits(convert(case, tmp_path, "f32"), case, tmp_path, "--threads", "2")
    assert (ours.view(np.uint32) == ref.view(np.uint32)).all()


# Measured against the f32 logits of the same model (per position: max |dlogit| / max |logit|):
#   q8_0: median 3.4-4.1%, 90th percentile 9-14%, greedy argmax agrees at 91-94% of positions
#   (these tiny random models are chaotic: a small change flips router/indexer top-k choices, and
#   then a position's logits move a lot; the max over positions reaches 39-62%);
#   q2: identical to q8_0 here, because every routed-expert row (64 or 32 wide) is too short for
#   IQ2_XXS/Q2_K and falls back to Q8_0 (the converter logs it); f16/bf16: exact (bf16 weights).
# Bounds: median < 8%, argmax agreement >= 85%.
MIX_MEDIAN_BOUND = {"q8_0": 0.08, "q2": 0.08, "f16": 1e-6, "bf16": 1e-6}


@pytest.mark.parametrize("typ", ["q8_0", "q2", "f16", "bf16"])
@pytest.mark.parametrize("case", CASES)
def test_quantized_mixes_run_end_to_end(ggufs, case, typ, tmp_path):
    ref = logits(ggufs[case], case, tmp_path)
    model = convert(case, tmp_path, typ)
    full = logits(model, case, tmp_path)
    chunked = logits(model, case, tmp_path, "--threads", "1") if typ == "q2" else full
    assert (chunked.view(np.uint32) == full.view(np.uint32)).all()
    assert np.isfinite(full).all()
    rel = np.abs(full - ref).max(axis=1) / np.abs(ref).max()
    median, agree = float(np.median(rel)), float((full.argmax(1) == ref.argmax(1)).mean())
    print(f"{case} {typ}: median {median:.4f}, max {rel.max():.4f}, argmax agreement {agree:.2f}")
    assert median < MIX_MEDIAN_BOUND[typ], f"{case} {typ}: median relative error {median:.4f}"
    assert agree >= 0.85, f"{case} {typ}: argmax agreement {agree:.2f}"


def test_bad_inputs_are_clear_errors(ggufs, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2, 99999]")
    r = subprocess.run([BIN, "logits", "-m", ggufs["tiny_a"], "--tokens-file", str(bad), "--out",
                        str(tmp_path / "x.npy")], capture_output=True, text=True)
    assert r.returncode != 0 and "vocabulary" in r.stderr
    bad.write_text("{not json")
    r = subprocess.run([BIN, "logits", "-m", ggufs["tiny_a"], "--tokens-file", str(bad), "--out",
                        str(tmp_path / "x.npy")], capture_output=True, text=True)
    assert r.returncode != 0 and "JSON array" in r.stderr
