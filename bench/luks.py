#!/usr/bin/env python3
"""Encrypted roots benchmark (issue 13), one run, peers measured in the same run.

  host-only        a machine whose root is ext4 on LUKS (crypttab `sda3_crypt UUID=... none
                   luks,discard`, KEYMAP=de, a PS/2 and a USB keyboard) against the same machine
                   with a plain root: `leanrd build` on fixtures of its /proc and /sys (as the
                   tests build them), image size and build time (median of --runs)
  universal        leanrd --universal against initramfs-tools (MODULES=most, cryptsetup-initramfs
                   with CRYPTSETUP=y) and dracut --no-hostonly --add crypt --zstd, each in a chroot
                   of the cached Debian root with the same crypttab: size and build time
  boot             the boot_luks suite (QEMU TCG): from the kernel's "Run /init" to the
                   passphrase prompt, and to the container unlocked (typed, key file, TPM2),
                   from the kernel log's timestamps (leanrd.debug); medians of --runs suites

Usage (root): python3 bench/luks.py [--runs 3] [--kver KVER] [--no-boot]
Raw results: bench/results/luks-DATE-COMMIT.json.
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

from common import ROOT, build_leanrd, chroot_build, debian_tree, kernel, save, sh, sysroot

LUKS_UUID = "0c0c0c0c-1111-4222-8333-444444444444"
CRYPTTAB = f"sda3_crypt UUID={LUKS_UUID} none luks,discard\n"
VIRTIO_PCI = "pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00"
KEYBOARD = "ffffffffffffffff fffffffffffffffe"


def fixture(path, luks):
    """/proc and /sys of the machine: ext4 root on vda3 (through dm-crypt `sda3_crypt` when
    `luks`), a PS/2 keyboard, a USB keyboard behind xHCI, a power button."""
    dev = lambda p: os.makedirs(f"{path}/sys/devices/{p}", exist_ok=True) or f"{path}/sys/devices/{p}"

    def put(p, modalias=None, driver=None):
        d = dev(p)
        if modalias:
            open(f"{d}/modalias", "w").write(modalias + "\n")
        if driver:
            dd = f"{path}/sys/bus/x/drivers/{driver}"
            os.makedirs(dd, exist_ok=True)
            os.symlink(dd, f"{d}/driver")

    def link(target, name):
        os.makedirs(os.path.dirname(name), exist_ok=True)
        os.symlink(target, name)

    def block(p, devno, part):
        put(p)
        if part:
            open(f"{path}/sys/devices/{p}/partition", "w").write("3\n")
        link(f"../../devices/{p}", f"{path}/sys/dev/block/{devno}")
        link(f"../../devices/{p}", f"{path}/sys/class/block/{os.path.basename(p)}")

    def keyboard(p, keys=KEYBOARD):
        put(p)
        os.makedirs(f"{path}/sys/devices/{p}/capabilities", exist_ok=True)
        open(f"{path}/sys/devices/{p}/capabilities/key", "w").write(keys + "\n")
        link(f"../../devices/{p}", f"{path}/sys/class/input/{os.path.basename(p)}")

    os.makedirs(f"{path}/proc/self")
    src = "253:0 / / rw - ext4 /dev/mapper/sda3_crypt" if luks else "254:3 / / rw - ext4 /dev/vda3"
    open(f"{path}/proc/self/mountinfo", "w").write(f"25 1 {src} rw\n26 25 0:5 / /proc rw - proc proc rw\n")
    put("pci0000:00/0000:00:04.0", VIRTIO_PCI, "virtio-pci")
    put("pci0000:00/0000:00:04.0/virtio1", "virtio:d00000002v00001AF4", "virtio_blk")
    block("pci0000:00/0000:00:04.0/virtio1/block/vda", "254:0", False)
    vda3 = "pci0000:00/0000:00:04.0/virtio1/block/vda/vda3"
    block(vda3, "254:3", True)
    if luks:
        dm = "virtual/block/dm-0"
        put(dm)
        os.makedirs(f"{path}/sys/devices/{dm}/dm")
        os.makedirs(f"{path}/sys/devices/{dm}/slaves")
        hexu = LUKS_UUID.replace("-", "")
        open(f"{path}/sys/devices/{dm}/dm/uuid", "w").write(f"CRYPT-LUKS2-{hexu}-sda3_crypt\n")
        open(f"{path}/sys/devices/{dm}/dm/name", "w").write("sda3_crypt\n")
        os.symlink(f"{path}/sys/devices/{vda3}", f"{path}/sys/devices/{dm}/slaves/vda3")
        link(f"../../devices/{dm}", f"{path}/sys/dev/block/253:0")
        link(f"../../devices/{dm}", f"{path}/sys/class/block/dm-0")
    put("platform/i8042", "platform:i8042", "i8042")
    put("platform/i8042/serio0", "serio:ty06pr00id00ex00", "atkbd")
    keyboard("platform/i8042/serio0/input/input1")
    usb = "pci0000:00/0000:00:05.0/usb1/1-1/1-1:1.0"
    put("pci0000:00/0000:00:05.0", "pci:v00001B36d0000000Dsv00001AF4sd00001100bc0Csc03i30", "xhci_hcd")
    put(usb, "usb:v0627p0001d0000dc00dsc00dp00ic03isc01ip01in00", "usbhid")
    put(f"{usb}/0003:0627:0001.0001", "hid:b0003g0001v00000627p00000001", "hid-generic")
    keyboard(f"{usb}/0003:0627:0001.0001/input/input2")
    put("LNXSYSTM:00/LNXPWRBN:00", "acpi:LNXPWRBN:", "button")
    keyboard("LNXSYSTM:00/LNXPWRBN:00/input/input0", "10000000000000 0")


def timed(cmd, runs):
    """Each run's seconds."""
    ts = []
    for _ in range(runs):
        s = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ts.append(time.perf_counter() - s)
    return ts


def peer_tree(work, flavour, kver):
    tree = debian_tree(work, flavour, kver)
    open(f"{tree}/etc/crypttab", "w").write(CRYPTTAB)
    open(f"{tree}/etc/fstab", "w").write("/dev/mapper/sda3_crypt / ext4 errors=remount-ro 0 1\n")
    return tree


def boot_timings(runs):
    """The boot_luks suite, `runs` times: its TIMING lines, every run's figures per boot."""
    per = {}
    for _ in range(runs):
        out = subprocess.run(["cargo", "test", "--release", "-q", "-p", "leanrd", "--test", "boot_luks", "--",
                              "--nocapture"], cwd=ROOT, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit("boot_luks failed:\n" + out.stdout[-3000:] + out.stderr[-3000:])
        for m in re.finditer(r"^TIMING (\S+) (.*)$", out.stderr, re.M):
            for k, v in re.findall(r"(\S+)=([\d.]+)", m.group(2)):
                per.setdefault(m.group(1), {}).setdefault(k, []).append(float(v))
    return per


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kver", default=None)
    ap.add_argument("--no-boot", action="store_true")
    a = ap.parse_args()
    leanrd, init = build_leanrd()
    kver, _ = kernel("bookworm", a.kver)
    work = tempfile.mkdtemp(prefix="leanrd-bench-luks-")
    try:
        print(f"kernel {kver}, {a.runs} runs, medians\n")
        sr = f"{work}/sysroot"
        sysroot(sr, {"crypttab": CRYPTTAB, "vconsole.conf": "KEYMAP=de\n"})
        rows, raw_host = [], []
        for luks in (True, False):
            fx = f"{work}/host-{luks}"
            fixture(fx, luks)
            out = f"{work}/host-{luks}.img"
            cmd = [leanrd, "build", "-k", kver, "--host-root", fx, "--sysroot", sr, "--init", init, "-o", out,
                   "--force"]
            t = timed(cmd, a.runs)
            ls = subprocess.run([leanrd, "ls", out], capture_output=True, text=True).stdout
            raw_host.append({"root": "LUKS + keymap" if luks else "plain root", "build_s": t})
            rows.append(("LUKS + keymap" if luks else "plain root", statistics.median(t), os.path.getsize(out),
                         ls.count("\n"), "cryptsetup" in ls, "keymaps/de.bmap" in ls))
        print("host-only (fixture machine, zstd:3)")
        print(f"{'root':<16}{'build s':>9}{'image KB':>10}{'entries':>9}  cryptsetup  keymap")
        for r, raw in zip(rows, raw_host):
            raw.update(image_bytes=r[2], entries=r[3], cryptsetup=r[4], keymap=r[5])
            print(f"{r[0]:<16}{r[1]:>9.3f}{r[2] / 1024:>10.0f}{r[3]:>9}  {str(r[4]):<11} {r[5]}")
        print(f"LUKS + keymap / plain: size {rows[0][2] / rows[1][2]:.2f}x, build {rows[0][1] / rows[1][1]:.2f}x\n")

        uni = []
        tree = peer_tree(work, "", kver)
        open(f"{tree}/etc/vconsole.conf", "w").write("KEYMAP=de\n")
        out = f"{work}/leanrd-universal.img"
        t = timed([leanrd, "build", "-k", kver, "--universal", "--sysroot", tree, "--init", init, "-o", out,
                   "--force"], a.runs)
        uni.append(("leanrd --universal", t, os.path.getsize(out)))
        itools = peer_tree(work, "initramfs-tools", kver)
        os.makedirs(f"{itools}/etc/cryptsetup-initramfs", exist_ok=True)
        open(f"{itools}/etc/cryptsetup-initramfs/conf-hook", "w").write("CRYPTSETUP=y\n")
        ts = [chroot_build(itools, f"mkinitramfs -o /tmp/peer.img {kver}") for _ in range(a.runs)]
        uni.append(("initramfs-tools most", ts, os.path.getsize(f"{itools}/tmp/peer.img")))
        dr = peer_tree(work, "dracut", kver)
        ts = [chroot_build(dr, f"dracut --no-hostonly --add crypt --zstd --force /tmp/peer.img {kver}") for _ in range(a.runs)]
        uni.append(("dracut generic +crypt", ts, os.path.getsize(f"{dr}/tmp/peer.img")))
        print("universal images that unlock LUKS (chroots of the Debian root; zstd: leanrd's default level 3, "
              "initramfs-tools' COMPRESS=zstd, dracut --zstd)")
        print(f"{'generator':<24}{'build s':>9}{'image MB':>10}{'vs leanrd':>11}")
        for name, t, size in uni:
            print(f"{name:<24}{statistics.median(t):>9.2f}{size / 2**20:>10.1f}{size / uni[0][2]:>10.2f}x")
        print("(peers without a keymap: kbd and console-setup are not in their roots)\n")

        timings = {}
        if not a.no_boot:
            print("boot (QEMU TCG, the boot_luks suite; seconds after the kernel's \"Run /init\")")
            timings = boot_timings(a.runs)
            print(f"{'boot':<28}{'prompt':>8}{'unlocked':>10}")
            for b, d in sorted(timings.items()):
                p = f"{statistics.median(d['prompt']):.2f}" if "prompt" in d else "-"
                u = statistics.median(d["unlocked"]) if "unlocked" in d else float("nan")
                print(f"{b:<28}{p:>8}{u:>10.2f}")
        save("luks", {"kernel": kver, "runs": a.runs, "host_only": raw_host,
                      "universal": [{"generator": n, "build_s": t, "image_bytes": size} for n, t, size in uni],
                      "boot_after_run_init_s": timings})
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
