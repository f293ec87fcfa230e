#!/usr/bin/env python3
"""Boot benchmark (issue 5), one run, same kernel, same disk, QEMU TCG: the kernel time at
which the root's /sbin/init prints a marker (median of --runs boots), and the time from the
kernel's "Run /init" to the marker, for leanrd host-only vs initramfs-tools (mkinitramfs,
MODULES=dep) vs tiny-initramfs (mktirfs).

The disk: ext4 on an MBR partition of a virtio-blk disk (this machine's own kind of disk, so
host-only images built here fit it), root=UUID=. The root's init prints /proc/uptime.

Boots go through the harness (common.boot: crates/testkit's QEMU command line, -m 512 here).
Raw results: bench/results/boot-DATE-COMMIT.json (every boot's figures); the README's table is
made from them by bench/tables.py.

Usage (root, Debian 12, busybox-static): python3 bench/boot.py [--runs 3] [--kver KVER]
"""

import os
import re
import shutil
import statistics
import tempfile
import time

from common import MARK, UUID, boot, boot_setup, root_disk, save, sh, tirfs, tirfs_version, tool_version


def timed_boot(kernel, initrd, img):
    """(kernel uptime at the root's marker, "Run /init" → marker, the VM's seconds)."""
    got = boot(kernel, initrd, f"root=UUID={UUID} rootfstype=ext4", disks=[img], memory=512, timeout=120)
    log, vm = got["console"], got["vm_seconds"]
    m = re.search(MARK + r" ([0-9.]+)", log)
    r = re.search(r"\[\s*([0-9.]+)\] Run /init", log)
    if not m:
        return None, None, vm
    return float(m.group(1)), (float(m.group(1)) - float(r.group(1))) if r else None, vm


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
        peers = {"initramfs-tools": tool_version("dpkg-query -W -f '${Version}' initramfs-tools"),
                 "qemu": tool_version("qemu-system-x86_64 --version")}
        try:
            m = tirfs(work)
            peers["tiny-initramfs"] = tirfs_version(work)
            images["tiny-initramfs"] = os.path.join(work, "tirfs.img")
            sh(f"{m} -o {images['tiny-initramfs']} {kver}")
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"(tiny-initramfs not measured: {e})")
        print(f"## boot benchmark, {time.strftime('%Y-%m-%d')}, kernel {kver}, QEMU TCG, -m 512, "
              f"virtio-blk ext4 root=UUID, median of {a.runs}\n")
        print("| initramfs | image bytes | kernel → root init s | Run /init → root init s | boots ok |")
        print("|---|---:|---:|---:|---:|")
        res, raw = {}, {}
        for name, path in images.items():
            marks, runs = [], []
            raw[name] = {"image_bytes": os.path.getsize(path), "boots": []}
            for _ in range(a.runs):
                mk, ri, vm = timed_boot(kernel, path, img)
                raw[name]["boots"].append({"root_init_s": mk, "run_init_to_root_init_s": ri, "vm_seconds": vm})
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
        save("boot", {"kernel": kver, "runs": a.runs, "memory_mib": 512,
                      "disk": "virtio-blk, ext4 on an MBR partition, root=UUID", "images": raw}, peers)
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
