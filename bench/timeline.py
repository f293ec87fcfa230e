#!/usr/bin/env python3
"""Boot timelines (issue 16): the Debian bookworm root (systemd, tools/debian-root), one disk,
the Debian kernel under QEMU TCG, booted with three images:

  leanrd host-only         `leanrd build` inside the VM, on its own devices
  leanrd universal         `leanrd build --universal --sysroot ROOT`, on the host
  initramfs-tools dep      `mkinitramfs` with MODULES=dep inside the VM

Each boot prints /init's step log (/run/initramfs/leanrd.log) and the journal
(`journalctl -b -o short-monotonic`) on the console; `leanrd analyze` reads both and writes
the timeline as SVG, rendered to PNG by rsvg-convert (librsvg2-bin) for the README. The
phase table below is `leanrd analyze`'s own figures, median of --runs boots.

Boots go through the harness (debian.boot_root → common.boot: crates/testkit's QEMU command line).

Usage (root, Debian 12): python3 bench/timeline.py [--runs 1] [--kver KVER] [--out docs]
Raw results: bench/results/timeline-DATE-COMMIT.json (each boot's phases).
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, build_leanrd, kernel, save, sh  # noqa: E402
import debian  # noqa: E402


def analyze(leanrd, log, work, name, out_dir):
    """Run `leanrd analyze` on one boot's console; returns (phases, svg path)."""
    rec = os.path.join(work, f"{name}.leanrd.log")
    jour = os.path.join(work, f"{name}.journal")
    with open(rec, "w") as f:
        f.write("".join(m + "\n" for m in re.findall(r"LEANRD-INITRD (.*)", log)))
    with open(jour, "w") as f:
        f.write("".join(m + "\n" for m in re.findall(r"LEANRD-JOURNAL (.*)", log)))
    svg = os.path.join(out_dir, f"timeline-{name}.svg")
    srcs = [p for p in (rec, jour) if os.path.getsize(p) > 0]
    title = f"{name}: Debian 12 systemd root, QEMU TCG, kernel → multi-user"
    r = subprocess.run([leanrd, "analyze", *srcs, "--svg", svg, "--title", title], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"({name}: analyze failed: {r.stderr.strip()})")
        return None, None
    phases = {}
    for key, pat in (("kernel", r"kernel until /init\s+([0-9.]+) s"), ("initramfs", r"initramfs \(/init\)\s+([0-9.]+) s"),
                     ("root", r"root system to multi-user ([0-9.]+) s"), ("total", r"total\s+([0-9.]+) s"),
                     ("modules", r"module loads\s+(\d+) modules, ([0-9.]+) s")):
        m = re.search(pat, r.stdout)
        if m:
            phases[key] = float(m.group(len(m.groups())))
            if key == "modules":
                phases["nmod"] = int(m.group(1))
    return phases, svg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--kver", default=None)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs"))
    a = ap.parse_args()
    leanrd, init = build_leanrd()
    kver, vmlinuz = kernel("bookworm", a.kver)
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="leanrd-bench-timeline-", dir="/var/tmp")
    try:
        tree = debian.prepare(work, "initramfs-tools", kver, leanrd, init, 1, "bookworm")
        images = {"leanrd-universal": os.path.join(work, "leanrd-universal.img")}
        sh(f"{leanrd} build -k {kver} --universal --force --sysroot {tree} --init {init} "
           f"-o {images['leanrd-universal']}", stderr=subprocess.DEVNULL)
        disk = debian.disk(work, tree, "root")
        shutil.rmtree(tree)
        # The host-only images, built by the root's own generators inside the VM.
        log = debian.boot_root(vmlinuz, images["leanrd-universal"], disk, "leanrd.bench=build", snapshot=False,
                               secs=1500)["console"]
        got = debian.take(work, disk, ["leanrd-host-only.img", "initramfs-tools-dep.img"], "vm")
        for k in ("leanrd-host-only", "initramfs-tools-dep"):
            if f"{k}.img" not in got:
                raise SystemExit(f"{k}: not built in the VM:\n{log[-3000:]}")
            images[k] = got[f"{k}.img"]
        order = ["leanrd-host-only", "leanrd-universal", "initramfs-tools-dep"]
        rows = {n: [] for n in order}
        for run in range(a.runs):
            for name in order:
                log = debian.boot_root(vmlinuz, images[name], disk, "leanrd.test=journal")["console"]
                if "LEANRD-STATE running" not in log:
                    print(f"({name}: run {run + 1} did not reach running)\n{log[-2000:]}")
                    continue
                phases, svg = analyze(leanrd, log, work, name, a.out)
                if phases:
                    rows[name].append(phases)
        print(f"## Boot timelines, {time.strftime('%Y-%m-%d')}, kernel {kver}, QEMU TCG -m 1024, "
              f"virtio-blk ext4, Debian bookworm systemd root; `leanrd analyze`, median of {a.runs}\n")
        print("| image | kernel → /init s | initramfs s | modules (wall s) | root → multi-user s | total s |")
        print("|---|---:|---:|---:|---:|---:|")

        def med(name, key):
            xs = [r[key] for r in rows[name] if key in r]
            return f"{statistics.median(xs):.2f}" if xs else "–"
        for name in order:
            nm = rows[name][0].get("nmod", 0) if rows[name] else 0
            print(f"| {name} | {med(name, 'kernel')} | {med(name, 'initramfs')} | {nm} ({med(name, 'modules')}) | "
                  f"{med(name, 'root')} | {med(name, 'total')} |")
        save("timeline", {"kernel": kver, "runs": a.runs, "phases": rows})
        if shutil.which("rsvg-convert"):
            for name in order:
                svg = os.path.join(a.out, f"timeline-{name}.svg")
                if os.path.exists(svg):
                    sh(f"rsvg-convert -o {svg[:-4]}.png {svg}")
            print(f"\nSVG and PNG in {a.out}/timeline-*.{{svg,png}}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
