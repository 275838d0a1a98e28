#!/usr/bin/env python3
"""Writes the seed corpus tests/fuzz/corpus/gguf/ (small valid and invalid GGUF files).

Built with struct, independently of our writer. Re-run after changing it:
    python3 tests/fuzz/make_corpus.py
"""
import pathlib
import struct

OUT = pathlib.Path(__file__).resolve().parent / "corpus" / "gguf"


def s(x: bytes | str) -> bytes:
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return s(key) + struct.pack("<I", vtype) + payload


def arr(elem, count, payload):
    return struct.pack("<IQ", elem, count) + payload


def tinfo(name, ne, ttype, off):
    return s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne) + struct.pack("<IQ", ttype, off)


def gguf(kvs, tensors, data, align=32, version=3):
    head = struct.pack("<IIQQ", 0x46554747, version, len(tensors), len(kvs)) + b"".join(kvs) + b"".join(tensors)
    head += b"\0" * ((-len(head)) % align)
    return head + data


def all_kvs():
    return [
        kv("t.u8", 0, struct.pack("<B", 7)), kv("t.i8", 1, struct.pack("<b", -7)),
        kv("t.u16", 2, struct.pack("<H", 700)), kv("t.i16", 3, struct.pack("<h", -700)),
        kv("t.u32", 4, struct.pack("<I", 70000)), kv("t.i32", 5, struct.pack("<i", -70000)),
        kv("t.f32", 6, struct.pack("<f", 1.5)), kv("t.bool", 7, b"\1"), kv("t.str", 8, s("héllo")),
        kv("t.u64", 10, struct.pack("<Q", 1 << 40)), kv("t.i64", 11, struct.pack("<q", -(1 << 40))),
        kv("t.f64", 12, struct.pack("<d", 0.25)),
        kv("a.i32", 9, arr(5, 3, struct.pack("<3i", 0, 4, 128))),
        kv("a.str", 9, arr(8, 2, s("a") + s("bc"))),
        kv("a.nested", 9, arr(9, 2, arr(4, 1, struct.pack("<I", 1)) + arr(8, 1, s("x")))),
    ]


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    files = {}
    files["empty_valid.gguf"] = gguf([], [], b"")
    files["kv_all_types.gguf"] = gguf(all_kvs(), [], b"")
    f32 = struct.pack("<4f", 1, 2, 3, 4)
    files["one_f32.gguf"] = gguf([kv("general.architecture", 8, s("test"))], [tinfo("w", [4], 0, 0)], f32)
    q8 = struct.pack("<e", 0.5) + bytes(range(32))
    data = f32 + b"\0" * 16 + q8 + b"\0" * 30 + bytes(84)
    files["mixed_types.gguf"] = gguf(all_kvs()[:4], [tinfo("a", [4], 0, 0), tinfo("b", [32], 8, 32),
                                                      tinfo("c", [256], 10, 96)], data)
    files["aligned_64.gguf"] = gguf([kv("general.alignment", 4, struct.pack("<I", 64))],
                                    [tinfo("x", [2, 2], 1, 0), tinfo("y", [3], 26, 64)],
                                    bytes(8) + bytes(56) + bytes(12), align=64)
    files["bad_magic.gguf"] = b"GGUG" + files["one_f32.gguf"][4:]
    files["bad_version.gguf"] = struct.pack("<II", 0x46554747, 2) + files["one_f32.gguf"][8:]
    files["truncated_data.gguf"] = files["one_f32.gguf"][:-3]
    files["overlap.gguf"] = gguf([], [tinfo("a", [16], 0, 0), tinfo("b", [4], 0, 32)], bytes(64))
    files["misaligned.gguf"] = gguf([], [tinfo("a", [4], 0, 8)], bytes(64))
    files["deep_array.gguf"] = gguf([kv("d", 9, arr(9, 1, arr(9, 1, arr(9, 1, arr(0, 0, b"")))))], [], b"")
    for name, b in files.items():
        (OUT / name).write_bytes(b)
    print(f"wrote {len(files)} files, {sum(map(len, files.values()))} bytes to {OUT}")


if __name__ == "__main__":
    main()
