#!/usr/bin/env python3
"""Generator benchmark (issue 4), one run, same kernel: `leanrd build` host-only and
universal vs mkinitramfs (initramfs-tools, MODULES=dep and MODULES=most), dracut (dracut-core,
--hostonly and --no-hostonly, when installed) and mktirfs (tiny-initramfs, unpacked from its .deb
because it conflicts with initramfs-tools).

Reports the median wall time of --runs builds, the image size, and the number of entries
(counted by `leanrd ls`, which reads every format these tools write).

Usage (root, Debian 12): python3 bench/build.py [--runs 5] [--kver KVER]
Raw results: bench/results/build-DATE-COMMIT.json (every build's seconds).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from common import build_leanrd, kernel, save, sh, tirfs, tirfs_version, tool_version


def timed(cmd, runs):
    """Each run's seconds."""
    t = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sh(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t.append(time.perf_counter() - t0)
    return t


def entries(leanrd, img):
    out = subprocess.run([leanrd, "ls", img], capture_output=True, text=True).stdout
    return len(out.splitlines())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--kver", default=None)
    a = ap.parse_args()
    leanrd, init = build_leanrd()
    kver, _ = kernel("bookworm", a.kver)
    peers = {"initramfs-tools": tool_version("dpkg-query -W -f '${Version}' initramfs-tools"),
             "dracut": tool_version("dpkg-query -W -f '${Version}' dracut-core")}
    work = tempfile.mkdtemp(prefix="leanrd-bench-build-")
    try:
        rows = []
        out = os.path.join(work, "img")
        lb = f"{leanrd} build --force -k {kver} --init {init} -o {out}"
        for name, cmd in [("leanrd host-only (zstd:3)", lb), ("leanrd universal (zstd:3)", lb + " --universal")]:
            t = timed(cmd, a.runs)
            rows.append((name, t, os.path.getsize(out), entries(leanrd, out)))
        for mode in ("dep", "most"):
            conf = os.path.join(work, f"conf-{mode}")
            shutil.copytree("/etc/initramfs-tools", conf)
            sh(f"sed -i 's/^MODULES=.*/MODULES={mode}/' {conf}/initramfs.conf")
            t = timed(f"mkinitramfs -d {conf} -o {out} {kver}", a.runs)
            rows.append((f"mkinitramfs MODULES={mode}", t, os.path.getsize(out), entries(leanrd, out)))
        if shutil.which("dracut"):
            # dracut-core installs beside initramfs-tools; both its modes, zstd as leanrd.
            for mode in ("--hostonly", "--no-hostonly"):
                t = timed(f"dracut -q --force --compress zstd {mode} {out} {kver}", a.runs)
                rows.append((f"dracut {mode}", t, os.path.getsize(out), entries(leanrd, out)))
        else:
            print("(dracut not measured: apt-get install dracut-core)")
        try:
            m = tirfs(work)
            peers["tiny-initramfs"] = tirfs_version(work)
            t = timed(f"{m} -o {out} {kver}", a.runs)
            rows.append(("mktirfs", t, os.path.getsize(out), entries(leanrd, out)))
        except subprocess.CalledProcessError as e:
            print(f"(mktirfs not measured: {e})")
        print(f"## build benchmark, {time.strftime('%Y-%m-%d')}, kernel {kver}, {os.cpu_count()} cores, "
              f"median of {a.runs}\n")
        print("| generator | time s | image bytes | entries | time vs leanrd host-only |")
        print("|---|---:|---:|---:|---:|")
        base = statistics.median(rows[0][1])
        for name, t, size, n in rows:
            print(f"| {name} | {statistics.median(t):.3f} | {size} | {n} | {statistics.median(t) / base:.1f}x |")
        save("build", {"kernel": kver, "runs": a.runs,
                       "generators": {name: {"seconds": t, "image_bytes": size, "entries": n}
                                      for name, t, size, n in rows}}, peers)
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
