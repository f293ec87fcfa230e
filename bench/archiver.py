#!/usr/bin/env python3
"""Archiver benchmark (issues 2 and 17): leanrd vs 3cpio, GNU cpio, bsdcpio and the kernel's
gen_init_cpio, in one run, on file systems made for the run (loop devices):

(a) the kernel's modules tree (/lib/modules/KVER copied in), aligned (--data-align = the
    block size, 4096), on XFS and on Btrfs: the reflink path; plus a bare loop of
    FICLONERANGE calls over the same files into one file (what cloning alone costs);
(b) the same tree on ext4 (no reflinks: the copy path), unaligned;
(c) one 200 MiB file, aligned, on XFS;
(d) Btrfs extents per MiB of the aligned images (fragmentation costs at read time);
(e) the share of eligible files (>= 4096 bytes) whose data is 4096-aligned.

Every command is followed by an fsync of its output (`sync FILE`), so all are equally durable
(leanrd fsyncs before its atomic rename; the others do not). Runs alternate between the tools
(the starting tool rotates), sources are in the page cache, outputs are removed between runs;
medians of --runs, ratios leanrd / tool.

gen_init_cpio is built from the kernel's usr/gen_init_cpio.c (Debian's linux-source package);
6.1's has no -a (data alignment), so it runs on the copy path only. dracut-cpio is not in
Debian 12's dracut, so it is not measured.

Usage (root, Debian): python3 bench/archiver.py [--runs 5] [--kver 6.1.0-...]
Needs: cpio, bsdcpio (libarchive-tools), xfsprogs, btrfs-progs; 3cpio is built with
`cargo install threecpio` into bench/.tools if it is not on PATH.
Raw results: bench/results/archiver-DATE-COMMIT.json (every run's seconds, per case).
"""

import argparse
import fcntl
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from common import ROOT, build_leanrd, kernel, save, sh, tool_version

TOOLS = os.path.join(ROOT, "bench/.tools")
FICLONERANGE = 0x4020940D


def tool(name, install):
    p = shutil.which(name)
    if p:
        return p
    local = os.path.join(TOOLS, "bin", name)
    if not os.path.exists(local):
        print(f"building {name}: {install}", file=sys.stderr)
        sh(install + f" --root {TOOLS} >/dev/null 2>&1")
    return local


def gen_init_cpio():
    """The kernel's gen_init_cpio, built from Debian's linux-source; None if unavailable."""
    exe = os.path.join(TOOLS, "bin", "gen_init_cpio")
    if os.path.exists(exe):
        return exe
    d = tempfile.mkdtemp(prefix="leanrd-gic-")
    try:
        sh("apt-get -o APT::Sandbox::User=root download 'linux-source-6.1' >/dev/null 2>&1", cwd=d)
        deb = next(f for f in os.listdir(d) if f.endswith(".deb"))
        sh(f"dpkg-deb --fsys-tarfile {deb} | tar -xO --wildcards './usr/src/linux-source-*.tar.xz' "
           "| tar -xJ --wildcards '*/usr/gen_init_cpio.c'", cwd=d)
        src = subprocess.run(f"find {d} -name gen_init_cpio.c", shell=True, capture_output=True,
                             text=True).stdout.split()[0]
        os.makedirs(os.path.dirname(exe), exist_ok=True)
        sh(f"gcc -O2 -o {exe} {src}")
        return exe
    except Exception as e:  # noqa: BLE001 - a peer we cannot build is reported, not fatal
        print(f"(gen_init_cpio not built: {e})", file=sys.stderr)
        return None
    finally:
        shutil.rmtree(d, ignore_errors=True)


def timed_all(cmds, cwd, out, runs):
    """Durable seconds of each command (command, then fsync of `out`), each run's, alternating."""
    res = {k: [] for k in cmds}
    names = list(cmds)
    for r in range(runs):
        for k in names[r % len(names):] + names[:r % len(names)]:
            if os.path.exists(out):
                os.remove(out)
            sh("sync")
            t0 = time.perf_counter()
            c = cmds[k]
            if callable(c):
                c()
            else:
                sh(c, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            sh(f"sync {out}")
            res[k].append(time.perf_counter() - t0)
    return res


def table(title, raw, runs, note=""):
    print(f"\n### {title}\n")
    print(f"median of {runs} alternating runs, each command + fsync of its output{note}\n")
    print("| tool | ms | leanrd / tool |")
    print("|---|---:|---:|")
    rows = medians(raw)
    ours = rows["leanrd"]
    for name, d in rows.items():
        print(f"| {name} | {1000 * d:.1f} | {ours / d:.2f} |")


def medians(raw):
    return {k: statistics.median(v) for k, v in raw.items()}


def bare_clone_loop(files, out, block=4096):
    """Clone each file's whole blocks into `out` back to back (open, FICLONERANGE, close),
    then fsync: the floor for an archiver that clones every eligible file."""
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, sum(os.path.getsize(f) // block * block + block for f in files))
        at = 0
        for f in files:
            size = os.path.getsize(f)
            whole = size // block * block
            if whole == 0:
                continue
            s = os.open(f, os.O_RDONLY)
            try:
                fcntl.ioctl(fd, FICLONERANGE, struct.pack("qQQQ", s, 0, whole, at))
            finally:
                os.close(s)
            at += whole + block
        os.fsync(fd)
    finally:
        os.close(fd)


def extents(path):
    out = subprocess.run(["xfs_io", "-r", "-c", "fiemap", path], capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines()[1:] if "hole" not in line)


def aligned_share(leanrd, image):
    out = subprocess.run([leanrd, "ls", "--json", image], check=True, capture_output=True, text=True).stdout
    elig = ok = 0
    for line in out.splitlines():
        e = json.loads(line)
        if e["type"] == "file" and e["size"] >= 4096:
            elig += 1
            ok += e["data_offset"] % 4096 == 0
    return ok, elig


class Loop:
    def __init__(self, kind, size="3G"):
        self.dir = tempfile.mkdtemp(prefix=f"leanrd-bench-{kind}-", dir="/var/tmp")
        self.img, self.mnt = self.dir + ".img", os.path.join(self.dir, "mnt")
        os.makedirs(self.mnt)
        mkfs = {"xfs": "mkfs.xfs -q -f", "btrfs": "mkfs.btrfs -q -f", "ext4": "mkfs.ext4 -q -F"}[kind]
        sh(f"truncate -s {size} {self.img} && {mkfs} {self.img} && mount -o loop {self.img} {self.mnt}")

    def close(self):
        subprocess.run(f"umount {self.mnt}; rm -rf {self.dir} {self.img}", shell=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--kver", default=None)
    a = ap.parse_args()

    leanrd, _ = build_leanrd()
    three = tool("3cpio", "cargo install -q threecpio")
    gic = gen_init_cpio()
    kver, _ = kernel("bookworm", a.kver)
    print(f"## archiver benchmark, {time.strftime('%Y-%m-%d')}, {os.uname().machine}, {os.cpu_count()} cores, "
          f"host kernel {os.uname().release}, modules tree {kver}")
    peers = {"GNU cpio": tool_version("cpio --version"), "bsdcpio": tool_version("bsdcpio --version"),
             "3cpio": tool_version(f"{three} --version"),
             "gen_init_cpio": "linux-source-6.1" if gic else None}
    for name, v in peers.items():
        print(f"- {name}: {v or 'not available'}")
    cases = []

    images = {}
    for kind in ("xfs", "btrfs", "ext4"):
        fs = Loop(kind)
        try:
            src = os.path.join(fs.mnt, "modules")
            sh(f"cp -a /lib/modules/{kver} {src}")
            lst = os.path.join(fs.mnt, "list")
            sh(f"cd {src} && find . -mindepth 1 | LC_ALL=C sort > {lst}")
            files = [os.path.join(src, line.strip()) for line in open(lst)
                     if os.path.isfile(os.path.join(src, line.strip())) and not os.path.islink(os.path.join(src, line.strip()))]
            sh(f"cat $(find {src} -type f) > /dev/null")
            out = os.path.join(fs.mnt, "out.cpio")
            n, mib = len(files), sum(os.path.getsize(f) for f in files) / (1 << 20)
            if kind in ("xfs", "btrfs"):
                eligible = sum(1 for f in files if os.path.getsize(f) >= 4096)
                cmds = {
                    "leanrd": f"{leanrd} cpio --paths --data-align 4096 -o {out} < {lst}",
                    "3cpio": f"{three} --create --data-align 4096 {out} < {lst}",
                    "bare FICLONERANGE loop": lambda: bare_clone_loop(files, out),
                }
                raw = timed_all(cmds, src, out, a.runs)
                rows = medians(raw)
                table(f"(a) modules tree on {kind}, aligned to 4096 ({n} files, {mib:.0f} MiB, {eligible} cloned)",
                      raw, a.runs)
                cases.append({"case": "tree-aligned", "fs": kind, "files": n, "mib": mib, "cloned": eligible,
                              "seconds": raw})
                us = {k: 1e6 * v / eligible for k, v in rows.items()}
                print(f"\nper cloned file: leanrd {us['leanrd']:.1f} µs, 3cpio {us['3cpio']:.1f} µs, "
                      f"bare clone loop {us['bare FICLONERANGE loop']:.1f} µs "
                      f"(leanrd is {us['leanrd'] / us['bare FICLONERANGE loop']:.2f}× the floor)")
                for name, cmd in (("leanrd", cmds["leanrd"]), ("3cpio", cmds["3cpio"])):
                    sh(cmd, cwd=src, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    sh(f"sync {out}")
                    images[(kind, name)] = (extents(out), os.path.getsize(out) / (1 << 20))
                    if kind == "xfs":
                        images[("share", name)] = aligned_share(leanrd, out)
            else:
                cmds = {
                    "leanrd": f"{leanrd} cpio --paths -o {out} < {lst}",
                    "3cpio": f"{three} --create {out} < {lst}",
                    "GNU cpio": f"cpio -o -H newc --quiet < {lst} > {out}",
                    "bsdcpio": f"bsdcpio -o --format newc --quiet < {lst} > {out}",
                }
                # The floor of the copy path: the same bytes of data, concatenated, made durable.
                fl = os.path.join(fs.mnt, "files.list")
                with open(fl, "w") as g:
                    g.write("".join(f + "\n" for f in files))
                cmds["bare copy (xargs cat)"] = f"xargs -d '\\n' -a {fl} cat > {out}"
                if gic:
                    gl = os.path.join(fs.mnt, "gic.list")
                    with open(gl, "w") as g:
                        for line in open(lst):
                            p = line.strip()
                            full = os.path.join(src, p)
                            name = p[2:] if p.startswith("./") else p
                            st = os.lstat(full)
                            mode = oct(st.st_mode & 0o7777)[2:]
                            if os.path.islink(full):
                                g.write(f"slink /{name} {os.readlink(full)} {mode} 0 0\n")
                            elif os.path.isdir(full):
                                g.write(f"dir /{name} {mode} 0 0\n")
                            else:
                                g.write(f"file /{name} {full} {mode} 0 0\n")
                    cmds["gen_init_cpio"] = f"{gic} {gl} > {out}"
                raw = timed_all(cmds, src, out, a.runs)
                rows = medians(raw)
                table(f"(b) modules tree on ext4, copy path ({n} files, {mib:.0f} MiB)", raw, a.runs)
                cases.append({"case": "tree-copy", "fs": kind, "files": n, "mib": mib, "seconds": raw})
                others = {k: v for k, v in rows.items() if k != "leanrd" and not k.startswith("bare")}
                best = min(others, key=others.get)
                print(f"\nleanrd / best peer ({best}): {rows['leanrd'] / others[best]:.2f}")
            if kind == "xfs":
                big = os.path.join(fs.mnt, "big")
                sh(f"head -c 200M /dev/urandom > {big} && sync && cat {big} > /dev/null")
                cmds = {
                    "leanrd": f"echo big | {leanrd} cpio --paths --data-align 4096 -o {out}",
                    "3cpio": f"echo big | {three} --create --data-align 4096 {out}",
                    "GNU cpio": f"echo big | cpio -o -H newc --quiet > {out}",
                    "bsdcpio": f"echo big | bsdcpio -o --format newc --quiet > {out}",
                }
                raw = timed_all(cmds, fs.mnt, out, a.runs)
                table("(c) one 200 MiB file, aligned to 4096, XFS", raw, a.runs)
                cases.append({"case": "one-file", "fs": kind, "files": 1, "mib": 200, "seconds": raw})
        finally:
            fs.close()

    print("\n### (d) extents of the aligned images (xfs_io fiemap), per MiB of image\n")
    print("| fs | tool | extents | image MiB | extents / MiB |\n|---|---|---:|---:|---:|")
    for kind in ("xfs", "btrfs"):
        for name in ("leanrd", "3cpio"):
            e, m = images[(kind, name)]
            print(f"| {kind} | {name} | {e} | {m:.0f} | {e / m:.1f} |")
    print("\n### (e) eligible files (>= 4096 bytes) with 4096-aligned data, XFS tree\n")
    print("| tool | aligned | eligible | share |\n|---|---:|---:|---:|")
    for name in ("leanrd", "3cpio"):
        ok, elig = images[("share", name)]
        print(f"| {name} | {ok} | {elig} | {100 * ok / elig:.1f} % |")
    save("archiver", {"kernel": kver, "runs": a.runs, "cases": cases,
                      "extents": [{"fs": k, "tool": t, "extents": images[(k, t)][0], "image_mib": images[(k, t)][1]}
                                  for k in ("xfs", "btrfs") for t in ("leanrd", "3cpio")],
                      "aligned": {t: {"aligned": images[("share", t)][0], "eligible": images[("share", t)][1]}
                                  for t in ("leanrd", "3cpio")}}, peers)


if __name__ == "__main__":
    main()
