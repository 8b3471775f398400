#!/usr/bin/env python3
"""Writes a deployment file derived from a shipped one (config/*.toml).

    derive_config.py SRC DST table.key=VALUE ...

Each VALUE is a TOML value ("10.201.0.2" with its quotes, 4, true, ["a:1"]).
The cluster tests deploy from the same files the README shows for a real
cluster, with only the addresses and the test's sizes substituted here; every
other key keeps the shipped value. A key the shipped file does not have is
added to its table; the layerstream loader still refuses an unknown one.
"""
import sys
import tomllib


def fmt(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(fmt(x) for x in v) + "]"
    raise SystemExit(f"derive_config: cannot write {v!r}")


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    src, dst, overrides = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(src, "rb") as f:
        cfg = tomllib.load(f)
    for o in overrides:
        key, sep, text = o.partition("=")
        table, dot, name = key.partition(".")
        if not sep or not dot:
            raise SystemExit(f"derive_config: expected table.key=VALUE, got {o!r}")
        cfg.setdefault(table, {})[name] = tomllib.loads("v = " + text)["v"]
    with open(dst, "w") as f:
        f.write(f"# Derived from {src} by tests/cluster/derive_config.py: {' '.join(overrides)}\n")
        for table, keys in cfg.items():
            f.write(f"\n[{table}]\n")
            for k, v in keys.items():
                f.write(f"{k} = {fmt(v)}\n")


main()
