#!/usr/bin/env python3
"""The benchmark tables of README.md and docs/*.md, made from the raw results
(bench/results/NAME-DATE-COMMIT.json, written by each bench through common.save()): for each
bench, the newest results file.

In README.md or any docs/*.md file each generated table sits between `<!-- bench:NAME -->` and
`<!-- /bench:NAME -->`, with the line saying which command made it, when, at which commit (its
link to the raw results relative to the file it is in); only that text is rewritten. A table has
one place: the same marker in two places is a problem. A table whose bench has no raw results yet
is not generated: its text, marked or not, stays as it was written by hand, and becomes generated
once its bench writes raw results. Problems (exit 1), each naming its file: raw results without
markers in any file, raw results no renderer takes, markers tables.py does not know, a marker
twice or without its end.

Usage: python3 bench/tables.py            rewrite README.md and docs/*.md between the markers
       python3 bench/tables.py --check    exit 1, with a diff, when a file differs from what
                                          the results give; list the tables not generated
"""

import argparse
import difflib
import glob
import json
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench/results")
README = os.path.join(ROOT, "README.md")
# The directory the raw results' links are written relative to (the file the table goes in);
# None: the repository's root.
LINK_FROM = None
NAME = re.compile(r"^(?P<bench>[a-z][a-z0-9_]*)-(?P<date>\d{4}-\d{2}-\d{2})-(?P<commit>[0-9a-z-]+)\.json$")


class Missing(Exception):
    """No raw results for a table."""


def results(bench, want=None):
    """The newest results file of `bench` (by its date, then the time it records, then its
    name) whose contents satisfy `want`; (path, data). Missing when there is none."""
    found = []
    for path in glob.glob(os.path.join(RESULTS, f"{bench}-*.json")):
        m = NAME.match(os.path.basename(path))
        if not m or m.group("bench") != bench:
            continue
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            raise SystemExit(f"{os.path.relpath(path, ROOT)}: not a results file: {e}") from e
        if want is None or want(data):
            found.append(((m.group("date"), data.get("time", ""), path), path, data))
    if not found:
        raise Missing(bench)
    _, path, data = max(found)
    return path, data


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def num(x, fmt="{:.2f}", none="–"):
    return none if x is None else fmt.format(x)


def thousands(n):
    return f"{n:,}"


def commit_of(path, data):
    """The commit a results file names, "unknown" when it does not."""
    c = data.get("commit") or NAME.match(os.path.basename(path)).group("commit")
    return "unknown" if c in ("", "unknown") else c


def provenance(path, data, what="", command=None):
    """The generated line: the command (else `command`, what the file's figures say it was),
    the date, the commit, the raw file."""
    rel = os.path.relpath(path, ROOT)
    link = os.path.relpath(path, LINK_FROM or ROOT)
    cmd = data.get("command")
    if cmd:
        cmd = f"`{cmd}`"
    elif command:
        cmd = f"`{command}` (not recorded: from the file's own figures)"
    else:
        cmd = "the command is not recorded"
    commit = commit_of(path, data)
    commit = "commit unknown" if commit == "unknown" else f"commit {commit}"
    date = data.get("date") or NAME.match(os.path.basename(path)).group("date")
    host = data.get("host") or {}
    cores = f", {host['cores']} cores" if host.get("cores") else ""
    return f"_{cmd}, {date}, {commit}{cores}{what}; raw results: [{rel}]({link})._"


def table(head, align, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


# Each renderer: the markdown between its markers, from its newest results file.

def render_boot():
    path, d = results("boot")
    rows, root = [], {}
    for name, v in d["images"].items():
        boots = v["boots"]
        ok = [b for b in boots if b["root_init_s"] is not None]
        root[name] = med(b["root_init_s"] for b in boots)
        rows.append([name, thousands(v["image_bytes"]), num(root[name], "{:.2f} s"),
                     num(med(b["run_init_to_root_init_s"] for b in boots), "{:.2f} s"), f"{len(ok)}/{len(boots)}"])
    out = [provenance(path, d, f", kernel {d['kernel']}, medians of {d['runs']} boots"), "",
           table(["initramfs", "image bytes", "kernel → root's init", "\"Run /init\" → root's init", "boots ok"],
                 ["---", "---:", "---:", "---:", "---:"], rows)]
    lean, it = root.get("leanrd host-only"), root.get("initramfs-tools MODULES=dep")
    if lean and it:
        out += ["", f"leanrd / initramfs-tools (kernel → root's init): {lean / it:.2f} (target ≤ 0.7)."]
    return "\n".join(out)


def render_build():
    path, d = results("build")
    gens = d["generators"]
    rows = [[n, num(med(v["seconds"]), "{:.3f} s"), thousands(v["image_bytes"]), thousands(v["entries"])]
            for n, v in gens.items()]
    out = [provenance(path, d, f", kernel {d['kernel']}, medians of {d['runs']}"), "",
           table(["generator", "time", "image bytes", "entries"], ["---", "---:", "---:", "---:"], rows)]
    base = gens.get("leanrd host-only (zstd:3)")
    if base:
        t = med(base["seconds"])
        faster = [f"{med(v['seconds']) / t:.0f}× faster than {n}" for n, v in gens.items()
                  if n in ("mkinitramfs MODULES=dep", "dracut --hostonly")]
        if faster:
            out += ["", f"Host-only leanrd is {' and '.join(faster)}; its image is "
                        f"{base['image_bytes'] / 1e6:.2f} MB (target < 0.9 MB)."]
    missing = [p for p, v in d.get("peers", {}).items() if v is None]
    if missing:
        out += ["", f"Not installed in this run, so not measured: {', '.join(missing)}."]
    return "\n".join(out)


def render_compress():
    path, d = results("compress")
    rows = []
    for p in d["pairs"]:
        ours, ref = med(p["leanrd_s"]), med(p["reference_s"])
        rows.append([p["format"], f"{ours:.2f} s", f"{p['leanrd_bytes'] / 1e6:.2f} MB", f"`{p['reference']}`",
                     f"{ref:.2f} s", f"{p['reference_bytes'] / 1e6:.2f} MB", f"{ours / ref:.2f}"])
    what = f", archive of /lib/modules/{d['kernel']}, {d['input_bytes'] / 1e6:.1f} MB, medians of {d['runs']}"
    return "\n".join([provenance(path, d, what), "",
                      table(["format", "leanrd", "size", "reference", "time", "size", "leanrd / reference"],
                            ["---", "---:", "---:", "---", "---:", "---:", "---:"], rows)])


def render_memory():
    path, d = results("memory")
    entries, base = d["entries"], med(d["empty_tree_peak_kb"])
    rows = []
    for name, runs in d["peak_kb"].items():
        kb = med(runs)
        above = f"{(kb - base) * 1024 / entries:.0f}" if name.startswith("leanrd") else "–"
        rows.append([f"`{name}`", f"{kb * 1024 / 1e6:.1f} MB", f"{kb * 1024 / entries:.0f}", above])
    what = (f", {thousands(entries)} entries ({thousands(d['files'])} small files), medians of {d['runs']}; "
            f"leanrd on an empty tree: {base * 1024 / 1e6:.1f} MB")
    return "\n".join([provenance(path, d, what), "",
                      table(["command", "peak RSS", "bytes per entry", "above the empty tree"],
                            ["---", "---:", "---:", "---:"], rows)])


def render_proof():
    path, d = results("proof")
    rows = []
    for name, v in d["builds"].items():
        w, p = med(v["build_ms"]), med(v["proof_ms"])
        rows.append([name, f"{w:.1f} ms", f"{p:.2f} ms", f"{100 * p / w:.1f} %", thousands(v["checks"])])
    return "\n".join([provenance(path, d, f", kernel {d['kernel']}, medians of {d['runs']}"), "",
                      table(["build", "wall time", "proof", "proof's share", "checks"],
                            ["---", "---:", "---:", "---:", "---:"], rows)])


def render_archiver():
    path, d = results("archiver")
    rows, per_file = [], []
    order = {"tree-aligned": 0, "tree-copy": 1, "one-file": 2}
    fs_name = {"xfs": "XFS", "btrfs": "Btrfs", "ext4": "ext4"}
    for c in sorted(d["cases"], key=lambda c: (order.get(c["case"], 3), list(fs_name).index(c["fs"]))):
        fs = fs_name[c["fs"]]
        t = {k: 1e3 * med(v) for k, v in c["seconds"].items()}
        others = ", ".join(f"{k} {v:,.0f} ms" for k, v in t.items() if k not in ("leanrd", "3cpio"))
        if c["case"] == "tree-aligned":
            case = f"modules tree, {fs}, `--data-align 4096` ({thousands(c['cloned'])} files cloned)"
            floor = t.get("bare FICLONERANGE loop")
            per_file.append(f"{fs} {t['leanrd'] * 1e3 / c['cloned']:.0f} µs (3cpio "
                            f"{t['3cpio'] * 1e3 / c['cloned']:.0f} µs, bare loop {floor * 1e3 / c['cloned']:.0f} µs)")
        elif c["case"] == "tree-copy":
            case = f"modules tree, {fs} (no reflinks: copied)"
        else:
            case = f"one {c['mib']} MiB file, {fs}, aligned"
        rows.append([case, f"{t['leanrd']:,.0f} ms", f"{t['3cpio']:,.0f} ms", others,
                     f"{t['leanrd'] / t['3cpio']:.2f}"])
    tree = next(c for c in d["cases"] if c["case"] != "one-file")
    what = (f", modules tree of {d['kernel']}: {thousands(tree['files'])} files, {tree['mib']:.0f} MiB; "
            f"medians of {d['runs']} alternating runs, each command followed by an fsync of its output")
    out = [provenance(path, d, what), "",
           table(["case", "leanrd", "3cpio", "others", "leanrd / 3cpio"], ["---", "---:", "---:", "---", "---:"], rows)]
    if per_file:
        out += ["", "Per cloned file: " + "; ".join(per_file) + "."]
    ext = [f"{e['tool']} {e['extents'] / e['image_mib']:.1f} on {fs_name[e['fs']]}" for e in d.get("extents", [])]
    al = [f"{t} {v['aligned']:,} of {v['eligible']:,}" for t, v in d.get("aligned", {}).items()]
    if ext and al:
        out += ["", f"Extents per MiB of the aligned images: {', '.join(ext)}. Eligible files (≥ 4096 bytes) with "
                    f"4096-aligned data: {', '.join(al)}."]
    return "\n".join(out)


DEBIAN_ROWS = [
    ("leanrd universal", "leanrd universal"),
    ("leanrd universal keep", "leanrd universal keep"),
    ("initramfs-tools most", "initramfs-tools (MODULES=most)"),
    ("dracut generic", "dracut --no-hostonly"),
    ("leanrd host-only", "leanrd host-only (in the VM)"),
    ("leanrd host-only keep", "leanrd host-only keep (in the VM)"),
    ("initramfs-tools dep", "initramfs-tools MODULES=dep (in the VM)"),
    ("dracut host-only", "dracut --hostonly (in the VM)"),
]


def render_debian(suite):
    path, d = results("debian", lambda data: data.get("suite") == suite)
    v = d["variants"]
    rows = []
    for key, label in DEBIAN_ROWS:
        if key not in v:
            continue
        boots = v[key]["boots"]
        # The first build fills leanrd's cache (decompressed modules, the modules' compressed
        # segment) from an empty one; the others find it.
        first, again = v[key]["build_s"][:1], v[key]["build_s"][1:]
        rows.append([label, num(med(first)), num(med(again)), thousands(v[key]["image_bytes"]),
                     num(med(b["multi_user_s"] for b in boots)), num(med(b["initramfs_s"] for b in boots)),
                     f"{sum(1 for b in boots if b['running'])}/{len(boots)}"])
    unknown = sorted(set(v) - {k for k, _ in DEBIAN_ROWS})
    if unknown:
        raise SystemExit(f"{os.path.relpath(path, ROOT)}: variants tables.py does not know: {unknown}")
    what = f", kernel {d['kernel']}, medians of {d['runs']} boots"
    command = f"python3 bench/debian.py --suite {suite} --runs {d['runs']}"

    def phase(key):
        return med(b["initramfs_s"] for b in v[key]["boots"]) if key in v else None

    ratios = []
    for lean, peer in [("leanrd host-only", "initramfs-tools dep"), ("leanrd universal", "initramfs-tools most"),
                       ("leanrd host-only", "dracut host-only"), ("leanrd universal", "dracut generic"),
                       ("leanrd host-only", "leanrd host-only keep"), ("leanrd universal", "leanrd universal keep")]:
        a, b = phase(lean), phase(peer)
        if a is not None and b:
            ratios.append(f"- initramfs phase, {lean} / {peer}: {a / b:.2f}")
    return "\n".join([provenance(path, d, what, command), "",
                      table(["variant", "first build s", "build again s", "image bytes", "kernel → multi-user s",
                             "initramfs phase s", "running"],
                            ["---", "---:", "---:", "---:", "---:", "---:", "---:"], rows), ""] + ratios)


NFS_ROWS = ["leanrd universal", "leanrd host-only", "initramfs-tools nfs", "dracut nfs"]


def known_variants(bench, rows):
    """The newest results of `bench` and their variants, all of which must be among `rows`."""
    path, d = results(bench)
    unknown = sorted(set(d["variants"]) - set(rows))
    if unknown:
        raise SystemExit(f"{os.path.relpath(path, ROOT)}: variants tables.py does not know: {unknown}")
    return path, d, d["variants"]


def render_nfs():
    path, d, v = known_variants("nfs", NFS_ROWS)
    rows = []
    for key in [k for k in NFS_ROWS if k in v]:
        boots = v[key]["boots"]
        rows.append([key, num(med(v[key]["build_s"])), thousands(v[key]["image_bytes"]),
                     num(med(b["multi_user_s"] for b in boots)), num(med(b["initramfs_s"] for b in boots)),
                     f"{sum(1 for b in boots if b['running'])}/{len(boots)}"])

    def phase(key):
        return med(b["initramfs_s"] for b in v[key]["boots"]) if key in v else None

    ratios = []
    for lean in ("leanrd universal", "leanrd host-only"):
        for peer in ("initramfs-tools nfs", "dracut nfs"):
            a, b = phase(lean), phase(peer)
            if a is not None and b:
                ratios.append(f"- initramfs phase, {lean} / {peer}: {a / b:.2f}")
    what = f", kernel {d['kernel']}, medians of {d['runs']} boots"
    return "\n".join([provenance(path, d, what), "",
                      table(["variant", "build s", "image bytes", "kernel → multi-user s", "initramfs phase s",
                             "running"], ["---", "---:", "---:", "---:", "---:", "---:"], rows), ""] + ratios)


LIVE_ROWS = ["leanrd universal", "dracut dmsquash-live", "leanrd universal ram", "dracut dmsquash-live ram",
             "leanrd universal ram -m 1536", "dracut dmsquash-live ram -m 1536"]


def render_live():
    path, d, v = known_variants("live", LIVE_ROWS)

    def ok(key):
        return [b for b in v[key]["boots"] if b["running"]]

    rows = []
    for key in [k for k in LIVE_ROWS if k in v]:
        boots, good = v[key]["boots"], ok(key)
        copy = v[key].get("ram_copy_s") or []
        rows.append([key, f"{v[key].get('memory_mib', '')}", num(med(v[key]["build_s"])),
                     thousands(v[key]["image_bytes"]),
                     num(med(b["multi_user_s"] for b in good)) if good else "–",
                     num(med(b["initramfs_s"] for b in good)) if good else "–",
                     num(med(copy)) if copy and good else "–",
                     f"{len(good)}/{len(boots)}"])
    ratios = []
    for lean, peer in (("leanrd universal", "dracut dmsquash-live"),
                       ("leanrd universal ram -m 1536", "dracut dmsquash-live ram -m 1536")):
        if lean in v and peer in v and ok(lean) and ok(peer):
            a = med(b["initramfs_s"] for b in ok(lean)) / med(b["initramfs_s"] for b in ok(peer))
            m = med(b["multi_user_s"] for b in ok(lean)) / med(b["multi_user_s"] for b in ok(peer))
            ratios.append(f"- {lean} / {peer}: initramfs phase {a:.2f}, kernel → multi-user {m:.2f}")
    for key in [k for k in LIVE_ROWS if k in v and not ok(k)]:
        why = [w for w in v[key].get("why") or [] if w]
        said = re.sub(r"^\[ *[0-9.]+\] ", "", why[0][-1]) if why else "see the raw results"
        ratios.append(f"- {key}: no boot reached running: {said}")
    what = f", kernel {d['kernel']}, medians of {d['runs']} boots"
    return "\n".join([provenance(path, d, what), "",
                      table(["variant", "VM MiB", "build s", "image bytes", "kernel → multi-user s",
                             "initramfs phase s", "copy into RAM s", "running"],
                            ["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:"], rows), ""] + ratios)


def render_resume():
    path, d = results("resume")
    raw = d["runs_raw"]
    read = [(r["image_read_kib"], r["image_read_s"]) for r in raw if r["image_read_kib"] is not None]
    image = f"{thousands(round(med(k for k, _ in read)))} KiB in {med(s for _, s in read):.2f} s" if read else "–"
    rows = [["cold boot", num(med(r["cold_s"] for r in raw), "{:.2f} s"),
             num(med(r["cold_run_init_s"] for r in raw), "{:.2f} s"), "–"],
            ["resume", num(med(r["resume_s"] for r in raw), "{:.2f} s"),
             num(med(r["resume_run_init_s"] for r in raw), "{:.2f} s"), image]]
    what = f", kernel {d['kernel']}, QEMU TCG -m {d['memory_mib']}, medians of {d['runs']}"
    out = [provenance(path, d, what), "",
           table(["boot", "QEMU start → the root's first line", "kernel → \"Run /init\"",
                  "image read by the kernel"], ["---", "---:", "---:", "---"], rows)]
    missed = [f"{what} {n} of {len(raw)}" for what, n in
              (("cold boots", sum(r["cold_s"] is None for r in raw)),
               ("resumes", sum(r["resume_s"] is None for r in raw))) if n]
    if missed:
        out += ["", f"Not reached (left out of the medians): {', '.join(missed)}."]
    return "\n".join(out)


LUKS_HOST = [("LUKS + keymap", "root on LUKS, crypttab, KEYMAP=de"),
             ("plain root", "the same machine, root not encrypted")]
LUKS_UNIVERSAL = [("leanrd --universal", "leanrd --universal (+ KEYMAP=de)"),
                  ("initramfs-tools most", "initramfs-tools, MODULES=most, cryptsetup-initramfs"),
                  ("dracut generic +crypt", "dracut --no-hostonly --add crypt --zstd")]


def render_luks():
    path, d = results("luks")
    host = {h["root"]: h for h in d["host_only"]}
    rows = [[label, f"{med(host[k]['build_s']):.3f} s", f"{host[k]['image_bytes'] / 1024:,.0f} KB",
             thousands(host[k]["entries"])] for k, label in LUKS_HOST if k in host]
    out = [provenance(path, d, f", kernel {d['kernel']}, medians of {d['runs']}"), "",
           table(["host-only (fixture machine: ext4 root, PS/2 + USB keyboards)", "build", "image", "entries"],
                 ["---", "---:", "---:", "---:"], rows)]
    luks, plain = host.get("LUKS + keymap"), host.get("plain root")
    if luks and plain:
        more = (luks["image_bytes"] - plain["image_bytes"]) / 1024
        out += ["", f"LUKS + keymap against the plain root: {more:,.0f} KB more "
                    f"({luks['image_bytes'] / plain['image_bytes']:.1f}× the size), build "
                    f"{med(luks['build_s']) / med(plain['build_s']):.1f}× the time."]
    uni = {u["generator"]: u for u in d["universal"]}
    base = uni.get("leanrd --universal")
    rows = [[label, f"{med(uni[k]['build_s']):.2f} s", f"{uni[k]['image_bytes'] / 2**20:.1f} MB",
             f"{uni[k]['image_bytes'] / base['image_bytes']:.2f}×" if base else "–"]
            for k, label in LUKS_UNIVERSAL if k in uni]
    out += ["", table(["universal image that unlocks LUKS (chroot of the Debian root)", "build", "image", "vs leanrd"],
                      ["---", "---:", "---:", "---:"], rows)]
    unknown = sorted(set(host) - {k for k, _ in LUKS_HOST}) + sorted(set(uni) - {k for k, _ in LUKS_UNIVERSAL})
    if unknown:
        raise SystemExit(f"{os.path.relpath(path, ROOT)}: rows tables.py does not know: {unknown}")
    boots = d.get("boot_after_run_init_s") or {}
    if boots:
        rows = [[f"`{name}`", num(med(v.get("prompt", [])), "{:.2f} s"), num(med(v.get("unlocked", [])), "{:.2f} s")]
                for name, v in sorted(boots.items())]
        out += ["", table(["boot (the boot_luks suite, QEMU TCG; after the kernel's \"Run /init\")",
                           "passphrase prompt", "unlocked"], ["---", "---:", "---:"], rows)]
    else:
        out += ["", "Boot not measured in this run (`--no-boot`)."]
    return "\n".join(out)


UNLOCK_BOOTS = [("leanrd", "tang", "leanrd --universal --include clevis", "leanrd +clevis"),
                ("initramfs-tools", "tang", "initramfs-tools + clevis-initramfs, `ip=dhcp`",
                 "initramfs-tools +clevis +dropbear"),
                ("initramfs-tools", "tang-nic", "initramfs-tools + clevis-initramfs, `ip=:::::ens3:dhcp`",
                 "initramfs-tools +clevis +dropbear"),
                ("dracut", "tang", "dracut + clevis-dracut, `rd.neednet=1 ip=dhcp`", "dracut +clevis"),
                ("leanrd", "ssh", "leanrd --universal --ssh-authorized-keys", "leanrd +ssh"),
                ("initramfs-tools", "ssh", "the same initramfs-tools image, dropbear-initramfs: `cryptroot-unlock`",
                 "initramfs-tools +clevis +dropbear")]
UNLOCK_SIZES = [("leanrd", "leanrd --universal", "leanrd"), ("leanrd +clevis", "+ clevis (Tang)", "leanrd"),
                ("leanrd +ssh", "+ SSH unlock (dropbear)", "leanrd"), ("leanrd +clevis +ssh", "+ both", "leanrd"),
                ("initramfs-tools", "initramfs-tools MODULES=most + cryptsetup-initramfs", "initramfs-tools"),
                ("initramfs-tools +clevis +dropbear", "+ clevis-initramfs + dropbear-initramfs", "initramfs-tools"),
                ("dracut", "dracut --no-hostonly --add crypt", "dracut"),
                ("dracut +clevis", "+ clevis clevis-pin-tang (+ network, systemd-networkd, dbus)", "dracut")]


def render_unlock():
    path, d = results("unlock")
    boots = d["boots"]
    known = {(f, h) for f, h, _, _ in UNLOCK_BOOTS}
    unknown = sorted({(b["flavour"], b["how"]) for b in boots} - known) + sorted(
        set(d["image_bytes"]) - {k for k, _, _ in UNLOCK_SIZES})
    if unknown:
        raise SystemExit(f"{os.path.relpath(path, ROOT)}: rows tables.py does not know: {unknown}")
    rows = []
    for f, h, label, size in UNLOCK_BOOTS:
        bs = [b for b in boots if b["flavour"] == f and b["how"] == h]
        if not bs:
            continue
        ok = [b for b in bs if b.get("root_init_s") is not None]
        rows.append([label, "SSH" if h == "ssh" else "Tang", num(med(b.get("unlocked_s") for b in bs), "{:.2f} s"),
                     num(med(b.get("root_mounted_s") for b in bs), "{:.2f} s"),
                     num(med(b.get("root_init_s") for b in bs), "{:.2f} s"), f"{len(ok)}/{len(bs)}",
                     thousands(d["image_bytes"][size])])
    out = [provenance(path, d, f", kernel {d['kernel']}, QEMU TCG, medians of {d['runs']}"), "",
           table(["image", "unlock by", "kernel → unlocked", "→ root mounted", "→ root's init", "boots ok",
                  "image bytes"], ["---", "---", "---:", "---:", "---:", "---:", "---:"], rows)]
    sizes = d["image_bytes"]
    rows = [[label, thousands(sizes[k]), "" if k == base else f"{sizes[k] - sizes[base]:+,}"]
            for k, label, base in UNLOCK_SIZES if k in sizes]
    out += ["", table(["image", "bytes", "the unlock features add"], ["---", "---:", "---:"], rows)]
    peers = d.get("peers") or {}
    if peers:
        out += ["", "Peers: " + "; ".join(f"{g}: " + ", ".join(f"{p} {v}" for p, v in vs.items())
                                          for g, vs in sorted(peers.items())) + "."]
    return "\n".join(out)


SHUTDOWN_ROWS = [("leanrd", "leanrd --universal (its exitrd)"),
                 ("initramfs-tools", "initramfs-tools, cryptsetup-initramfs (no exitrd)"),
                 ("dracut", "dracut --add \"crypt shutdown\", as shipped"),
                 ("dracut, forced", "the same, /run/initramfs/.need_shutdown made before the poweroff")]


def render_shutdown():
    path, d, variants = known_variants("shutdown", dict(SHUTDOWN_ROWS))
    rows = []
    for name, label in SHUTDOWN_ROWS:
        if name not in variants:
            continue
        bs = variants[name]["boots"]
        halves = sorted({"–" if b.get("key_halves_in_ram") is None else " + ".join(map(str, b["key_halves_in_ram"]))
                         for b in bs})
        last = [b["poweroff_s"] - b["units_stopped_s"] for b in bs
                if b.get("poweroff_s") is not None and b.get("units_stopped_s") is not None]
        rows.append([label, num(med(b.get("poweroff_s") for b in bs), "{:.2f} s"),
                     num(med(b.get("units_stopped_s") for b in bs), "{:.2f} s"), num(med(last), "{:.2f} s"),
                     f"{sum(bool(b.get('entered_exitrd')) for b in bs)}/{len(bs)}", ", ".join(halves),
                     f"{sum(bool(b.get('running')) for b in bs)}/{len(bs)}"])
    out = [provenance(path, d, f", kernel {d['kernel']}, QEMU TCG -m {d['memory_mib']}, medians of {d['runs']}"),
           "", table(["image", "`systemctl poweroff` → power off", "→ systemd-shutdown (units stopped)",
                      "systemd-shutdown → power off", "entered an exitrd",
                      "copies of the volume key's halves left in RAM", "running"],
                     ["---", "---:", "---:", "---:", "---:", "---:", "---:"], rows)]
    peers = d.get("peers") or {}
    if peers:
        out += ["", "Peers: " + ", ".join(f"{p} {v}" for p, v in sorted(peers.items())) + "."]
    return "\n".join(out)


SPLASH_ROWS = [("leanrd", "leanrd `--universal --include plymouth`"),
               ("initramfs-tools", "initramfs-tools (MODULES=most, its plymouth hook)"),
               ("dracut", "dracut `--no-hostonly --add \"crypt plymouth\"`")]
SPLASH_PLAIN = [("leanrd with plymouth, no splash", "with plymouth in the image", "leanrd"),
                ("leanrd, no plymouth", "without", "leanrd, no plymouth")]


def render_splash():
    path, d = results("splash")
    boots, sizes = d["boots"], d["sizes"]
    unknown = sorted(set(boots) - {n for n, _ in SPLASH_ROWS} - {n for n, _, _ in SPLASH_PLAIN})
    if unknown:
        raise SystemExit(f"{os.path.relpath(path, ROOT)}: variants tables.py does not know: {unknown}")
    mb = lambda n: f"{sizes[n] / 1e6:.2f} MB"  # noqa: E731
    rows = [[label, mb(n), num(med(b.get("kernel_to_first_frame_s") for b in boots[n]), "{:.2f} s"),
             num(med(b.get("kernel_to_dialog_s") for b in boots[n]), "{:.2f} s")]
            for n, label in SPLASH_ROWS if n in boots]
    plain = [[label, mb(img), num(med(b.get("init_to_prompt_s") for b in boots[n]), "{:.2f} s"),
              f"{sum(bool(b.get('plymouthd_started')) for b in boots[n])}/{len(boots[n])}"]
             for n, label, img in SPLASH_PLAIN if n in boots]
    only = [[n, mb(n)] for n in ("leanrd host-only", "dracut host-only") if n in sizes]
    out = [provenance(path, d, f", kernel {d['kernel']}, QEMU TCG -m 1024, std VGA, medians of {d['runs']}"), "",
           table(["image", "size", "kernel start → first plymouth frame", "→ passphrase dialog"],
                 ["---", "---:", "---:", "---:"], rows), "",
           table(["leanrd, no `splash` on the command line", "size", "/init's start → its prompt (the kernel's clock)",
                  "plymouthd started"], ["---", "---:", "---:", "---:"], plain), "",
           table(["image, size only", "size"], ["---", "---:"], only)]
    peers = d.get("peers") or {}
    if peers:
        out += ["", "Peers: " + ", ".join(f"{p} {v}" for p, v in sorted(peers.items())) + "."]
    return "\n".join(out)


UKI_ROWS = [("leanrd --uki", "leanrd zstd", "`leanrd build --universal --uki`"),
            ("dracut --uefi", "dracut", "`dracut --no-hostonly --uefi --zstd`")]


def render_gpu_firmware():
    path, d = results("gpu_firmware")
    rows = []
    for r in d["results"]:
        share = 100 * r["kept_bytes"] / r["list_bytes"] if r["list_bytes"] else 0
        kept = f"{r['kept_present']} files, {r['kept_bytes'] / 1e6:.2f} MB" if r["known"] else "not in the table: all"
        rows.append([r["gpu"], f"`{r['pci']}`", r["driver"], kept,
                     f"{r['list_present']} files, {r['list_bytes'] / 1e6:.2f} MB", f"{share:.1f} %"])
    out = [provenance(path, d, f", kernel {d['kernel']}"), "",
           table(["GPU", "PCI id", "driver", "the image's firmware, host-only", "the driver's modinfo list",
                  "share"], ["---", "---", "---", "---:", "---:", "---:"], rows)]
    out += ["", "Firmware: " + ", ".join(f"{p} {v}" for p, v in sorted(d.get("peers", {}).items())) + "."]
    return "\n".join(out)


def render_uki():
    path, d = results("uki")
    ukis, boots = d["ukis"], d["boots"]
    rows, missed = [], []
    for key, boot, label in UKI_ROWS:
        if key not in ukis:
            continue
        bs = boots.get(boot, [])
        ok = [b for b in bs if b["to_root_s"] is not None]
        if len(ok) < len(bs):
            missed.append(f"{label} {len(bs) - len(ok)} of {len(bs)}")
        rows.append([label, f"{med(ukis[key]['build_s']):.2f} s", f"{ukis[key]['bytes'] / 1e6:.1f} MB",
                     num(med(b["to_root_s"] for b in ok), "{:.2f} s"), num(med(b["uptime_s"] for b in ok), "{:.2f} s")])
    out = [provenance(path, d, f", kernel {d['kernel']}, medians of {d['runs']}, alternating"), "",
           table(["UKI", "build", "size", "OVMF start → root's init (wall)", "kernel uptime at the root's init"],
                 ["---", "---:", "---:", "---:", "---:"], rows)]
    if missed:
        out += ["", f"Boots that did not reach the root's init (left out of the medians): {', '.join(missed)}."]
    if "leanrd --uki" in ukis and "dracut --uefi" in ukis:
        r = med(ukis["dracut --uefi"]["build_s"]) / med(ukis["leanrd --uki"]["build_s"])
        out += ["", f"leanrd is {r:.0f}× faster to build its UKI."]
    xfs = d.get("on_xfs") or {}
    said = [f"the {'zstd UKI' if n == 'zstd' else 'reflinked one (`--compress none`)' if n == 'reflinked' else n} is "
            f"{v['bytes'] / 1e6:.1f} MB of which {v['exclusive_bytes'] / 1e6:.2f} MB exclusive, built in "
            f"{v['build_s']:.2f} s" for n, v in xfs.items()]
    if said:
        out += ["", f"On loop XFS (sysroot on the same file system): {'; '.join(said)}."]
    return "\n".join(out)


ARM64_ROWS = [("leanrd universal", "`leanrd build --universal` (aarch64 leanrd, qemu-user)"),
              ("leanrd universal (x86-64)", "the same, by x86-64 leanrd with `--sysroot` (native)"),
              ("initramfs-tools most", "initramfs-tools, MODULES=most (qemu-user)"),
              ("dracut generic", "`dracut --no-hostonly` (qemu-user)")]


def render_arm64():
    path, d, v = known_variants("arm64", [k for k, _ in ARM64_ROWS])
    rows = []
    for key, label in ARM64_ROWS:
        if key not in v:
            continue
        boots = v[key]["boots"]
        rows.append([label, num(med(v[key]["build_s"])), thousands(v[key]["image_bytes"]),
                     num(med(b["multi_user_s"] for b in boots)), num(med(b["initramfs_s"] for b in boots)),
                     f"{sum(1 for b in boots if b['running'])}/{len(boots)}"])
    out = [provenance(path, d, f", kernel {d['kernel']}, medians of {d['runs']}",
                      f"python3 bench/arm64.py --runs {d['runs']}"), "",
           table(["variant", "build s", "image bytes", "kernel → multi-user s", "initramfs phase s", "running"],
                 ["---", "---:", "---:", "---:", "---:", "---:"], rows), ""]
    for peer in ("initramfs-tools most", "dracut generic"):
        lean = "leanrd universal"
        if lean not in v or peer not in v:
            continue
        build = med(v[lean]["build_s"]) / med(v[peer]["build_s"])
        a = med(b["initramfs_s"] for b in v[lean]["boots"])
        b = med(b["initramfs_s"] for b in v[peer]["boots"])
        phase = f"{a / b:.2f}" if a is not None and b else "–"
        out.append(f"- {lean} / {peer}: build (both under qemu-user) {build:.2f}, initramfs phase {phase}")
    return "\n".join(out)


SEEDS_MODES = ["xz", "zstd", "reflink"]


def render_seeds_table():
    path, d = results("seeds_table")
    cases = {(c["fs"], c["image"], c["mode"]): c for c in d["cases"]}

    def pct(v, ref):
        return f"({100 * (v - ref) / ref:+.2f}%)" if ref else ""

    out = [provenance(path, d, f", kernel {d['kernel']}, build runtime median of {d['runs']}")]
    reflink_vs_zstd, excl = [], {}
    for fs in dict.fromkeys(c["fs"] for c in d["cases"]):
        for kind in dict.fromkeys(c["image"] for c in d["cases"] if c["fs"] == fs):
            res = {m: cases[(fs, kind, m)] for m in SEEDS_MODES if (fs, kind, m) in cases}
            if set(res) != set(SEEDS_MODES):
                raise SystemExit(f"{os.path.relpath(path, ROOT)}: {fs} {kind}: modes {sorted(res)}, not {SEEDS_MODES}")
            ref = res["xz"]

            def row(label, get, fmt):
                cells = []
                for m in SEEDS_MODES:
                    v, x = get(res[m]), get(ref)
                    if v is None:
                        cells.append("–")
                    elif m == "xz":
                        cells.append(f"{fmt(v)} (ref)")
                    else:
                        cells.append(f"{fmt(v)} {pct(v, x) if x is not None else ''}".rstrip())
                return f"{label} | " + " | ".join(cells)
            def boot_ms(c):
                return None if c["kernel_to_init_s"] is None else 1000 * c["kernel_to_init_s"]
            lines = [f"{fs.upper()} {kind} | leanrd xz | leanrd zstd | leanrd reflink", "---|---:|---:|---:",
                     row("leanrd runtime", lambda c: med(c["build_s"]), "{:.3f}s".format),
                     row("QEMU boot time: kernel to /init", boot_ms, "{:.1f}ms".format)]
            lines += [row(label, lambda c, k=key: c["fiemap"][k], str)
                      for key, label in (("total", "total bytes"), ("shared", "shared (deduplicated)"),
                                         ("exclusive", "exclusive"))]
            ratio = med(res["reflink"]["build_s"]) / med(res["zstd"]["build_s"])
            share = 100 * res["reflink"]["fiemap"]["exclusive"] / ref["fiemap"]["total"]
            reflink_vs_zstd.append(ratio)
            excl.setdefault(kind, []).append(share)
            out += ["", "\n".join(lines), "",
                    f"reflink exclusive / xz image: {share:.1f} %; reflink build / zstd build: {ratio:.2f}"]

    def span(xs, fmt):
        lo, hi = fmt.format(min(xs)), fmt.format(max(xs))
        return lo if lo == hi else f"{lo}–{hi}"
    if reflink_vs_zstd:
        faster = "met" if all(r < 1 for r in reflink_vs_zstd) else "not met"
        small = "met" if all(x <= 10 for xs in excl.values() for x in xs) else "not met"
        shares = ", ".join(f"{span(xs, '{:.1f}')} % {kind}" for kind, xs in excl.items())
        out += ["", f"Targets: reflink build faster than zstd: {faster} ({span(reflink_vs_zstd, '{:.2f}')}×). "
                    f"Reflink exclusive bytes ≤ 10 % of the xz image: {small} ({shares})."]
    return "\n".join(out)


TIMELINE_ROWS = [("leanrd-host-only", "leanrd host-only"), ("leanrd-universal", "leanrd universal"),
                 ("initramfs-tools-dep", "initramfs-tools MODULES=dep")]


def render_timeline():
    path, d = results("timeline")
    phases, rows, short = d["phases"], [], []
    for key, label in TIMELINE_ROWS:
        if key not in phases:
            continue
        runs = phases[key]

        def m(k):
            return num(med(r.get(k) for r in runs), "{:.2f} s")
        if len(runs) < d["runs"]:
            short.append(f"{label} {len(runs)} of {d['runs']}")
        nmod = [r["nmod"] for r in runs if "nmod" in r]
        loads = f"{statistics.median_low(nmod)} ({m('modules')})" if nmod else "not logged"
        rows.append([label, m("kernel"), m("initramfs"), loads, m("root"), m("total")])
    unknown = sorted(set(phases) - {k for k, _ in TIMELINE_ROWS})
    if unknown:
        raise SystemExit(f"{os.path.relpath(path, ROOT)}: images tables.py does not know: {unknown}")
    what = f", kernel {d['kernel']}, `leanrd analyze` of each boot, median of {d['runs']}"
    out = [provenance(path, d, what), "",
           table(["image", "kernel → /init", "initramfs", "module loads (wall)", "root → multi-user", "total"],
                 ["---", "---:", "---:", "---:", "---:", "---:"], rows)]
    if short:
        out += ["", f"Boots analysed (the others did not reach running or were not analysed): {', '.join(short)}."]
    return "\n".join(out)


ZFS_ROWS = [("leanrd universal", "leanrd, universal", "`root=ZFS=rpool/ROOT/debian`"),
            ("initramfs-tools", "initramfs-tools + zfs-initramfs (MODULES=most)",
             "`root=ZFS=rpool/ROOT/debian boot=zfs`"),
            ("dracut", "dracut --no-hostonly --add zfs (zfs-dracut, with systemd)", "`root=zfs:rpool/ROOT/debian`")]


def render_zfs():
    path, d = results("zfs")
    v = d["variants"]
    unknown = sorted(set(v) - {n for n, _, _ in ZFS_ROWS})
    if unknown:
        raise SystemExit(f"{os.path.relpath(path, ROOT)}: variants tables.py does not know: {unknown}")
    base = med(b.get("initramfs_s") for b in v["leanrd universal"]["boots"]) if "leanrd universal" in v else None
    rows = []
    for n, label, cmdline in ZFS_ROWS:
        if n not in v:
            continue
        boots = v[n]["boots"]
        phase = med(b.get("initramfs_s") for b in boots)
        ratio = f"{phase / base:.2f}×" if phase is not None and base else "–"
        rows.append([label, cmdline, f"{v[n]['image_bytes'] / 1e6:.1f} MB", num(phase, "{:.2f} s"), ratio,
                     num(med(b.get("multi_user_s") for b in boots), "{:.2f} s"),
                     f"{sum(bool(b.get('running')) for b in boots)}/{len(boots)}"])
    out = [provenance(path, d, f", kernel {d['kver']}, QEMU TCG -m 1024, medians of {d['runs']}"), "",
           table(["image", "command line", "size", "initramfs phase (passphrase typed)", "× leanrd",
                  "kernel → multi-user", "running"], ["---", "---", "---:", "---:", "---:", "---:", "---:"], rows)]
    peers = d.get("peers") or {}
    if peers:
        out += ["", "Peers: " + ", ".join(f"{p} {ver}" for p, ver in sorted(peers.items())) + "."]
    return "\n".join(out)


# Every benchmark table of README.md and docs/*.md: its marker name (the bench's results name, with the
# suite for debian) and renderer (None: not generated yet, so raw results for it are a problem).
# A marked table whose bench has no raw results yet keeps its text as it is (written by hand)
# until they appear.
STORAGE_GENERATORS = [("leanrd", "leanrd"), ("dracut", "dracut")]
# Images booted on some stacks only: a line each under the table.
STORAGE_EXTRA = [("dracut-checkers", "dracut with multipath's path checkers added (`--include /usr/lib/multipath`)"),
                 ("dracut-systemd", "dracut with its systemd modules")]


def render_storage():
    path, d = results("storage")
    imgs = d["images"]
    unknown = sorted(set(imgs) - {g for g, _ in STORAGE_GENERATORS + STORAGE_EXTRA})
    if unknown:
        raise SystemExit(f"{os.path.relpath(path, ROOT)}: images tables.py does not know: {unknown}")
    gens = [(g, label) for g, label in STORAGE_GENERATORS if g in imgs]
    rows, failed = [], []
    for st in d["stacks"]:
        row = [st["name"]]
        for g, _ in gens:
            bs = st["boots"].get(g, [])
            good = [b for b in bs if b.get("ok")]
            row += [num(med(b.get("initramfs_s") for b in good), "{:.2f} s"),
                    num(med(b.get("root_init_s") for b in good), "{:.2f} s"),
                    f"{sum(1 for b in bs if b.get('ok'))}/{len(bs)}" if bs else "–"]
            if bs and not bs[0].get("ok"):
                failed.append(f"{g}: {st['name']}")
        rows.append(row)
    head = ["stack"]
    for _, label in gens:
        head += [f"{label}: initramfs phase", f"{label}: kernel → root's init", f"{label}: booted on the stack"]
    what = f", kernel {d['kernel']}, QEMU TCG, medians of {d['runs']} boots"
    out = [provenance(path, d, what), "",
           table(head, ["---"] + ["---:"] * (len(head) - 1), rows), "",
           "Images (one each, for every stack): " + ", ".join(
               f"{label} {thousands(imgs[g]['image_bytes'])} bytes" for g, label in gens) + "."]
    if failed:
        out.append("Not booted on the stack's device in the first run (not booted again): " + "; ".join(failed) + ".")
    for g, label in STORAGE_EXTRA:
        if g not in imgs:
            continue
        tried = [(st["name"], st["boots"][g]) for st in d["stacks"] if st["boots"].get(g)]
        out.append(f"{label}, {thousands(imgs[g]['image_bytes'])} bytes: " + "; ".join(
            f"{name} booted {sum(1 for b in bs if b.get('ok'))}/{len(bs)}" for name, bs in tried) + ".")
    peers = d.get("peers") or {}
    if peers:
        out += ["", "Peers: " + ", ".join(f"{p} {v}" for p, v in sorted(peers.items()) if v) + "."]
    return "\n".join(out)


VERITY_ROWS = [("leanrd", "leanrd `--universal`"), ("dracut", "dracut `--add systemd-veritysetup`")]


def render_verity():
    path, d = results("verity")
    unknown = sorted(set(d["images"]) - {g for g, _ in VERITY_ROWS})
    if unknown:
        raise SystemExit(f"{os.path.relpath(path, ROOT)}: images tables.py does not know: {unknown}")
    rows = []
    for g, label in VERITY_ROWS:
        if g not in d["images"]:
            continue
        bs = d["boots"].get(g, [])
        rows.append([label, thousands(d["images"][g]["image_bytes"]),
                     num(med(b.get("root_mounted_s") for b in bs), "{:.2f} s"),
                     num(med(b.get("root_init_s") for b in bs), "{:.2f} s"),
                     num(med(b.get("initramfs_s") for b in bs), "{:.2f} s"),
                     f"{sum(1 for b in bs if b.get('ok'))}/{len(bs)}"])
    what = f", kernel {d['kernel']}, QEMU TCG, medians of {d['runs']} boots"
    out = [provenance(path, d, what), "",
           table(["image", "bytes", "kernel → root mounted", "kernel → root's init", "initramfs phase", "booted"],
                 ["---", "---:", "---:", "---:", "---:", "---:"], rows)]
    peers = d.get("peers") or {}
    if peers:
        out += ["", "Peers: " + ", ".join(f"{p} {v}" for p, v in sorted(peers.items()) if v) + "."]
    return "\n".join(out)


TABLES = {
    "archiver": render_archiver,
    "memory": render_memory,
    "compress": render_compress,
    "build": render_build,
    "boot": render_boot,
    "debian-bookworm": lambda: render_debian("bookworm"),
    "debian-trixie": lambda: render_debian("trixie"),
    "resume": render_resume,
    "nfs": render_nfs,
    "live": render_live,
    "luks": render_luks,
    "unlock": render_unlock,
    "shutdown": render_shutdown,
    "splash": render_splash,
    "gpu_firmware": render_gpu_firmware,
    "proof": render_proof,
    "uki": render_uki,
    "arm64": render_arm64,
    "seeds_table": render_seeds_table,
    "timeline": render_timeline,
    "storage": render_storage,
    "verity": render_verity,
    "zfs": render_zfs,
}

BLOCK = re.compile(r"<!-- bench:(?P<name>[a-z0-9_-]+) -->\n(?P<body>.*?)<!-- /bench:(?P=name) -->", re.S)
OPEN = re.compile(r"<!-- bench:(?P<name>[a-z0-9_-]+) -->")


def documents():
    """The files that may hold marked tables: README.md, then docs/*.md by name."""
    return [README] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def rel(path):
    return os.path.relpath(path, ROOT)


def render_in(render, doc):
    """`render()` with its raw results' link relative to `doc`'s directory."""
    global LINK_FROM
    saved, LINK_FROM = LINK_FROM, os.path.dirname(doc)
    try:
        return render()
    finally:
        LINK_FROM = saved


def generate(texts):
    """Every document's text with every marked table made again: `texts` maps each file to
    its text; (new texts, problems, not generated)."""
    problems, not_generated = [], []
    where = {}  # marker name -> the files that mark it
    for doc, text in texts.items():
        blocks = [m.group("name") for m in BLOCK.finditer(text)]
        for name in blocks:
            where.setdefault(name, []).append(doc)
            if name not in TABLES:
                problems.append(f"{rel(doc)} marks a table tables.py does not know: {name}")
        for name in sorted({m.group("name") for m in OPEN.finditer(text)} - set(blocks)):
            problems.append(f"{rel(doc)}: <!-- bench:{name} --> has no <!-- /bench:{name} --> after it")
    for name, docs in sorted(where.items()):
        if len(docs) > 1:
            problems.append(f"{name}: marked in more than one place ({', '.join(rel(d) for d in docs)}): "
                            f"a table has one place")
    made = {}
    for name, render in TABLES.items():
        if render is None and glob.glob(os.path.join(RESULTS, f"{name}-*.json")):
            problems.append(f"{name}: raw results in bench/results but tables.py cannot render them yet")
            continue
        try:
            if render is None:
                raise Missing(name)
            # Rendered for the first file that marks it (its link relative to that file).
            made[name] = render_in(render, where.get(name, [README])[0])
        except Missing:
            # Marked or not, its text stays as it is (written by hand) until its bench writes
            # raw results.
            not_generated.append(name)
            continue
        if name not in where:
            problems.append(f"{name}: raw results in bench/results but no table: no "
                            f"<!-- bench:{name} --> ... <!-- /bench:{name} --> markers in "
                            f"{', '.join(rel(d) for d in texts)}")

    def fill(m):
        name = m.group("name")
        return f"<!-- bench:{name} -->\n{made[name]}\n<!-- /bench:{name} -->" if name in made else m.group(0)
    return {doc: BLOCK.sub(fill, text) for doc, text in texts.items()}, problems, not_generated


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="compare, do not write; exit 1 when README.md or a docs/*.md file differs")
    a = ap.parse_args(argv)
    texts = {}
    for doc in documents():
        with open(doc) as f:
            texts[doc] = f.read()
    new, problems, not_generated = generate(texts)
    for name in not_generated:
        print(f"{name}: not generated (no raw results)")
    for p in problems:
        print(p, file=sys.stderr)
    changed = [doc for doc in texts if new[doc] != texts[doc]]
    if a.check:
        for doc in changed:
            sys.stdout.writelines(difflib.unified_diff(texts[doc].splitlines(True), new[doc].splitlines(True),
                                                       rel(doc), f"{rel(doc)} (from bench/results)"))
            print(f"{rel(doc)} differs from what bench/results gives: run python3 bench/tables.py", file=sys.stderr)
        return 1 if changed or problems else 0
    for doc in changed:
        with open(doc, "w") as f:
            f.write(new[doc])
        print(f"{rel(doc)}: tables rewritten")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
