#!/usr/bin/env python3
"""Archiver benchmark (issue 2): leanrd vs GNU cpio, bsdcpio and 3cpio, in one run.

(a) one 200 MiB file, 4096 data alignment, on a loop-mounted XFS made for the run;
(b) a copy of /lib/modules/KVER on the working file system;
(c) the share of eligible files (>= 4096 bytes) whose data is 4096-aligned in (b).

Each command is timed with its output made durable (the command, then `sync FILE`), since
leanrd fsyncs before its atomic rename and the peers do not; the command alone is shown too.
Medians of --runs runs; sources are in the page cache; outputs are removed between runs.

Usage (root, Debian): python3 bench/archiver.py [--runs 7] [--kver 6.1.0-...] [--work DIR]
Needs: cpio, bsdcpio (libarchive-tools), xfsprogs; 3cpio is built with `cargo install threecpio`
into bench/.tools if it is not on PATH.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, **kw)


def tool(name, install):
    p = shutil.which(name)
    if p:
        return p
    local = os.path.join(ROOT, "bench/.tools/bin", name)
    if not os.path.exists(local):
        print(f"building {name}: {install}", file=sys.stderr)
        sh(install + f" --root {os.path.join(ROOT, 'bench/.tools')} >/dev/null 2>&1")
    return local


def timed(cmd, cwd, out, runs):
    """Median seconds of `cmd` alone and of `cmd; sync out`."""
    alone, durable = [], []
    for _ in range(runs):
        if os.path.exists(out):
            os.remove(out)
        sh("sync")
        t0 = time.perf_counter()
        sh(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t1 = time.perf_counter()
        sh(f"sync {out}")
        t2 = time.perf_counter()
        alone.append(t1 - t0)
        durable.append(t2 - t0)
    return statistics.median(alone), statistics.median(durable)


def table(title, rows, runs):
    print(f"\n### {title}\n")
    print(f"median of {runs} runs; 'durable' = command + sync of its output\n")
    print("| tool | durable s | command s | leanrd / tool (durable) |")
    print("|---|---:|---:|---:|")
    ours = rows["leanrd"][1]
    for name, (a, d) in rows.items():
        print(f"| {name} | {d:.3f} | {a:.3f} | {ours / d:.2f} |")
    peers = {k: v for k, v in rows.items() if k != "leanrd"}
    best = min(peers, key=lambda k: peers[k][1])
    print(f"\nleanrd / best peer ({best}): {ours / peers[best][1]:.2f}")
    return ours / peers[best][1]


def aligned_share(leanrd, image):
    out = subprocess.run([leanrd, "ls", "--json", image], check=True, capture_output=True, text=True).stdout
    elig = ok = 0
    for line in out.splitlines():
        e = json.loads(line)
        if e["type"] == "file" and e["size"] >= 4096:
            elig += 1
            ok += e["data_offset"] % 4096 == 0
    return ok, elig


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--kver", default=None)
    ap.add_argument("--work", default="/var/tmp")
    ap.add_argument("--skip-xfs", action="store_true")
    a = ap.parse_args()

    sh("cargo build --release -q -p leanrd", cwd=ROOT)
    leanrd = os.path.join(ROOT, "target/release/leanrd")
    three = tool("3cpio", "cargo install -q threecpio")
    kver = a.kver or sorted(os.listdir("/lib/modules"))[-1]
    print(f"## archiver benchmark, {time.strftime('%Y-%m-%d')}, {os.uname().machine}, {os.cpu_count()} cores, "
          f"kernel tree {kver}")
    for t in ("cpio --version", "bsdcpio --version", f"{three} --version"):
        print("- " + subprocess.run(t, shell=True, capture_output=True, text=True).stdout.splitlines()[0])

    results = {}
    if not a.skip_xfs:
        d = tempfile.mkdtemp(prefix="leanrd-bench-xfs-")
        img, mnt = d + ".img", os.path.join(d, "mnt")
        os.makedirs(mnt)
        sh(f"truncate -s 2G {img} && mkfs.xfs -q {img} && mount -o loop {img} {mnt}")
        try:
            sh(f"head -c 200M /dev/urandom > {mnt}/big && sync && cat {mnt}/big > /dev/null")
            out = f"{mnt}/out.cpio"
            rows = {
                "GNU cpio": timed(f"echo big | cpio -o -H newc --quiet > {out}", mnt, out, a.runs),
                "bsdcpio": timed(f"echo big | bsdcpio -o -H newc --quiet > {out}", mnt, out, a.runs),
                "3cpio": timed(f"echo big | {three} --create --data-align 4096 {out}", mnt, out, a.runs),
                "leanrd": timed(f"echo big | {leanrd} cpio --paths --data-align 4096 -o {out}", mnt, out, a.runs),
            }
            results["a"] = table("(a) one 200 MiB file, --data-align 4096, loop XFS", rows, a.runs)
        finally:
            sh(f"umount {mnt}; rm -rf {d} {img}")

    d = tempfile.mkdtemp(prefix="leanrd-bench-mod-", dir=a.work)
    try:
        src = os.path.join(d, "modules")
        sh(f"cp -a /lib/modules/{kver} {src}")
        sh(f"cd {src} && find . -mindepth 1 | LC_ALL=C sort > {d}/list && find . -mindepth 1 | wc -l")
        sh(f"cat $(find {src} -type f) > /dev/null")
        out = f"{d}/out.cpio"
        rows = {
            "GNU cpio": timed(f"cpio -o -H newc --quiet < {d}/list > {out}", src, out, a.runs),
            "bsdcpio": timed(f"bsdcpio -o -H newc --quiet < {d}/list > {out}", src, out, a.runs),
            "3cpio": timed(f"{three} --create {out} < {d}/list", src, out, a.runs),
            "leanrd": timed(f"{leanrd} cpio --paths -o {out} < {d}/list", src, out, a.runs),
        }
        size = subprocess.run(f"du -sh {src}", shell=True, capture_output=True, text=True).stdout.split()[0]
        results["b"] = table(f"(b) /lib/modules/{kver} ({size}), working file system", rows, a.runs)

        sh(f"{leanrd} cpio --paths --data-align 4096 -o {out} < {d}/list", cwd=src)
        ok, elig = aligned_share(leanrd, out)
        sh(f"{three} --create --data-align 4096 {out}.3 < {d}/list", cwd=src)
        ok3, elig3 = aligned_share(leanrd, out + ".3")
        print("\n### (c) eligible files (>= 4096 bytes) with 4096-aligned data, tree (b)\n")
        print("| tool | aligned | eligible | share |\n|---|---:|---:|---:|")
        print(f"| leanrd | {ok} | {elig} | {100 * ok / elig:.1f} % |")
        print(f"| 3cpio | {ok3} | {elig3} | {100 * ok3 / elig3:.1f} % |")
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
