#!/usr/bin/env python3
"""Boot benchmark (issue 5), one run, same kernel, same disk, QEMU TCG: the kernel time at
which the root's /sbin/init prints a marker (median of --runs boots), and the time from the
kernel's "Run /init" to the marker, for leanrd host-only vs initramfs-tools (mkinitramfs,
MODULES=dep) vs tiny-initramfs (mktirfs).

The disk: ext4 on an MBR partition of a virtio-blk disk (this machine's own kind of disk, so
host-only images built here fit it), root=UUID=. The root's init prints /proc/uptime.

Usage (root, Debian 12, busybox-static): python3 bench/boot.py [--runs 3] [--kver KVER]
"""

import os
import re
import shutil
import statistics
import tempfile
import time

from common import MARK, boot_setup, qemu, root_disk, sh, tirfs


def boot(kernel, initrd, img):
    log = qemu(kernel, initrd, img, "rootfstype=ext4")
    m = re.search(MARK + r" ([0-9.]+)", log)
    r = re.search(r"\[\s*([0-9.]+)\] Run /init", log)
    if not m:
        return None, None
    return float(m.group(1)), (float(m.group(1)) - float(r.group(1))) if r else None


def main():
    a, kver, kernel, leanrd, init = boot_setup()
    work = tempfile.mkdtemp(prefix="leanrd-bench-boot-")
    try:
        img = root_disk(work)
        images = {}
        images["leanrd host-only"] = os.path.join(work, "leanrd.img")
        sh(f"{leanrd} build -k {kver} --init {init} -o {images['leanrd host-only']}")
        conf = os.path.join(work, "conf")
        shutil.copytree("/etc/initramfs-tools", conf)
        sh(f"sed -i 's/^MODULES=.*/MODULES=dep/' {conf}/initramfs.conf")
        images["initramfs-tools MODULES=dep"] = os.path.join(work, "itools.img")
        sh(f"mkinitramfs -d {conf} -o {images['initramfs-tools MODULES=dep']} {kver}")
        try:
            m = tirfs(work)
            images["tiny-initramfs"] = os.path.join(work, "tirfs.img")
            sh(f"{m} -o {images['tiny-initramfs']} {kver}")
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"(tiny-initramfs not measured: {e})")
        print(f"## boot benchmark, {time.strftime('%Y-%m-%d')}, kernel {kver}, QEMU TCG, -m 512, "
              f"virtio-blk ext4 root=UUID, median of {a.runs}\n")
        print("| initramfs | image bytes | kernel → root init s | Run /init → root init s | boots ok |")
        print("|---|---:|---:|---:|---:|")
        res = {}
        for name, path in images.items():
            marks, runs = [], []
            for _ in range(a.runs):
                mk, ri = boot(kernel, path, img)
                if mk is not None:
                    marks.append(mk)
                if ri is not None:
                    runs.append(ri)
            med = statistics.median(marks) if marks else float("nan")
            medr = statistics.median(runs) if runs else float("nan")
            res[name] = med
            print(f"| {name} | {os.path.getsize(path)} | {med:.2f} | {medr:.2f} | {len(marks)}/{a.runs} |")
        ours, it = res.get("leanrd host-only"), res.get("initramfs-tools MODULES=dep")
        if ours and it:
            print(f"\nleanrd / initramfs-tools (kernel → root init): {ours / it:.2f}")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
