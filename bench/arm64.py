#!/usr/bin/env python3
"""arm64 benchmark (issue 34): the Debian 13 arm64 root (tools/debian-root trixie arm64, made by
mmdebstrap through qemu-user-static) with its own arm64 kernel, booted on qemu-system-aarch64's
virt board under TCG (Cortex-A57, 1 GiB), ext4 on a GPT partition of a virtio-blk disk (PCI).
Variants:

  leanrd universal           `leanrd build --universal`: leanrd built for aarch64 (tools/arm64
                             leanrd), in a chroot of the arm64 root
  leanrd universal (x86-64)  the same image built natively on this x86-64 machine with
                             `--sysroot ROOT` (the aarch64 /init found by the root's architecture)
  initramfs-tools most       `mkinitramfs` (MODULES=most, Debian's default) in a chroot of the root
  dracut generic             `dracut --no-hostonly` in a chroot of the root with dracut installed

Every chroot build runs its arm64 programs under qemu-user: their seconds are emulated, not what
an arm64 machine takes, so compare them only as ratios among themselves (`leanrd universal
(x86-64)` is native, and not in a ratio). Measured, in one run: build seconds (median of --runs),
image bytes, and per boot (median of --runs boots): kernel start → multi-user.target
(systemd-analyze's total) and the initramfs phase ("Run /init" → the root's systemd starting,
from the kernel's timestamps on the console). Every boot must reach `is-system-running` = running.

leanrd's and initramfs-tools' images boot the root (which has initramfs-tools: the kernel package
pulls it in); dracut's boots the same root with dracut in place of initramfs-tools (they conflict).

Usage (root, x86-64 Debian 12 host): python3 bench/arm64.py [--runs 3]
Raw results: bench/results/arm64-DATE-COMMIT.json; bench/tables.py makes the README's table.
"""

import argparse
import concurrent.futures
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from common import (ROOT, boot, build_leanrd, chroot_build, harness, ratio, report, save, sh, suite_root,
                    tool_version)
from debian import UUID, disk, measure, med


def arm64_build(what):
    """tools/arm64 init|leanrd: the aarch64 build's path."""
    return subprocess.run([os.path.join(ROOT, "tools/arm64"), what], check=True, capture_output=True,
                          text=True).stdout.strip()


def tree_of(work, flavour, leanrd, init):
    """A copy of the arm64 root (`flavour` "" or "dracut") made a test system (the report on
    ttyAMA0, the aarch64 leanrd and /init in it)."""
    tree = os.path.join(work, f"{flavour or 'initramfs-tools'}-tree")
    sh(f"cp -a {suite_root('trixie arm64', flavour)} {tree}")
    harness("finish-tree", tree, "--leanrd", leanrd, "--init", init, "--console", "ttyAMA0")
    with open(f"{tree}/etc/fstab", "w") as f:
        f.write(f"UUID={UUID} / ext4 errors=remount-ro 0 1\n")
    return tree


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    host_leanrd, _ = build_leanrd()
    init, leanrd = arm64_build("init"), arm64_build("leanrd")
    kver, kernel = harness("kernel", "--suite", "trixie-arm64").strip().split("\t")
    work = tempfile.mkdtemp(prefix="leanrd-bench-arm64-", dir="/var/tmp")
    try:
        trees = {f: tree_of(work, f, leanrd, init) for f in ("", "dracut")}
        peers = {"initramfs-tools": tool_version(f"dpkg-query --admindir {trees['']}/var/lib/dpkg -W "
                                                 "-f '${Version}' initramfs-tools"),
                 "dracut": tool_version(f"dpkg-query --admindir {trees['dracut']}/var/lib/dpkg -W "
                                        "-f '${Version}' dracut")}
        images, builds = {}, {}
        for name, flavour, cmd in (
            ("leanrd universal", "", f"leanrd build -k {kver} --universal --force -o /tmp/bench.img"),
            ("initramfs-tools most", "", f"mkinitramfs -o /tmp/bench.img {kver}"),
            ("dracut generic", "dracut", f"dracut --no-hostonly --force /tmp/bench.img {kver}"),
        ):
            tree = trees[flavour]
            builds[name] = [chroot_build(tree, cmd, quiet=True) for _ in range(a.runs)]
            images[name] = os.path.join(work, name.replace(" ", "-") + ".img")
            shutil.move(f"{tree}/tmp/bench.img", images[name])
        name = "leanrd universal (x86-64)"
        images[name] = os.path.join(work, "leanrd-universal-x86-64.img")
        builds[name] = []
        for _ in range(a.runs):
            s = time.perf_counter()
            sh(f"{host_leanrd} build -k {kver} --universal --force --sysroot {trees['']} -o {images[name]}",
               stderr=subprocess.DEVNULL)
            builds[name].append(time.perf_counter() - s)

        disks = {f: disk(work, t, f or "initramfs-tools") for f, t in trees.items()}
        for t in trees.values():
            shutil.rmtree(t)

        def run(job):
            name, _ = job
            d = disks["dracut" if name.startswith("dracut") else ""]
            return name, boot(kernel, images[name], f"root=UUID={UUID}", disks=[d], snapshot=True, memory=1024,
                              timeout=1200, aarch64=True)
        jobs = [(name, i) for i in range(a.runs) for name in images]
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            runs = list(ex.map(run, jobs))
        print(f"## Debian 13 arm64 root (systemd), {time.strftime('%Y-%m-%d')}, kernel {kver}, qemu-system-aarch64 "
              f"TCG virt cortex-a57 -m 1024, virtio-blk (PCI) ext4 GPT, two VMs at a time; medians of {a.runs}\n")
        raw, res = report(images, builds, runs, measure, med)
        print()
        for lean, peer in (("leanrd universal", "initramfs-tools most"), ("leanrd universal", "dracut generic")):
            build = statistics.median(builds[lean]) / statistics.median(builds[peer])
            print(f"- {lean} / {peer}: build (both under qemu-user) {build:.2f}, "
                  f"initramfs phase {ratio(res, lean, peer, 1)}, whole boot {ratio(res, lean, peer, 0)}")
        save("arm64", {"kernel": kver, "runs": a.runs, "variants": raw}, peers)
        print("\nChroot build seconds are under qemu-user (emulated): ratios only. The x86-64 build is native.")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
