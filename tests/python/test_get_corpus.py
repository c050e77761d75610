"""scripts/get-corpus's R lazy-load reader on small databases built by hand (no network, no R).

The bytes follow "R Internals" sec. 1.8 (XDR serialization) written out field by field here,
independently of the reader: flags word = type | has-attr << 9 | has-tag << 10 | levels << 12.
"""

import gzip
import importlib.machinery
import importlib.util
import pathlib
import struct
import zlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load():
    path = ROOT / "scripts" / "get-corpus"
    loader = importlib.machinery.SourceFileLoader("get_corpus", str(path))
    spec = importlib.util.spec_from_loader("get_corpus", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


gc = _load()


def i32(v):
    return struct.pack(">i", v)


def header(version=3):
    h = b"X\n" + i32(version) + i32(0x040201) + i32(0x030500)
    if version == 3:
        h += i32(5) + b"UTF-8"
    return h


def charsxp(s, levels=1 << 3, enc="utf-8"):  # UTF8 level by default
    if s is None:
        return i32(9) + i32(-1)
    b = s.encode(enc)
    return i32(9 | levels << 12) + i32(len(b)) + b


def strsxp(items, levels=1 << 3, enc="utf-8"):
    return i32(16) + i32(len(items)) + b"".join(charsxp(s, levels, enc) for s in items)


def names_attr(names):
    # pairlist: flags LISTSXP | has-tag, tag SYMSXP "names", CAR the names, then NILVALUE
    return (i32(2 | 1 << 10) + i32(1) + charsxp("names", 1 << 6) + strsxp(names, 1 << 6)
            + i32(254))


def named_vecsxp(names, items):
    return i32(19 | 1 << 9) + i32(len(items)) + b"".join(items) + names_attr(names)


def intsxp(vals):
    return i32(13) + i32(len(vals)) + b"".join(i32(v) for v in vals)


def record(payload):
    return struct.pack(">I", len(payload)) + zlib.compress(payload)


def database(objects):
    """(rdx, rdb) for {name: serialized bytes}."""
    rdb, where = b"", []
    for name, ser in objects.items():
        rec = record(ser)
        where.append(intsxp([len(rdb), len(rec)]))
        rdb += rec
    index = header() + named_vecsxp(
        ["variables", "references", "compressed"],
        [named_vecsxp(list(objects), where), i32(254), i32(10) + i32(1) + i32(1)])
    return gzip.compress(index), rdb


def test_reads_character_vectors_in_utf8_and_latin1():
    rdx, rdb = database({
        "emma": header() + strsxp(["EMMA", "", "Emma Woodhouse, handsome"]),
        "other": header(2) + strsxp(["caf\u00e9", "\u00a3 5"], levels=1 << 2, enc="latin-1"),
    })
    novels = gc.read_novels(rdx, rdb)
    assert novels == {"emma": ["EMMA", "", "Emma Woodhouse, handsome"],
                      "other": ["caf\u00e9", "\u00a3 5"]}
    assert gc.novel_text(novels["other"]) == "caf\u00e9\n\u00a3 5\n".encode("utf-8")


def test_truncated_record_names_the_object():
    rdx, rdb = database({"emma": header() + strsxp(["a", "b"])})
    with pytest.raises(gc.CorpusError, match="emma"):
        gc.read_novels(rdx, rdb[:-3])


def test_truncated_serialization_names_the_field():
    ser = header() + strsxp(["abcdef"])
    with pytest.raises(gc.CorpusError, match="CHARSXP bytes: truncated"):
        gc.unserialize(ser[:-2])


def test_rejects_non_text_objects_and_na_lines():
    rdx, rdb = database({"x": header() + intsxp([1, 2])})
    with pytest.raises(gc.CorpusError, match="x is not a character vector"):
        gc.read_novels(rdx, rdb)
    rdx, rdb = database({"y": header() + strsxp(["a", None])})
    with pytest.raises(gc.CorpusError, match="NA line"):
        gc.read_novels(rdx, rdb)


def test_rejects_other_formats():
    with pytest.raises(gc.CorpusError, match="not R's XDR"):
        gc.unserialize(b"A\n" + i32(3))
    with pytest.raises(gc.CorpusError, match="version 7"):
        gc.unserialize(b"X\n" + i32(7) + i32(0) + i32(0))
    with pytest.raises(gc.CorpusError, match="unsupported R type 6"):
        gc.unserialize(header() + i32(6))


def test_recorded_hashes_cover_six_novels():
    assert len(gc.SHA256) == 6 and gc.HELD_OUT in gc.SHA256
    assert all(len(h) == 64 and int(h, 16) >= 0 for h in gc.SHA256.values())
