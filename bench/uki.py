#!/usr/bin/env python3
"""Unified Kernel Images (issue 15): leanrd `build --uki` against dracut `--uefi` on the same
kernel, in one run, alternating, medians.

- Build time: `leanrd build --universal --uki` (zstd:3) and `dracut --no-hostonly --uefi --zstd`,
  both in a chroot of the Debian root with dracut (binutils added: dracut's UKI needs objcopy),
  with the same stub (systemd-boot-efi's linuxx64.efi.stub) and command line.
- Size of each UKI.
- The reflinked UKI: `--compress none` on loop XFS from a sysroot there; FIEMAP exclusive bytes
  (what the UKI costs on disk) against the zstd UKI's.
- Firmware to the root's init: OVMF under QEMU TCG starts each UKI from a FAT ESP; wall time from
  QEMU's start to the root's marker line, and the kernel's uptime at that line.

Boots go through the harness (common.boot with uefi=True: crates/testkit's OVMF command line).

Usage: python3 bench/uki.py [--runs 3] [--kver KVER]
Raw results: bench/results/uki-DATE-COMMIT.json (every build's and boot's figures).
"""

import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time

from common import MARK, UUID, boot, boot_setup, chroot_build, debian_tree, root_disk, save, sh, tool_version

STUB = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"
CMDLINE = f"console=ttyS0 panic=-1 root=UUID={UUID}"


def ovmf_boot(work, name, efi, disk):
    """Seconds from QEMU's start to the marker, and the uptime the root printed (None, None
    when the root was not reached)."""
    esp = os.path.join(work, f"{name}.esp")
    mb = os.path.getsize(efi) // (1 << 20) + 16
    sh(f"rm -f {esp} && mkfs.vfat -C {esp} {mb * 1024} >/dev/null && mmd -i {esp} ::/EFI ::/EFI/BOOT && "
       f"mcopy -i {esp} {efi} ::/EFI/BOOT/BOOTX64.EFI")
    r = boot(uefi=True, disks=[esp, disk], snapshot=True, memory=1024, marks=[MARK], stop=[MARK], timeout=300)
    m = re.search(MARK + r" ([0-9.]+)", r["console"])
    return r["marks"].get(MARK), float(m.group(1)) if m else None


def main():
    a, kver, kernel, leanrd, _init = boot_setup()
    with tempfile.TemporaryDirectory(prefix="leanrd-bench-uki-", dir="/var/tmp") as work:
        tree = debian_tree(work, "dracut", kver)
        os.makedirs(f"{tree}/usr/lib/systemd/boot/efi", exist_ok=True)
        shutil.copy(STUB, f"{tree}/usr/lib/systemd/boot/efi/")
        shutil.copy(kernel, f"{tree}/boot/")
        shutil.copy("/etc/resolv.conf", f"{tree}/etc/resolv.conf")
        apt = "apt-get -q -o APT::Sandbox::User=root"
        chroot_build(tree, f"sh -c '{apt} update && {apt} install -y --no-install-recommends binutils'", quiet=True)
        shutil.copy(leanrd, f"{tree}/usr/bin/leanrd")
        builds = {
            "leanrd --uki": f"/usr/bin/leanrd build -k {kver} --universal --uki -o /tmp/leanrd.efi "
                            f"--cmdline '{CMDLINE}' --force",
            "dracut --uefi": f"dracut --force --no-hostonly --uefi --zstd --kernel-cmdline '{CMDLINE}' "
                             f"/tmp/dracut.efi {kver}",
        }
        times = {n: [] for n in builds}
        for _ in range(a.runs):
            for n, c in builds.items():
                times[n].append(chroot_build(tree, c, quiet=True))
        print(f"kernel {kver}; UKIs: universal, zstd; {a.runs} runs, alternating, medians")
        print(f"{'UKI':<16}{'build s':>10}{'size MB':>10}")
        peers = {"dracut": tool_version(f"dpkg-query --admindir {tree}/var/lib/dpkg -W -f '${{Version}}' dracut"),
                 "qemu": tool_version("qemu-system-x86_64 --version")}
        size = {}
        for n in builds:
            efi = f"{tree}/tmp/{'leanrd' if n.startswith('leanrd') else 'dracut'}.efi"
            size[n] = os.path.getsize(efi)
            print(f"{n:<16}{statistics.median(times[n]):>10.2f}{size[n] / 1e6:>10.1f}")
        r = statistics.median(times["dracut --uefi"]) / statistics.median(times["leanrd --uki"])
        print(f"leanrd is {r:.1f}x faster than dracut --uefi")

        # The reflinked UKI on loop XFS.
        xfs_img, mnt = os.path.join(work, "xfs.img"), os.path.join(work, "xfs")
        os.makedirs(mnt)
        sh(f"truncate -s 2G {xfs_img} && mkfs.xfs -q {xfs_img} && mount -o loop {xfs_img} {mnt}")
        try:
            sr = os.path.join(mnt, "sysroot")
            sh(f"mkdir -p {sr}/lib/modules {sr}/boot {sr}/usr/lib/systemd/boot/efi {sr}/etc && "
               f"cp -a /lib/modules/{kver} {sr}/lib/modules/ && cp {kernel} {sr}/boot/ && "
               f"cp {STUB} {sr}/usr/lib/systemd/boot/efi/ && cp /etc/os-release {sr}/etc/")
            out = {}
            for name, comp in (("zstd", "zstd:3"), ("reflinked", "none")):
                efi = os.path.join(mnt, f"{name}.efi")
                s = time.perf_counter()
                sh(f"{leanrd} build -k {kver} --universal --uki --sysroot {sr} --compress {comp} -o {efi} "
                   f"--cmdline '{CMDLINE}' 2>/dev/null")
                took = time.perf_counter() - s
                sh("sync")
                v = json.loads(subprocess.run([leanrd, "inspect", "--json", efi], check=True,
                                              capture_output=True, text=True).stdout)
                out[name] = (os.path.getsize(efi), v["fiemap"]["exclusive"], took)
            print(f"{'on XFS':<16}{'size MB':>10}{'exclusive MB':>14}{'build s':>10}")
            for name, (sz, ex, took) in out.items():
                print(f"{name:<16}{sz / 1e6:>10.1f}{ex / 1e6:>14.2f}{took:>10.2f}")
        finally:
            sh(f"umount {mnt}")

        # Firmware to the root's init.
        disk = root_disk(work, partitioned=False)
        efis = {"leanrd zstd": f"{tree}/tmp/leanrd.efi", "dracut": f"{tree}/tmp/dracut.efi"}
        boots = {n: [] for n in efis}
        for i in range(a.runs):
            for n, efi in efis.items():
                boots[n].append(ovmf_boot(work, f"{n.replace(' ', '-')}-{i}", efi, disk))
        print(f"{'OVMF boot':<16}{'to root s':>10}{'uptime s':>10}")
        for n, rs in boots.items():
            ok = [r for r in rs if r[0] is not None]
            if not ok:
                print(f"{n:<16}{'no boot':>10}")
                continue
            print(f"{n:<16}{statistics.median(r[0] for r in ok):>10.2f}{statistics.median(r[1] for r in ok):>10.2f}")
        save("uki", {"kernel": kver, "runs": a.runs,
                     "ukis": {n: {"build_s": times[n], "bytes": size[n]} for n in builds},
                     "on_xfs": {n: {"bytes": sz, "exclusive_bytes": ex, "build_s": took}
                                for n, (sz, ex, took) in out.items()},
                     "boots": {n: [{"to_root_s": t, "uptime_s": u} for t, u in rs] for n, rs in boots.items()}}, peers)


if __name__ == "__main__":
    main()
