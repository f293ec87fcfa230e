#!/usr/bin/env python3
"""Compression benchmark (issue 3): leanrd's in-process encoders vs the reference CLIs on
the same input, in one run.

Input: a copy of /lib/modules/KVER (page cache warm). Each pair produces the same archive:
  leanrd:    leanrd cpio --root TREE --compress FMT -o OUT
  reference: leanrd cpio --root TREE | CLI > OUT      (the archive piped into the CLI)
Reported: median wall time of --runs runs, output size, and leanrd / reference.

Usage: python3 bench/compress.py [--runs 3] [--kver KVER] [--work /var/tmp]
Needs: zstd, xz-utils, lz4, pigz, gzip.
Raw results: bench/results/compress-DATE-COMMIT.json (every run's seconds, the sizes).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from common import build_leanrd, kernel, save, tool_version

PAIRS = [
    ("zstd:3", "zstd -q -T0 -3 -c"),
    ("xz:6", "xz -T0 -6 --check=crc32 -c"),
    ("lz4", "lz4 -q -l -1 -c"),
    ("gzip:6", "pigz -6 -c"),
    ("gzip:6", "gzip -6 -c"),
]


def run(cmd, runs):
    """Each run's seconds."""
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, shell=True, check=True)
        times.append(time.perf_counter() - t)
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kver", default=None)
    ap.add_argument("--work", default="/var/tmp")
    ap.add_argument("--formats", default=None, help="comma-separated subset, e.g. gzip:6,lz4")
    a = ap.parse_args()
    leanrd, _ = build_leanrd()
    kver, _ = kernel("bookworm", a.kver)
    d = tempfile.mkdtemp(prefix="leanrd-bench-cz-", dir=a.work)
    try:
        tree = os.path.join(d, "tree")
        subprocess.run(f"cp -a /lib/modules/{kver} {tree} && cat $(find {tree} -type f) > /dev/null",
                       shell=True, check=True)
        raw = os.path.join(d, "raw")
        subprocess.run(f"{leanrd} cpio --root {tree} -o {raw}", shell=True, check=True)
        size_in = os.path.getsize(raw)
        print(f"## compression benchmark, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, "
              f"/lib/modules/{kver}: {size_in / 1e6:.1f} MB archive, median of {a.runs}\n")
        print("| format | leanrd s | leanrd MB | reference | reference s | reference MB | leanrd / reference (time) |")
        print("|---|---:|---:|---|---:|---:|---:|")
        raw, peers = [], {}
        for spec, cli in PAIRS:
            if a.formats and spec not in a.formats.split(","):
                continue
            tool = cli.split()[0]
            if not shutil.which(tool):
                print(f"| {spec} | | | {cli} (not installed) | | | |")
                continue
            out = os.path.join(d, "out")
            peers[tool] = tool_version(f"{tool} --version")
            ours = run(f"{leanrd} cpio --root {tree} --compress {spec} -o {out}", a.runs)
            s_ours = os.path.getsize(out)
            ref = run(f"{leanrd} cpio --root {tree} | {cli} > {out}", a.runs)
            s_ref = os.path.getsize(out)
            raw.append({"format": spec, "leanrd_s": ours, "leanrd_bytes": s_ours, "reference": cli,
                        "reference_s": ref, "reference_bytes": s_ref})
            t_ours, t_ref = statistics.median(ours), statistics.median(ref)
            print(f"| {spec} | {t_ours:.2f} | {s_ours / 1e6:.2f} | `{cli}` | {t_ref:.2f} | {s_ref / 1e6:.2f} | "
                  f"{t_ours / t_ref:.2f} |")
        save("compress", {"kernel": kver, "runs": a.runs, "input_bytes": size_in, "pairs": raw}, peers)
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
