#!/usr/bin/env python3
"""A dm-verity root (issue 55): leanrd's universal image beside dracut with systemd-veritysetup
(Debian 13's dracut) on the same disk, the same kernel (Debian 13's, from the cached dracut root
`tools/debian-root trixie dracut`) and the same command line.

The disk is laid out as boot_verity.rs lays its own (and systemd-repart a verified image): a
busybox ext4 root (4 KiB blocks) whose hash tree `veritysetup format` made on plain files, on a
GPT disk whose root partition's PARTUUID is the root hash's first 128 bits and the verity
partition's its last 128, DPS's type UUIDs. The root has an /etc/os-release (systemd's switch-root
refuses a root without) and its /sbin/init prints LEANRD-VERITY-ROOT, then powers off.

Images:
  leanrd   `leanrd build --universal --sysroot ROOT` (ROOT: a copy of the dracut root, its
           kernel's modules)
  dracut   `dracut --no-hostonly --add systemd-veritysetup` in a chroot of that root, with
           systemd-cryptsetup installed (Debian 13 ships systemd-veritysetup and its generator in
           it; nothing pulls it in)
Command line, both: `root=/dev/mapper/root roothash=HASH` (systemd-veritysetup-generator finds the
data and hash partitions by the hash's halves, as leanrd does).

Measured per boot, on the kernel's clock (its timestamps on the console, no `quiet`): kernel
start → the root mounted (the kernel's "EXT4-fs (dm-0): mounted filesystem" line: the verity
device's file system), and → the root's own init run (TOMOYO's "Not activating Mandatory Access
Control" line, at the first exec of /sbin/init); the initramfs phase ("Run /init as init
process" → the root's init). Medians of --runs, one VM at a time; a failed boot is recorded with
its console's last lines.

Usage (root, Debian 12 host): LEANRD_VM_SLOTS=1 nice -n 10 python3 bench/verity.py [--runs 3]
  [--work DIR (kept; its images and disk used again)]
Raw results: bench/results/verity-DATE-COMMIT.json.
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import tempfile
import time

from debian import med
from common import (HARNESS, ktime, build_leanrd, chroot_build, chroot_install, debian_tree, save, sh, tool_version)

MARK = "LEANRD-VERITY-ROOT"
ROOT_TYPE = "4f68bce3-e8cd-4db1-96e7-fbcaf984b709"
VERITY_TYPE = "2c7357ed-ebd2-46d9-aec1-23d437ec2bf5"
RUN_INIT = "Run /init as init process"
ROOT_INIT = "Not activating Mandatory Access Control"
MOUNTED = "EXT4-fs (dm-0): mounted filesystem"
STOP = ["Kernel panic", "Entering emergency mode", "leanrd: cannot boot", "You are in emergency mode",
        "Failed to start"]


def uuid(h):
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def verity_disk(work):
    """The busybox root on a verity GPT disk; (disk, root hash)."""
    tree = f"{work}/vroot"
    for d in ("sbin", "bin", "dev", "proc", "sys", "run", "tmp", "etc", "usr"):
        os.makedirs(f"{tree}/{d}")
    shutil.copy("/bin/busybox", f"{tree}/bin/busybox")
    os.symlink("busybox", f"{tree}/bin/sh")
    with open(f"{tree}/etc/os-release", "w") as f:
        f.write("ID=leanrd-bench\nNAME=\"leanrd bench root\"\n")
    with open(f"{tree}/sbin/init", "w") as f:
        f.write(f"#!/bin/sh\nb=/bin/busybox\n$b mount -t proc proc /proc 2>/dev/null\n"
                f"$b echo {MARK} $($b cut -d' ' -f1 /proc/uptime)\n"
                f"$b echo ROOT-MOUNT $($b grep ' / ' /proc/mounts)\n$b poweroff -f\n")
    os.chmod(f"{tree}/sbin/init", 0o755)
    data, hashf = f"{work}/root.fs", f"{work}/root.verity"
    sh(f"truncate -s 32M {data} && mkfs.ext4 -q -b 4096 -d {tree} -L vroot {data}")
    out = subprocess.run(["veritysetup", "format", data, hashf], check=True, capture_output=True, text=True).stdout
    root_hash = next(l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Root hash:"))
    sectors = lambda p: -(-os.path.getsize(p) // (1 << 20)) * 2048
    ds, hs = sectors(data), sectors(hashf)
    disk = f"{work}/verity.disk"
    sh(f"truncate -s {(2048 + ds + hs + 2048) * 512} {disk}")
    script = (f"label: gpt\nstart=2048, size={ds}, type={ROOT_TYPE}, uuid={uuid(root_hash[:32])}, name=root\n"
              f"start={2048 + ds}, size={hs}, type={VERITY_TYPE}, uuid={uuid(root_hash[-32:])}, "
              f"name=root-verity, attrs=GUID:60\n")
    subprocess.run(["sfdisk", "-q", disk], input=script, text=True, check=True)
    sh(f"dd if={data} of={disk} bs=512 seek=2048 conv=notrunc status=none")
    sh(f"dd if={hashf} of={disk} bs=512 seek={2048 + ds} conv=notrunc status=none")
    shutil.rmtree(tree)
    os.remove(data)
    os.remove(hashf)
    return disk, root_hash


def make(work, leanrd, init):
    tree = debian_tree(work, "dracut", None, "trixie")
    chroot_install(tree, ["systemd-cryptsetup"])
    kver = os.path.basename(glob.glob(f"{tree}/usr/lib/modules/*")[0])
    shutil.copy(f"{tree}/boot/vmlinuz-{kver}", f"{work}/vmlinuz")
    lcmd = f"{leanrd} build -k {kver} --universal --force --sysroot {tree} --init {init} -o {work}/leanrd.img"
    s = time.perf_counter()
    sh(f"nice -n 10 {lcmd}", stderr=subprocess.DEVNULL)
    lbuild = time.perf_counter() - s
    dcmd = f"dracut --no-hostonly --add systemd-veritysetup --force /tmp/peer.img {kver}"
    dbuild = chroot_build(tree, f"nice -n 10 {dcmd}", quiet=True)
    shutil.move(f"{tree}/tmp/peer.img", f"{work}/dracut.img")
    disk, root_hash = verity_disk(work)
    q = lambda p: tool_version(f"dpkg-query --admindir {tree}/var/lib/dpkg -W -f '${{Version}}' {p}")
    made = {"kernel": kver, "root_hash": root_hash,
            "builds": {"leanrd": {"command": lcmd.replace(work, "WORK"), "build_s": lbuild},
                       "dracut": {"command": dcmd, "build_s": dbuild}},
            "peers": {p: q(p) for p in ("dracut", "systemd", "systemd-cryptsetup")}}
    shutil.rmtree(tree)
    return made


def one_boot(work, image, append):
    args = ["boot", "--kernel", f"{work}/vmlinuz", "--initrd", image, "--append", append, "--timeout", "300",
            "--disk", f"{work}/verity.disk", "--snapshot", "--mark", RUN_INIT, "--mark", MARK]
    for s in STOP:
        args += ["--stop", s]
    r = subprocess.run([HARNESS] + args, capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        return {"ok": False, "error": r.stderr.strip()[-2000:]}
    got = json.loads(r.stdout)
    log = got["console"]
    ok = MARK in log and "ROOT-MOUNT /dev/" in log
    run_init, mounted, root_init = ktime(log, RUN_INIT), ktime(log, MOUNTED), ktime(log, ROOT_INIT)
    b = {"ok": ok, "run_init_s": run_init, "root_mounted_s": mounted if ok else None,
         "root_init_s": root_init if ok else None,
         "initramfs_s": round(root_init - run_init, 3) if ok and None not in (run_init, root_init) else None,
         "vm_seconds": got["vm_seconds"],
         "root_lines": [l.strip() for l in log.splitlines() if l.startswith(("ROOT-MOUNT", MARK))][:3]}
    if not ok:
        b["console_tail"] = log[-3000:]
    return b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", help="a directory kept after the run; its disk and images, when there, are used again")
    a = ap.parse_args()
    leanrd, init = build_leanrd()
    work = a.work or tempfile.mkdtemp(prefix="leanrd-bench-verity-", dir="/var/tmp")
    os.makedirs(work, exist_ok=True)
    state = f"{work}/made.json"
    try:
        if not os.path.exists(state):
            made = make(work, leanrd, init)
            with open(state, "w") as f:
                json.dump(made, f)
        with open(state) as f:
            made = json.load(f)
        images = {"leanrd": f"{work}/leanrd.img", "dracut": f"{work}/dracut.img"}
        append = f"root=/dev/mapper/root roothash={made['root_hash']}"
        boots = {g: [] for g in images}
        for i in range(a.runs):
            for g, img in images.items():
                if boots[g] and not boots[g][0]["ok"]:
                    continue
                b = one_boot(work, img, append)
                boots[g].append(b)
                print(f"run {i + 1} {g}: ok {b['ok']}, root mounted {b.get('root_mounted_s')} s, root's init "
                      f"{b.get('root_init_s')} s, initramfs {b.get('initramfs_s')} s", flush=True)
                if not b["ok"]:
                    print("  " + "\n  ".join((b.get("console_tail") or b.get("error", "")).splitlines()[-12:]),
                          flush=True)

        print(f"\n## dm-verity root, kernel {made['kernel']}, QEMU TCG; medians of {a.runs}\n")
        print("| image | bytes | kernel → root mounted s | kernel → root's init s | initramfs phase s | booted |")
        print("|---|---:|---:|---:|---:|---:|")
        for g, img in images.items():
            bs = boots[g]
            print(f"| {g} | {os.path.getsize(img)} | {med(b.get('root_mounted_s') for b in bs)} | "
                  f"{med(b.get('root_init_s') for b in bs)} | {med(b.get('initramfs_s') for b in bs)} | "
                  f"{sum(b['ok'] for b in bs)}/{len(bs)} |")
        save("verity", {"kernel": made["kernel"], "runs": a.runs, "append": append,
                        "images": {g: {"image_bytes": os.path.getsize(p), **made["builds"][g]}
                                   for g, p in images.items()},
                        "boots": boots}, made["peers"])
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
