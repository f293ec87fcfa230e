"""Helpers shared by the benchmark scripts: the harness (crates/testkit's `leanrd-harness`:
the kernel a suite boots, and every QEMU boot, run as the tests run theirs), the images and
disks the benches build, and their raw results (bench/results/NAME-DATE-COMMIT.json)."""

import json
import re
import os
import platform
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where cargo puts what it builds: CARGO_TARGET_DIR, as cargo itself reads it.
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
HARNESS = os.path.join(TARGET, "release/leanrd-harness")
UUID = "11111111-2222-3333-4444-555555555555"
MARK = "LEANRD-ROOT-OK"


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, **kw)


def suite_root(suite, flavour=""):
    """The cached Debian root of tools/debian-root (made when missing); `suite` may name a
    foreign architecture too ("trixie arm64")."""
    return subprocess.run([os.path.join(ROOT, "tools/debian-root")] + suite.split() + ([flavour] if flavour else []),
                          check=True, capture_output=True, text=True).stdout.strip()


def boot_setup(suite_option=False):
    """The options every boot benchmark takes (--runs, --kver, and --suite when asked), the
    kernel to boot, and freshly built leanrd and /init: (args, kver, kernel, leanrd, init).
    Debian 12 boots the host's kernel; Debian 13 (--suite trixie) its root's own."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kver", default=None)
    if suite_option:
        ap.add_argument("--suite", choices=["bookworm", "trixie"], default="bookworm")
    a = ap.parse_args()
    leanrd, init = build_leanrd()
    kver, vmlinuz = kernel(getattr(a, "suite", "bookworm"), a.kver)
    return a, kver, vmlinuz, leanrd, init


def build_leanrd():
    """Build leanrd, the harness and the static /init; return leanrd's and /init's paths."""
    sh("cargo build --release -q -p leanrd -p leanrd-testkit", cwd=ROOT)
    sh("cargo build -q --profile init -p leanrd-init --features standalone "
       "--target x86_64-unknown-linux-gnu", cwd=ROOT)
    return (os.path.join(TARGET, "release/leanrd"),
            os.path.join(TARGET, "x86_64-unknown-linux-gnu/init/leanrd-init"))


def sysroot(path, etc):
    """The host's programs, libraries and modules (hard links) with an /etc of its own: each
    `etc` entry a file of /etc (name: text)."""
    os.makedirs(f"{path}/usr")
    sh(f"cp -al /usr/lib /usr/sbin /usr/bin /usr/lib64 {path}/usr/")
    for l in ("bin", "sbin", "lib", "lib64"):
        os.symlink(f"usr/{l}", f"{path}/{l}")
    os.makedirs(f"{path}/etc")
    shutil.copy("/etc/ld.so.cache", f"{path}/etc/")
    for name, text in etc.items():
        open(f"{path}/etc/{name}", "w").write(text)


def root_disk(work, partitioned=True):
    """An ext4 root (UUID above) whose /sbin/init prints MARK and /proc/uptime, then powers
    off; on an MBR partition of a virtio-sized disk image when `partitioned`."""
    tree = os.path.join(work, "rootfs")
    for d in ("sbin", "bin", "dev", "proc", "sys", "run"):
        os.makedirs(os.path.join(tree, d))
    shutil.copy("/bin/busybox", os.path.join(tree, "bin/busybox"))
    os.symlink("busybox", os.path.join(tree, "bin/sh"))
    with open(os.path.join(tree, "sbin/init"), "w") as f:
        f.write(f"#!/bin/sh\n/bin/busybox echo {MARK} $(/bin/busybox cat /proc/uptime)\n/bin/busybox poweroff -f\n")
    os.chmod(os.path.join(tree, "sbin/init"), 0o755)
    # An OS tree as systemd's switch-root wants one (dracut's initrd refuses a root without).
    os.makedirs(os.path.join(tree, "etc"))
    with open(os.path.join(tree, "etc/os-release"), "w") as f:
        f.write("ID=leanrd-bench\nNAME=\"leanrd bench root\"\n")
    fsimg, img = os.path.join(work, "root.fs"), os.path.join(work, "disk.img")
    sh(f"truncate -s 64M {fsimg} && mkfs.ext4 -q -d {tree} -U {UUID} {fsimg}")
    if not partitioned:
        return fsimg
    sh(f"truncate -s 66M {img} && echo 'label: dos\nstart=2048, type=83' | sfdisk -q {img}")
    sh(f"dd if={fsimg} of={img} bs=512 seek=2048 conv=notrunc status=none")
    return img


def harness(*args):
    """Run the harness (built by build_leanrd() when missing); its stdout."""
    if not os.path.exists(HARNESS):
        build_leanrd()
    r = subprocess.run([HARNESS, *args], capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        sys.exit(f"leanrd-harness {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def kernel(suite="bookworm", kver=None):
    """(release, vmlinuz) of the kernel a suite boots: the newest by version order (Debian 12:
    the host's /lib/modules; Debian 13: the cached trixie root's /boot), or `kver`."""
    out = harness("kernel", "--suite", suite, *(["--kver", kver] if kver else []))
    release, vmlinuz = out.rstrip("\n").split("\t")
    return release, vmlinuz


def boot(kernel=None, initrd=None, append="", disks=(), snapshot=False, memory=None, stop=(), marks=(),
         passphrase=None, timeout=300, uefi=False, qemu=(), aarch64=False, prompt=None, monitor=()):
    """One boot through the harness (a VM slot, testkit's QEMU command line): `disks` are
    paths or (path, bus); `uefi` boots OVMF from the disks instead of `kernel` and `initrd`;
    `aarch64` boots qemu-system-aarch64's virt board (AAVMF with `uefi`). `passphrase` is typed at
    the first "Enter passphrase", or at `prompt`; `monitor` holds "TEXT=COMMAND" items, each
    COMMAND typed on QEMU's monitor once the console shows TEXT.
    Returns the harness's JSON: console, vm_seconds (the VM's), slot_wait_seconds (the wait
    for a VM slot before it), marks ({text: seconds from QEMU's start}), qemu (the command line)."""
    args = ["boot", "--timeout", str(timeout)] + (["--aarch64"] if aarch64 else [])
    if uefi:
        args.append("--uefi")
    else:
        # The root's report (tools/boot-report) prints systemd-analyze's figure when asked.
        args += ["--kernel", kernel, "--initrd", initrd, "--append", f"{append} leanrd.test=analyze".strip()]
    for d in disks:
        path, bus = (d, None) if isinstance(d, str) else d
        args += ["--disk", f"{path},bus={bus}" if bus else path]
    if snapshot:
        args.append("--snapshot")
    if memory:
        args += ["--memory", str(memory)]
    for q in qemu:
        args.append(f"--qemu={q}")
    for s in stop:
        args += ["--stop", s]
    for m in marks:
        args += ["--mark", m]
    if passphrase is not None:
        args += ["--passphrase", passphrase]
    if prompt is not None:
        args += ["--prompt", prompt]
    for m in monitor:
        args += ["--monitor", m]
    return json.loads(harness(*args))


def ktime(log, text):
    """The kernel timestamp of the first console line holding `text`; None when none does."""
    m = re.search(r"\[\s*([0-9]+\.[0-9]+)\] [^\n]*" + re.escape(text), log)
    return float(m.group(1)) if m else None


def commit():
    """The checkout's short commit, "-dirty" when the tree differs from it."""
    c = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if c.returncode != 0:
        return "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return c.stdout.strip() + ("-dirty" if dirty else "")


def host():
    """The machine's facts a result depends on."""
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    osr = {}
    if os.path.exists("/etc/os-release"):
        with open("/etc/os-release") as f:
            osr = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    return {"cores": os.cpu_count(), "kernel": platform.release(), "machine": platform.machine(),
            "memory_bytes": mem, "os": osr.get("PRETTY_NAME", "").strip('"')}


def tool_version(cmd):
    """The first line a tool prints for its version (None when it is not there)."""
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    out = (r.stdout or r.stderr).strip().splitlines()
    return out[0] if r.returncode == 0 and out else None


def save(name, data, peers=None, tag=None):
    """Write a bench's raw results to bench/results/NAME-DATE-COMMIT[-TAG].json (UTC date) with
    the date and time, the commit, the host's facts, the peers' versions and the command line;
    returns the path. A second run of a bench the same day at the same commit (and tag: a
    variant of the bench, e.g. debian's suite) replaces it."""
    now = time.gmtime()
    day = time.strftime("%Y-%m-%d", now)
    rev = commit()
    doc = {"bench": name, "date": day, "time": time.strftime("%H:%M:%SZ", now), "commit": rev, "host": host(),
           "peers": peers or {},
           "command": "python3 " + " ".join([os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)] + sys.argv[1:]),
           **data}
    d = os.path.join(ROOT, "bench/results")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"{name}-{day}-{rev}{'-' + tag if tag else ''}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"\nRaw results: {os.path.relpath(path, ROOT)}")
    return path


def tirfs(work):
    """mktirfs from the tiny-initramfs .debs (it conflicts with initramfs-tools, so it is
    unpacked, not installed), with its paths pointed at the unpacked copy."""
    d = os.path.join(work, "tirfs")
    os.makedirs(d)
    sh(f"cd {d} && apt-get download -q tiny-initramfs tiny-initramfs-core >/dev/null 2>&1 && "
       f"for f in *.deb; do dpkg-deb -x $f root; done")
    script = os.path.join(d, "root/usr/sbin/mktirfs")
    with open(script) as f:
        s = f.read()
    s = s.replace("/usr/lib/x86_64-linux-gnu/tiny-initramfs", os.path.join(d, "root/usr/lib/x86_64-linux-gnu/tiny-initramfs"))
    s = s.replace("/usr/share/tiny-initramfs", os.path.join(d, "root/usr/share/tiny-initramfs"))
    with open(script, "w") as f:
        f.write(s)
    os.chmod(script, 0o755)
    return script


def tirfs_version(work):
    """The version of the tiny-initramfs .deb tirfs(work) unpacked."""
    return tool_version(f"dpkg-deb -f {work}/tirfs/tiny-initramfs_*.deb Version")


def chroot_build(tree, cmd, quiet=False):
    """Run a generator in a chroot of the root (with /proc, /sys, /dev); seconds taken. `quiet`
    silences its stderr too."""
    mounts = []
    try:
        for d in ("proc", "sys", "dev"):
            sh(f"mount --bind /{d} {tree}/{d}")
            mounts.append(f"{tree}/{d}")
        s = time.perf_counter()
        sh(f"chroot {tree} {cmd}", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if quiet else None)
        return time.perf_counter() - s
    finally:
        for m in reversed(mounts):
            subprocess.run(["umount", "-l", m])


def chroot_install(tree, packages):
    """Install Debian packages (without recommends) into a root tree, from the machine's own apt
    sources (the root's copy of them) with the machine's resolv.conf."""
    shutil.copy("/etc/resolv.conf", f"{tree}/etc/resolv.conf")
    chroot_build(tree, "sh -c 'apt-get -o APT::Sandbox::User=root update -qq && "
                       "DEBIAN_FRONTEND=noninteractive apt-get -o APT::Sandbox::User=root install -y -qq "
                       f"--no-install-recommends {' '.join(packages)} && apt-get clean'", quiet=True)


def timed_builds(cmd, runs):
    """Run a build command `runs` times (its stderr silenced); the seconds each took."""
    out = []
    for _ in range(runs):
        s = time.perf_counter()
        sh(cmd, stderr=subprocess.DEVNULL)
        out.append(time.perf_counter() - s)
    return out


def debian_tree(work, flavour, kver, suite="bookworm"):
    """A copy of the cached Debian root (`tools/debian-root SUITE FLAVOUR`: "" for the test
    root, or a peer generator installed) under `work`; a bookworm one gets the host kernel's
    modules and configuration (the peers read it to know which compressions it unpacks), a
    trixie one has its own; returns its path."""
    base = suite_root(suite, flavour)
    tree = os.path.join(work, f"{flavour or 'leanrd'}-tree")
    sh(f"cp -a {base} {tree}")
    if suite == "trixie":
        return tree
    os.makedirs(f"{tree}/usr/lib/modules", exist_ok=True)
    sh(f"cp -a /lib/modules/{kver} {tree}/usr/lib/modules/")
    shutil.copy(f"/boot/config-{kver}", f"{tree}/boot/")
    return tree


def report(images, builds, runs, measure, med):
    """Print the Debian boot benches' table (build s, image bytes, kernel → multi-user s,
    initramfs phase s, running) for `images`, with the console of a boot that did not reach
    running; `runs` is [(variant, harness JSON)]. Returns (raw results by variant, medians by
    variant as (multi-user, initramfs phase) texts)."""
    print("| variant | build s | image bytes | kernel → multi-user s | initramfs phase s | running |")
    print("|---|---:|---:|---:|---:|---:|")
    raw, res = {}, {}
    for name in images:
        ms = [measure(r["console"]) for n, r in runs if n == name]
        raw[name] = {"build_s": builds.get(name, []), "image_bytes": os.path.getsize(images[name]),
                     "boots": [dict(zip(("running", "multi_user_s", "initramfs_s"), measure(r["console"])),
                                    vm_seconds=r["vm_seconds"]) for n, r in runs if n == name]}
        ok = sum(1 for r, _, _ in ms if r)
        res[name] = (med([t for _, t, _ in ms]), med([p for _, _, p in ms]))
        print(f"| {name} | {med(builds.get(name, []))} | {os.path.getsize(images[name])} | {res[name][0]} | "
              f"{res[name][1]} | {ok}/{len(ms)} |")
        if ok < len(ms):
            bad = next(r["console"] for n, r in runs if n == name and "LEANRD-STATE running" not in r["console"])
            print(f"\n<details><summary>{name}: a boot that did not reach running</summary>\n\n```\n"
                  f"{bad[-3000:]}\n```\n</details>\n")
    return raw, res


def ratio(res, a, b, i):
    """res[a][i] / res[b][i] as text ("–" when either is missing)."""
    try:
        return f"{float(res[a][i]) / float(res[b][i]):.2f}"
    except (KeyError, ValueError, ZeroDivisionError):
        return "–"
