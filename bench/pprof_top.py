"""The top functions of a Go CPU profile, without Go's tools (none on the bench machine).

VictoriaMetrics' programs serve Go's profiler at /debug/pprof/profile?seconds=N (the
store behind its pprofAuthKey: ?authKey=). The answer is a gzipped protocol buffer
(github.com/google/pprof's profile.proto); this reads the few fields a flat/cumulative
top needs: samples (location ids, values), locations (their lines' function ids),
functions (name index) and the string table.

    .venv/bin/python -m bench.pprof_top URL [--top 15]
"""

from __future__ import annotations

import argparse
import gzip
import sys
import urllib.request
from collections import Counter


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def fields(data: bytes):
    """(field number, wire type, value) of one message: ints, or bytes when length-delimited."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 2:
            length, at = _varint(data, at)
            value, at = data[at : at + length], at + length
        elif wire == 1:
            value, at = int.from_bytes(data[at : at + 8], "little"), at + 8
        elif wire == 5:
            value, at = int.from_bytes(data[at : at + 4], "little"), at + 4
        else:
            raise ValueError(f"wire type {wire} is not in profile.proto")
        yield number, wire, value


def _ints(wire: int, value) -> list[int]:
    """A repeated integer field, packed (bytes) or not."""
    if wire == 0:
        return [value]
    out, at = [], 0
    while at < len(value):
        one, at = _varint(value, at)
        out.append(one)
    return out


def top(profile: bytes, count: int = 15) -> tuple[float, list[tuple[str, float, float]]]:
    """(seconds sampled, [(function, flat share, cumulative share)]) of a CPU profile."""
    data = gzip.decompress(profile) if profile[:2] == b"\x1f\x8b" else profile
    strings: list[str] = []
    samples: list[tuple[list[int], list[int]]] = []
    locations: dict[int, list[int]] = {}
    functions: dict[int, int] = {}
    for number, _wire, value in fields(data):
        if number == 2:  # Sample
            ids, values = [], []
            for n, w, v in fields(value):
                if n == 1:
                    ids += _ints(w, v)
                elif n == 2:
                    values += _ints(w, v)
            samples.append((ids, values))
        elif number == 4:  # Location
            loc_id, funcs = 0, []
            for n, _w, v in fields(value):
                if n == 1:
                    loc_id = v
                elif n == 4:  # Line
                    funcs += [fv for fn, _fw, fv in fields(v) if fn == 1]
            locations[loc_id] = funcs
        elif number == 5:  # Function
            parts = {n: v for n, _w, v in fields(value)}
            functions[parts.get(1, 0)] = parts.get(2, 0)
        elif number == 6:
            strings.append(value.decode("utf-8", "replace"))
    flat: Counter[str] = Counter()
    cum: Counter[str] = Counter()
    total = 0
    for ids, values in samples:
        weight = values[-1] if values else 0  # cpu nanoseconds (the last sample type)
        total += weight
        names = [strings[functions[f]] for i in ids for f in locations.get(i, ())]
        if names:
            flat[names[0]] += weight
        for name in set(names):
            cum[name] += weight
    share = (lambda v: v / total) if total else (lambda v: 0.0)
    rows = [(name, share(v), share(cum[name])) for name, v in flat.most_common(count)]
    return total / 1e9, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pprof_top", description=__doc__)
    parser.add_argument("url", help="a /debug/pprof/profile?seconds=N URL, or a saved file")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    if args.url.startswith("http"):
        with urllib.request.urlopen(args.url, timeout=600) as answer:
            profile = answer.read()
    else:
        with open(args.url, "rb") as file:
            profile = file.read()
    seconds, rows = top(profile, args.top)
    print(f"{seconds:.2f} CPU seconds sampled")
    for name, flat, cum in rows:
        print(f"{flat:6.1%} {cum:6.1%}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
