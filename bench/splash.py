#!/usr/bin/env python3
"""The desktop's boot (issue 54): the time from the kernel's start to plymouth's first frame and to
its passphrase dialog, leanrd against dracut's and initramfs-tools' plymouth, in one run; how much
plymouth costs an image; and whether leanrd's image with plymouth is as fast as one without when
the command line has no `splash`.

The roots: Debian 13 with plymouth, plymouth-themes and initramfs-tools (tools/debian-root trixie
plymouth), and Debian 13 with dracut (tools/debian-root trixie dracut) with plymouth,
plymouth-themes and systemd-cryptsetup installed into a copy (dracut unlocks with it). Both set
`Theme=spinner` in plymouthd.conf and name the LUKS2 container in crypttab (`root_crypt UUID=...
none luks,initramfs`). The container is a whole virtio disk (cryptsetup luksFormat on a file: no
device-mapper needed); no boot here opens it: each ends once the dialog is up.

Images (Debian 13's kernel from the root's /boot):
  leanrd            `leanrd build --universal --include plymouth --sysroot PLYMOUTH-ROOT`
  leanrd, no plymouth  the same without `--include plymouth` (for the no-splash timing)
  leanrd host-only  `leanrd build --sysroot PLYMOUTH-ROOT --include plymouth,bench-bochs,luks` on this
                    machine, a feature of the bench's own adding the bochs DRM driver that host
                    detection would find on a std-VGA machine (this machine has no display), and
                    luks (this machine's root is not on LUKS; crypttab's `initramfs` entry is
                    not the root's): the size only
  initramfs-tools   the root's own `mkinitramfs` (MODULES=most, its plymouth hook) in a chroot
  dracut            `dracut --no-hostonly --add "crypt plymouth"` in a chroot (its drm module:
                    every DRM driver), and `--hostonly` for the size only

Each boot: QEMU TCG (-m 1024, std VGA, the kernel loaded by QEMU as users' boot loaders load it)
with `quiet splash plymouth.ignore-serial-consoles loglevel=7` (the kernel's log on the serial
console for its start: the host's clock when "Linux version" arrives). The monitor's `screendump`
is taken every 0.25 s; a frame is plymouth's when it is a graphics mode's (over 800 pixels wide:
VGA's text mode is 720), the top-left third of the screen (where a text console writes) is dark
and the middle or bottom of the screen is lit (the spinner theme's
throbber and dialog), and its dialog when the middle is lit (over 500 pixels). Reported: the
kernel's start → the first plymouth frame, and → the dialog (host seconds, 0.25 s resolution);
plus for leanrd without `splash`, the kernel's own timestamps from /init's start to its prompt, with
and without plymouth in the image.

Usage (root, Debian 12 host, qemu-system-x86_64): python3 bench/splash.py [--runs 3]
Raw results: bench/results/splash-DATE-COMMIT.json (every boot's figures).
"""

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time

from common import build_leanrd, chroot_build, chroot_install, debian_tree, kernel, save, sh, tool_version

PASS = "leanrd-splash-passphrase"
LUKS_UUID = "5a5a5a5a-1111-4222-8333-444444444444"
CRYPTTAB = f"root_crypt UUID={LUKS_UUID} none luks,initramfs\n"
ROOT = "root=/dev/mapper/root_crypt"
SPLASH = "quiet splash plymouth.ignore-serial-consoles loglevel=7"
BOCHS = 'description = "the bench\'s std VGA"\nwhen = "requested"\nmodules = ["bochs"]\n'


def lit(ppm, box, step=4):
    """Pixels brighter than the background (a channel over 48) in `box` (fractions x0, y0, x1,
    y1) of a binary PPM, counting every `step`-th pixel of every `step`-th row, scaled back."""
    with open(ppm, "rb") as f:
        d = f.read()
    fields, i = [], 0
    while len(fields) < 4:
        while d[i:i + 1].isspace():
            i += 1
        j = i
        while not d[j:j + 1].isspace():
            j += 1
        fields.append(d[i:j])
        i = j
    w, h = int(fields[1]), int(fields[2])
    px = memoryview(d)[i + 1:]
    x0, y0, x1, y1 = int(box[0] * w), int(box[1] * h), int(box[2] * w), int(box[3] * h)
    n = 0
    for y in range(y0, y1, step):
        row = px[(y * w + x0) * 3:(y * w + x1) * 3]
        for o in range(0, len(row) - 2, 3 * step):
            if row[o] > 48 or row[o + 1] > 48 or row[o + 2] > 48:
                n += 1
    return n * step * step, w


TEXT, MIDDLE, LOW = (0.0, 0.0, 0.5, 0.33), (0.3, 0.3, 0.7, 0.5), (0.25, 0.5, 0.75, 1.0)


def one_boot(vmlinuz, image, append, disk, work, tag, timeout=180, frames=True):
    """Boot once; the host-clock seconds from QEMU's start to the kernel's start, the first
    plymouth frame and its dialog (None when not seen), and the serial console."""
    mon = os.path.join(work, f"{tag}.mon")
    ppm = os.path.join(work, f"{tag}.ppm")
    # QEMU itself (not under timeout(1), whose death would leave it running): the loop below
    # is bounded, and kills it in the end.
    q = subprocess.Popen(
        ["qemu-system-x86_64", "-accel", "tcg", "-m", "1024",
         "-display", "none", "-serial", "stdio", "-monitor", f"unix:{mon},server,nowait", "-nic", "none",
         "-no-reboot", "-kernel", vmlinuz, "-initrd", image, "-append", f"console=ttyS0 panic=-1 {append}",
         "-drive", f"file={disk},if=virtio,format=raw,snapshot=on"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    lines = []

    def read():
        for raw in q.stdout:
            lines.append((time.monotonic() - t0, raw.decode(errors="replace").rstrip()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    r = {"kernel_s": None, "first_frame_s": None, "dialog_s": None}
    m = None
    try:
        while time.monotonic() - t0 < timeout - 5 and q.poll() is None:
            if r["kernel_s"] is None:
                r["kernel_s"] = next((t for t, l in list(lines) if "Linux version" in l), None)
            if not frames:
                if any("asking for the passphrase" in l for _, l in list(lines)):
                    break
                time.sleep(0.25)
                continue
            if m is None:
                try:
                    m = socket.socket(socket.AF_UNIX)
                    m.connect(mon)
                    m.settimeout(10)
                    banner = b""
                    while b"(qemu)" not in banner:
                        banner += m.recv(65536)
                except OSError:
                    m = None
                    time.sleep(0.1)
                    continue
            at = time.monotonic() - t0
            m.sendall(f"screendump {ppm}\n".encode())
            # The command done: the monitor's prompt again.
            got = b""
            while b"(qemu)" not in got:
                got += m.recv(65536)
            if os.path.exists(ppm):
                (text, w), (middle, _), (low, _) = lit(ppm, TEXT), lit(ppm, MIDDLE), lit(ppm, LOW)
                os.remove(ppm)
                # Graphics: the firmware's and the kernel's VGA text mode are 720 (or 640) wide.
                graphics = w >= 800
                if graphics and text == 0 and middle + low > 100 and r["first_frame_s"] is None:
                    r["first_frame_s"] = round(at, 2)
                if graphics and text == 0 and middle > 500:
                    r["dialog_s"] = round(at, 2)
                    break
            time.sleep(max(0.0, 0.25 - (time.monotonic() - t0 - at)))
    finally:
        q.kill()
        q.wait()
        reader.join(timeout=5)
        if m:
            m.close()
    r["console"] = "\n".join(l for _, l in lines)
    return r


def stamp(console, what):
    """The kernel's timestamp of the first line holding `what`."""
    for l in console.splitlines():
        if what in l and l.startswith("["):
            try:
                return float(l[1:l.index("]")])
            except ValueError:
                return None
    return None


def setup(tree, dracut=False):
    """plymouth's theme and the container in crypttab."""
    os.makedirs(f"{tree}/etc/plymouth", exist_ok=True)
    with open(f"{tree}/etc/plymouth/plymouthd.conf", "w") as f:
        f.write("[Daemon]\nTheme=spinner\n")
    with open(f"{tree}/etc/crypttab", "w") as f:
        f.write(CRYPTTAB)


def make(work, kver, leanrd, init):
    """The disk and the images in `work`; the peers' versions."""
    disk = os.path.join(work, "luks.disk")
    sh(f"truncate -s 64M {disk}")
    subprocess.run(["cryptsetup", "luksFormat", "--batch-mode", "--type", "luks2", "--pbkdf", "pbkdf2",
                    "--pbkdf-force-iterations", "1000", "--uuid", LUKS_UUID, "--key-file", "-", disk],
                   input=PASS.encode(), check=True)
    ply = debian_tree(work, "plymouth", kver, "trixie")
    setup(ply)
    dr = debian_tree(work, "dracut", kver, "trixie")
    chroot_install(dr, ["plymouth", "plymouth-themes", "systemd-cryptsetup"])
    setup(dr)
    peers = {p: tool_version(f"dpkg-query --admindir {t}/var/lib/dpkg -W -f '${{Version}}' {p}")
             for p, t in (("plymouth", ply), ("initramfs-tools", ply), ("dracut", dr), ("systemd", dr))}
    feats = os.path.join(work, "features")
    os.makedirs(feats, exist_ok=True)
    with open(f"{feats}/bench-bochs.toml", "w") as f:
        f.write(BOCHS)
    img = {}
    builds = {
        "leanrd": ["--universal", "--include", "plymouth"],
        "leanrd, no plymouth": ["--universal"],
        "leanrd host-only": ["--features-dir", feats, "--include", "plymouth", "--include", "bench-bochs",
                             "--include", "luks"],
    }
    for name, extra in builds.items():
        out = os.path.join(work, name.replace(" ", "-").replace(",", "") + ".img")
        sh(f"{leanrd} build -k {kver} --sysroot {ply} --init {init} -o {out} " + " ".join(extra))
        img[name] = out
    chroot_build(ply, f"mkinitramfs -o /tmp/peer.img {kver}", quiet=True)
    img["initramfs-tools"] = os.path.join(work, "initramfs-tools.img")
    shutil.move(f"{ply}/tmp/peer.img", img["initramfs-tools"])
    for name, how in (("dracut", "--no-hostonly"), ("dracut host-only", "--hostonly")):
        chroot_build(dr, f"dracut {how} --add 'crypt plymouth' --force /tmp/peer.img {kver}", quiet=True)
        img[name] = os.path.join(work, name.replace(" ", "-") + ".img")
        shutil.move(f"{dr}/tmp/peer.img", img[name])
    return disk, img, peers


def med(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 2) if xs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    leanrd, init = build_leanrd()
    kver, vmlinuz = kernel("trixie")
    work = tempfile.mkdtemp(prefix="leanrd-bench-splash-", dir="/var/tmp")
    try:
        disk, img, peers = make(work, kver, leanrd, init)
        variants = [
            ("leanrd", img["leanrd"], f"{ROOT} {SPLASH}"),
            ("initramfs-tools", img["initramfs-tools"], f"{ROOT} {SPLASH}"),
            ("dracut", img["dracut"], f"{ROOT} rd.luks.uuid={LUKS_UUID} {SPLASH}"),
        ]
        plain = [
            ("leanrd with plymouth, no splash", img["leanrd"], f"{ROOT} leanrd.debug"),
            ("leanrd, no plymouth", img["leanrd, no plymouth"], f"{ROOT} leanrd.debug"),
        ]
        boots = {n: [] for n, _, _ in variants + plain}
        for i in range(a.runs):
            for n, im, ap_ in variants:
                r = one_boot(vmlinuz, im, ap_, disk, work, f"{i}-{n[:6]}")
                k = r["kernel_s"]
                r["kernel_to_first_frame_s"] = round(r["first_frame_s"] - k, 2) if k and r["first_frame_s"] else None
                r["kernel_to_dialog_s"] = round(r["dialog_s"] - k, 2) if k and r["dialog_s"] else None
                if r["dialog_s"] is not None:
                    r.pop("console")
                else:
                    r["console"] = r["console"][-3000:]
                boots[n].append(r)
                print(f"run {i + 1} {n}: first frame {r['kernel_to_first_frame_s']} s, dialog "
                      f"{r['kernel_to_dialog_s']} s after the kernel's start", flush=True)
            for n, im, ap_ in plain:
                r = one_boot(vmlinuz, im, ap_, disk, work, f"{i}-plain", frames=False)
                c = r.pop("console")
                t0, tp = stamp(c, "Run /init as init process"), stamp(c, "asking for the passphrase")
                r["init_to_prompt_s"] = round(tp - t0, 3) if t0 is not None and tp is not None else None
                r["plymouthd_started"] = "plymouth: the splash is up" in c
                boots[n].append(r)
                print(f"run {i + 1} {n}: /init to the prompt {r['init_to_prompt_s']} s, plymouthd "
                      f"{r['plymouthd_started']}", flush=True)

        print(f"\n## The splash: Debian 13 (plymouth {peers['plymouth']}, spinner), kernel {kver}, QEMU TCG "
              f"-m 1024, std VGA; medians of {a.runs}\n")
        print("| image | size, MB | kernel start → first plymouth frame, s | → passphrase dialog, s |")
        print("|---|---:|---:|---:|")
        for n, im, _ in variants:
            bs = boots[n]
            print(f"| {n} | {os.path.getsize(im) / 1e6:.2f} | {med([b['kernel_to_first_frame_s'] for b in bs])} | "
                  f"{med([b['kernel_to_dialog_s'] for b in bs])} |")
        print("\n| image (no `splash`) | size, MB | /init → prompt, s (kernel clock) | plymouthd started |")
        print("|---|---:|---:|---:|")
        for n, im, _ in plain:
            bs = boots[n]
            print(f"| {n} | {os.path.getsize(im) / 1e6:.2f} | {med([b['init_to_prompt_s'] for b in bs])} | "
                  f"{sum(b['plymouthd_started'] for b in bs)}/{len(bs)} |")
        print("\n| image, size only | size, MB |\n|---|---:|")
        for n in ("leanrd host-only", "dracut host-only"):
            print(f"| {n} | {os.path.getsize(img[n]) / 1e6:.2f} |")
        save("splash", {"suite": "trixie", "kernel": kver, "runs": a.runs,
                        "sizes": {n: os.path.getsize(p) for n, p in img.items()}, "boots": boots}, peers)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
