#!/usr/bin/env python3
"""The dracut reflink table (shared/seeds/002, 001), reproduced for leanrd on this machine.

For Btrfs and XFS, each loop-mounted for the run: a sysroot holding every source file the
images need (modules, binaries, libraries) is copied onto the mount, and `leanrd build
--sysroot` writes host-only and universal images onto the same mount in three modes:
  xz       --compress xz
  zstd     --compress zstd
  reflink  --compress none (aligned to 4096: file data cloned from the sysroot)
Reported per mode, as in the seeds: build runtime (median of --runs), QEMU (TCG) boot time
from kernel start to "Run /init", and the image's FIEMAP total / shared / exclusive bytes,
with percentages against the xz column.

Boots go through the harness (common.boot: crates/testkit's QEMU command line, -m 512 here).

Usage (root, Debian 12): python3 bench/seeds_table.py [--runs 3] [--kver KVER]
Raw results: bench/results/seeds_table-DATE-COMMIT.json (every build's seconds, each boot, FIEMAP).
"""

import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time

from common import UUID, boot, boot_setup, root_disk, save, sh

MODES = [("xz", ["--compress", "xz"]), ("zstd", ["--compress", "zstd"]), ("reflink", ["--compress", "none", "--data-align", "4096"])]


def out(cmd):
    return subprocess.run(cmd, shell=True, check=True, capture_output=True, text=True).stdout


def make_sysroot(leanrd, init, kver, dst):
    """Copy into dst every source the universal and host-only images use."""
    files, links = set(), {}
    for extra in ("--universal", ""):
        man = out(f"{leanrd} build -k {kver} --init {init} --print-manifest {extra}")
        for line in man.splitlines():
            w = line.split()
            if not w or w[0].startswith("#"):
                continue
            if w[0] == "file" and w[2].startswith("/") and not w[2].startswith("/tmp/"):
                files.add(w[2])
            elif w[0] == "slink":
                links[w[1]] = w[2]
        tmp = re.search(r"# generated and transformed files are in (\S+)", man)
        if tmp:
            shutil.rmtree(tmp.group(1), ignore_errors=True)
    for name, target in links.items():
        p = os.path.join(dst, name.lstrip("/"))
        os.makedirs(os.path.dirname(p), exist_ok=True)
        if not os.path.lexists(p):
            os.symlink(target, p)
    moddir = os.path.realpath(f"/lib/modules/{kver}")
    for f in sorted(files) + [f"{moddir}/{t}" for t in os.listdir(moddir) if t.startswith("modules.")] + ["/etc/ld.so.cache"]:
        real = os.path.realpath(f)
        p = os.path.join(dst, real.lstrip("/"))
        os.makedirs(os.path.dirname(p), exist_ok=True)
        shutil.copy2(real, p)


def boot_to_init(kernel, initrd, img):
    log = boot(kernel, initrd, f"root=UUID={UUID}", disks=[img], memory=512, timeout=120)["console"]
    m = re.search(r"\[\s*([0-9.]+)\] Run /init", log)
    return float(m.group(1)) if m else float("nan")


def pct(v, ref):
    return "(ref)" if v is ref else f"({100 * (v - ref) / ref:+.2f}%)" if ref else ""


def main():
    a, kver, kernel, leanrd, init0 = boot_setup()
    work = tempfile.mkdtemp(prefix="leanrd-bench-seeds-")
    print(f"## The seeds' table for leanrd, {time.strftime('%Y-%m-%d')}, kernel {kver}, {os.cpu_count()} cores, "
          f"QEMU TCG; build runtime median of {a.runs}\n")
    raw = []
    try:
        img = root_disk(work, partitioned=False)
        for fs in ("btrfs", "xfs"):
            fimg, mnt = os.path.join(work, f"{fs}.img"), os.path.join(work, fs)
            os.makedirs(mnt)
            sh(f"truncate -s 4G {fimg} && mkfs.{fs} -q {fimg} && mount -o loop {fimg} {mnt}")
            try:
                sysroot = os.path.join(mnt, "sysroot")
                os.makedirs(os.path.join(mnt, "boot"))
                init = os.path.join(mnt, "leanrd-init")
                shutil.copy2(init0, init)
                make_sysroot(leanrd, init, kver, sysroot)
                sh("sync")
                for kind, extra in (("host-only", []), ("universal", ["--universal"])):
                    res = {}
                    for mode, args in MODES:
                        o = os.path.join(mnt, "boot", f"initrd-{kind}-{mode}.img")
                        cmd = [leanrd, "build", "--force", "-k", kver, "--sysroot", sysroot, "--init", init, "-o", o, *extra, *args]
                        times = []
                        for _ in range(a.runs):
                            t0 = time.perf_counter()
                            subprocess.run(cmd, check=True, capture_output=True)
                            times.append(time.perf_counter() - t0)
                        sh("sync")
                        fiemap = json.loads(out(f"{leanrd} inspect --json {o}"))["fiemap"]
                        res[mode] = (statistics.median(times), boot_to_init(kernel, o, img), fiemap)
                        raw.append({"fs": fs, "image": kind, "mode": mode, "build_s": times,
                                    "kernel_to_init_s": None if res[mode][1] != res[mode][1] else res[mode][1], "fiemap": fiemap})
                    ref = res["xz"]
                    print(f"\n{fs.upper()} {kind} | leanrd xz | leanrd zstd | leanrd reflink")
                    print("---|---:|---:|---:")
                    row = lambda label, f: print(f"{label} | " + " | ".join(f(res[m], ref) for m, _ in MODES))
                    row("leanrd runtime", lambda r, x: f"{r[0]:.3f}s {pct(r[0], x[0]) if r is not x else '(ref)'}")
                    row("QEMU boot time: kernel to /init", lambda r, x: f"{1000 * r[1]:.1f}ms {pct(r[1], x[1]) if r is not x else '(ref)'}")
                    for key, label in (("total", "total bytes"), ("shared", "shared (deduplicated)"), ("exclusive", "exclusive")):
                        row(label, lambda r, x, k=key: f"{r[2][k]} {pct(r[2][k], x[2][k]) if r is not x and x[2][k] else '(ref)' if r is x else ''}")
                    xz_size = ref[2]["total"]
                    excl = res["reflink"][2]["exclusive"]
                    print(f"\nreflink exclusive / xz image: {100 * excl / xz_size:.1f} %; "
                          f"reflink build / zstd build: {res['reflink'][0] / res['zstd'][0]:.2f}")
            finally:
                sh(f"umount {mnt}; rm -f {fimg}")
        save("seeds_table", {"kernel": kver, "runs": a.runs, "cases": raw})
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
