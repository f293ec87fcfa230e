#!/usr/bin/env python3
"""Resume benchmark (issue 14), QEMU TCG, one run: a busybox root on ext4 (GPT partition 1 of a
virtio-blk disk) with a swap partition, booted by a leanrd universal image.

  cold boot   QEMU start → the root's init runs (a fresh boot's first line)
  resume      QEMU start → the hibernated system's first line after the restore (a token it
              had in a tmpfs file, read back)

Medians of --runs. Also from the kernel's own lines: where /init starts ("Run /init"), and how
long the kernel took to read the image ("PM: ... Read N kbytes in S seconds"), so that what
dominates a resume is visible.

Boots go through the harness (common.boot: crates/testkit's QEMU command line, -m 512 here); its
marks are timed from QEMU's start.

Usage (root): python3 bench/resume.py [--runs 3] [--kver KVER]
Raw results: bench/results/resume-DATE-COMMIT.json (every boot's figures).
"""

import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time

from common import boot, boot_setup, save, sh

ROOT_UUID = "12121212-3434-5656-7878-0000000000be"
SWAP_UUID = "5a5a5a5a-1111-2222-3333-0000000000be"
INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc 2>/dev/null; mount -t tmpfs tmp /tmp
echo LEANRD-FRESH-BOOT
if grep -qw leanrd.test=hibernate /proc/cmdline; then
  cat /proc/sys/kernel/random/uuid > /tmp/token
  swapon /dev/vda2
  echo shutdown > /sys/power/disk; echo disk > /sys/power/state
  echo LEANRD-RESUMED $(cat /tmp/token)
fi
poweroff -f
"""


def timed_boot(kernel, initrd, disk, append):
    """Boot; (seconds from QEMU's start to each marker seen, console text)."""
    r = boot(kernel, initrd, f"root=UUID={ROOT_UUID} resume=UUID={SWAP_UUID} {append}".strip(), disks=[disk],
             memory=512, marks=["LEANRD-FRESH-BOOT", "LEANRD-RESUMED"], timeout=300)
    return r["marks"], r["console"]


def main():
    a, kver, kernel, leanrd, init = boot_setup()
    work = tempfile.mkdtemp(prefix="leanrd-bench-resume-")
    try:
        tree = os.path.join(work, "root")
        for d in ("sbin", "bin", "dev", "proc", "sys", "run", "tmp"):
            os.makedirs(os.path.join(tree, d))
        shutil.copy("/bin/busybox", os.path.join(tree, "bin/busybox"))
        with open(os.path.join(tree, "sbin/init"), "w") as f:
            f.write(INIT)
        os.chmod(os.path.join(tree, "sbin/init"), 0o755)
        rootfs, swap, disk = (os.path.join(work, n) for n in ("root.fs", "swap.fs", "disk"))
        sh(f"truncate -s 64M {rootfs} && mkfs.ext4 -q -U {ROOT_UUID} -d {tree} {rootfs}")
        sh(f"truncate -s 256M {swap} && mkswap -q -U {SWAP_UUID} {swap}")
        sh(f"truncate -s 330M {disk} && printf 'label: gpt\\nstart=2048, size=64M\\nsize=256M, type=S\\n' "
           f"| sfdisk -q {disk} && dd if={rootfs} of={disk} bs=1M seek=1 conv=notrunc,sparse status=none "
           f"&& dd if={swap} of={disk} bs=1M seek=65 conv=notrunc,sparse status=none")
        img = os.path.join(work, "universal.img")
        sh(f"{leanrd} build -k {kver} --universal --init {init} -o {img}", stderr=subprocess.DEVNULL)

        cold, resumed, run_init_cold, run_init_resume, read_s, kbytes = [], [], [], [], [], []
        raw = []
        for _ in range(a.runs):
            seen, log = timed_boot(kernel, img, disk, "")
            cold.append(seen.get("LEANRD-FRESH-BOOT"))
            r = re.search(r"\[\s*([0-9.]+)\] Run /init", log)
            run_init_cold.append(float(r.group(1)) if r else None)
            timed_boot(kernel, img, disk, "leanrd.test=hibernate")
            seen, log = timed_boot(kernel, img, disk, "")
            if "LEANRD-FRESH-BOOT" in seen:
                print("(a resume came up as a fresh boot)")
            resumed.append(seen.get("LEANRD-RESUMED"))
            r = re.search(r"\[\s*([0-9.]+)\] Run /init", log)
            run_init_resume.append(float(r.group(1)) if r else None)
            m = re.search(r"PM: (?:hibernation: )?Read (\d+) kbytes in ([0-9.]+) seconds", log)
            if m:
                kbytes.append(int(m.group(1)))
                read_s.append(float(m.group(2)))
            raw.append({"cold_s": cold[-1], "cold_run_init_s": run_init_cold[-1], "resume_s": resumed[-1],
                        "resume_run_init_s": run_init_resume[-1], "image_read_kib": int(m.group(1)) if m else None,
                        "image_read_s": float(m.group(2)) if m else None})

        def med(xs, fmt="{:.2f}"):
            xs = [x for x in xs if x is not None]
            return fmt.format(statistics.median(xs)) if xs else "–"
        print(f"## resume benchmark, {time.strftime('%Y-%m-%d')}, kernel {kver}, QEMU TCG -m 512, "
              f"virtio-blk, busybox root, swap partition; medians of {a.runs}\n")
        print("| boot | QEMU start → root userspace s | kernel → Run /init s | image read by the kernel |")
        print("|---|---:|---:|---|")
        print(f"| cold boot | {med(cold)} | {med(run_init_cold)} | – |")
        print(f"| resume | {med(resumed)} | {med(run_init_resume)} | {med(kbytes, '{:.0f}')} KiB in "
              f"{med(read_s)} s |")
        save("resume", {"kernel": kver, "runs": a.runs, "memory_mib": 512, "runs_raw": raw})
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
