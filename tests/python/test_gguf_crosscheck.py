"""Cross-check of our GGUF writer/reader and CPU dequantizers against llama.cpp's gguf package.

tests/tools/gguf_samples (path in $DSV4_GGUF_SAMPLES) writes meta.gguf, quants.gguf and
manifest.json; here gguf.GGUFReader reads the files independently and we check
  * every metadata key: order, value type (and array element type) and value;
  * the tensor table: names, type ids, shapes (ne), byte sizes, absolute data offsets, alignment;
  * gguf.quants.dequantize(q.<type>) == our deq.<type> BIT FOR BIT (uint32 views), per type.
Types gguf-py lacks (lucebox ids >= 100) are listed by the tool and checked to be exactly those.
Run by CTest (label unit); by hand:
    DSV4_GGUF_SAMPLES=build/tests/tools/gguf_samples .venv/bin/python -m pytest tests/python
"""
import json
import math
import os
import struct
import subprocess

import numpy as np
import pytest

import gguf
from gguf import GGUFReader, GGUFValueType

# Types gguf-py 0.19 can dequantize that dsv4 also has kernels for.
GGUF_PY_TYPES = ["f32", "f16", "bf16", "q8_0", "q2_k", "q4_k", "iq2_xxs", "mxfp4"]

TYPE_NAMES = {
    "u8": GGUFValueType.UINT8, "i8": GGUFValueType.INT8, "u16": GGUFValueType.UINT16,
    "i16": GGUFValueType.INT16, "u32": GGUFValueType.UINT32, "i32": GGUFValueType.INT32,
    "f32": GGUFValueType.FLOAT32, "bool": GGUFValueType.BOOL, "string": GGUFValueType.STRING,
    "array": GGUFValueType.ARRAY, "u64": GGUFValueType.UINT64, "i64": GGUFValueType.INT64,
    "f64": GGUFValueType.FLOAT64,
}


@pytest.fixture(scope="session")
def samples(tmp_path_factory):
    tool = os.environ.get("DSV4_GGUF_SAMPLES")
    if not tool or not os.path.exists(tool):
        pytest.fail(f"DSV4_GGUF_SAMPLES must point at the built gguf_samples tool (got {tool!r})")
    out = tmp_path_factory.mktemp("gguf_samples")
    subprocess.run([tool, str(out)], check=True)
    with open(out / "manifest.json", encoding="utf-8") as f:
        manifest = json.load(f)
    return manifest


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f64_bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def same_scalar(vtype, want, got):
    if vtype == "f32":
        return f32_bits(float(want)) == f32_bits(float(got))
    if vtype == "f64":
        return f64_bits(float(want)) == f64_bits(float(got))
    if vtype == "bool":
        return bool(want) == bool(got)
    return want == got


def check_metadata(reader, desc):
    user_fields = [k for k in reader.fields if not k.startswith("GGUF.")]
    assert user_fields == [e["key"] for e in desc["metadata"]], "metadata keys or their order differ"
    for e in desc["metadata"]:
        key = e["key"]
        field = reader.fields[key]
        assert field.types[0] == TYPE_NAMES[e["type"]], f"{key}: type {field.types[0]} != {e['type']}"
        if e["type"] != "array":
            got = field.contents()
            assert same_scalar(e["type"], e["value"], got), f"{key}: {got!r} != {e['value']!r}"
            continue
        if not e["value"]:
            # gguf-py derives element types from the elements it parsed: none for an empty array.
            assert len(field.data) == 0, f"{key}: expected an empty array"
            continue
        assert field.types[1] == TYPE_NAMES[e["elem_type"]], f"{key}: element type {field.types[1]} != {e['elem_type']}"
        if e["elem_type"] == "array":
            # gguf-py 0.19 parses nested arrays' layout (the keys after it still line up, checked
            # above) but its contents() flattens them wrongly; check the inner types we can see.
            assert len(field.types) >= 3, f"{key}: nested element types missing"
            continue
        got = field.contents()
        assert len(got) == len(e["value"]), f"{key}: {len(got)} elements, expected {len(e['value'])}"
        for i, (w, g) in enumerate(zip(e["value"], got)):
            assert same_scalar(e["elem_type"], w, g), f"{key}[{i}]: {g!r} != {w!r}"


def check_tensors(reader, desc):
    assert reader.alignment == desc["alignment"]
    assert reader.data_offset == desc["data_offset"]
    assert [t.name for t in reader.tensors] == [t["name"] for t in desc["tensors"]]
    for t, want in zip(reader.tensors, desc["tensors"]):
        assert int(t.tensor_type) == want["type_id"], f"{t.name}: type {t.tensor_type!r} != {want['type']}"
        assert [int(x) for x in t.shape] == want["ne"], f"{t.name}: shape {list(t.shape)} != ne {want['ne']}"
        assert int(t.n_bytes) == want["bytes"], f"{t.name}: {t.n_bytes} bytes != {want['bytes']}"
        assert int(t.data_offset) == want["file_offset"], f"{t.name}: offset {t.data_offset} != {want['file_offset']}"
        assert int(t.n_elements) == math.prod(want["ne"])


def test_meta_file_metadata(samples):
    desc = samples["meta"]
    check_metadata(GGUFReader(desc["path"]), desc)


def test_meta_file_tensor_table(samples):
    desc = samples["meta"]
    check_tensors(GGUFReader(desc["path"]), desc)


def test_quant_file_metadata_and_tensor_table(samples):
    desc = samples["quants"]
    reader = GGUFReader(desc["path"])
    check_metadata(reader, desc)
    check_tensors(reader, desc)


def test_only_types_gguf_py_lacks_are_left_out(samples):
    """Every type with dsv4 kernels but I32 has a dequantizer, and the only ones not compared with
    gguf-py below are lucebox's ROCmFPx types (ids >= 100), which gguf-py cannot even open."""
    q = samples["quants"]
    # I32 holds integer tables (the hash layers' tid2eid), read as integers and never dequantized.
    assert q["skipped_no_dequantizer"] == ["i32"], f"types with kernels but no dequantizer: {q['skipped_no_dequantizer']}"
    compared = {p["type"] for p in q["pairs"]}
    assert set(GGUF_PY_TYPES) <= compared, f"not written by gguf_samples: {set(GGUF_PY_TYPES) - compared}"
    assert all(p["type_id"] < 100 for p in q["pairs"])
    left_out = q["skipped_not_in_gguf_py"]
    rocm = {"q2_0_rocmfp2", "q3_0_rocmfpx", "q4_0_rocmfp4", "q4_0_rocmfp4_fast", "q6_0_rocmfpx", "q8_0_rocmfpx"}
    assert set(left_out) == rocm, f"expected exactly the ROCmFPx types with dequantizers {sorted(rocm)}, got {left_out}"
    assert max(int(t) for t in gguf.GGMLQuantizationType) < 100, "gguf-py now knows ids >= 100: compare them too"


@pytest.mark.parametrize("type_name", GGUF_PY_TYPES)
def test_dequantize_bit_exact(samples, type_name):
    q = samples["quants"]
    pair = next((p for p in q["pairs"] if p["type"] == type_name), None)
    assert pair is not None, f"{type_name}: gguf_samples wrote no sample (no dequantize_row registered?)"
    reader = GGUFReader(q["path"])
    tensors = {t.name: t for t in reader.tensors}
    qt, dt = tensors[pair["quant"]], tensors[pair["dequant"]]
    ref = gguf.quants.dequantize(qt.data, qt.tensor_type)  # GGUF_PY_TYPES: all dequantizable by gguf-py 0.19
    ref = np.ascontiguousarray(ref, dtype=np.float32).reshape(-1)
    ours = np.ascontiguousarray(dt.data, dtype=np.float32).reshape(-1)
    assert ref.size == ours.size, f"{type_name}: {ref.size} reference values, {ours.size} ours"
    rb, ob = ref.view(np.uint32), ours.view(np.uint32)
    bad = np.nonzero(rb != ob)[0]
    if bad.size:
        i = int(bad[0])
        pytest.fail(
            f"{type_name}: {bad.size} of {ref.size} elements differ from gguf-py; first at element {i} "
            f"(block {i // max(1, _block_elems(type_name))}): gguf-py {ref[i]!r} (0x{int(rb[i]):08x}) vs "
            f"ours {ours[i]!r} (0x{int(ob[i]):08x})")


def _block_elems(type_name):
    return {"q8_0": 32, "mxfp4": 32, "q2_k": 256, "q4_k": 256, "iq2_xxs": 256}.get(type_name, 1)


def _dsv4_bin():
    exe = os.environ.get("DSV4_BIN")
    if not exe or not os.path.exists(exe):
        pytest.fail("DSV4_BIN not set: `dsv4 inspect` checks need the dsv4 binary")
    return exe


def test_inspect_json_matches_manifest(samples):
    desc = samples["meta"]
    out = subprocess.run([_dsv4_bin(), "inspect", "--json", desc["path"]], check=True, capture_output=True, text=True)
    j = json.loads(out.stdout)
    assert j["version"] == 3 and j["alignment"] == desc["alignment"] and j["data_offset"] == desc["data_offset"]
    assert j["file_size"] == desc["file_size"]
    assert [m["key"] for m in j["metadata"]] == [e["key"] for e in desc["metadata"]]
    for m, e in zip(j["metadata"], desc["metadata"]):
        assert m["type"] == e["type"], m["key"]
        if e["type"] not in ("array", "f32", "f64"):
            assert m["value"] == e["value"], m["key"]
    assert [(t["name"], t["type_id"], t["ne"], t["bytes"], t["file_offset"]) for t in j["tensors"]] == [
        (t["name"], t["type_id"], t["ne"], t["bytes"], t["file_offset"]) for t in desc["tensors"]]
    assert j["total_bytes"] == sum(t["bytes"] for t in desc["tensors"])
    assert j["total_parameters"] == sum(math.prod(t["ne"]) for t in desc["tensors"])


def test_inspect_text_and_errors(samples, tmp_path):
    exe = _dsv4_bin()
    out = subprocess.run([exe, "inspect", "--no-tokens", samples["quants"]["path"]], check=True,
                         capture_output=True, text=True).stdout
    assert "deq.q8_0" in out and "total:" in out and "alignment 64" in out
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x02\x00\x00\x00" + bytes(16))
    r = subprocess.run([exe, "inspect", str(bad)], capture_output=True, text=True)
    assert r.returncode == 1 and "version 2" in r.stderr and r.stdout == ""
