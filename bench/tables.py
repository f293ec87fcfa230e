#!/usr/bin/env python3
"""The README's benchmark tables, made from the raw results (bench/results/NAME-DATE-COMMIT.json,
written by each bench through common.save()): for each bench, the newest results file.

In README.md each generated table sits between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`,
with the line saying which command made it, when, at which commit; only that text is rewritten.
A table whose bench has no raw results is not generated (it stays as it was written, outside
markers).

Usage: python3 bench/tables.py            rewrite README.md between the markers
       python3 bench/tables.py --check    exit 1, with a diff, when README.md differs from what
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
NAME = re.compile(r"^(?P<bench>[a-z_]+)-(?P<date>\d{4}-\d{2}-\d{2})-(?P<commit>[0-9a-z-]+)\.json$")


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
    return f"_{cmd}, {date}, {commit}{cores}{what}; raw results: [{rel}]({rel})._"


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
        rows.append([label, num(med(v[key]["build_s"])), thousands(v[key]["image_bytes"]),
                     num(med(b["multi_user_s"] for b in boots)), num(med(b["initramfs_s"] for b in boots)),
                     f"{sum(1 for b in boots if b['running'])}/{len(boots)}"])
    unknown = sorted(set(v) - {k for k, _ in DEBIAN_ROWS})
    if unknown:
        raise SystemExit(f"{os.path.relpath(path, ROOT)}: variants tables.py does not know: {unknown}")
    what = f", kernel {d['kernel']}, medians of {d['runs']} boots"
    command = f"python3 bench/debian.py --suite {suite} --runs {d['runs']}"
    return "\n".join([provenance(path, d, what, command), "",
                      table(["variant", "build s", "image bytes", "kernel → multi-user s", "initramfs phase s",
                             "running"], ["---", "---:", "---:", "---:", "---:", "---:"], rows)])


# Every benchmark table of the README: its marker name (the bench's results name, with the
# suite for debian) and renderer (None: not generated yet; its bench writes raw results, but
# none have been made since it does, so there is nothing to render them from).
TABLES = {
    "archiver": render_archiver,
    "memory": render_memory,
    "compress": render_compress,
    "build": render_build,
    "boot": render_boot,
    "debian-bookworm": lambda: render_debian("bookworm"),
    "debian-trixie": lambda: render_debian("trixie"),
    "resume": None,
    "luks": None,
    "proof": render_proof,
    "uki": None,
    "seeds_table": None,
    "timeline": None,
}

BLOCK = re.compile(r"<!-- bench:(?P<name>[a-z-]+) -->\n(?P<body>.*?)<!-- /bench:(?P=name) -->", re.S)


def generate(text):
    """README text with every marked table made again; (text, problems, not generated)."""
    problems, not_generated = [], []
    marked = {m.group("name") for m in BLOCK.finditer(text)}
    for name in sorted(marked - set(TABLES)):
        problems.append(f"README.md marks a table tables.py does not know: {name}")
    made = {}
    for name, render in TABLES.items():
        if render is None and glob.glob(os.path.join(RESULTS, f"{name}-*.json")):
            problems.append(f"{name}: raw results in bench/results but tables.py cannot render them yet")
            continue
        try:
            if render is None:
                raise Missing(name)
            made[name] = render()
        except Missing:
            if name in marked:
                problems.append(f"{name}: marked in README.md but there are no raw results for it in bench/results")
            else:
                not_generated.append(name)
            continue
        if name not in marked:
            problems.append(f"{name}: raw results in bench/results but README.md has no "
                            f"<!-- bench:{name} --> ... <!-- /bench:{name} --> markers")

    def fill(m):
        name = m.group("name")
        return f"<!-- bench:{name} -->\n{made[name]}\n<!-- /bench:{name} -->" if name in made else m.group(0)
    return BLOCK.sub(fill, text), problems, not_generated


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare, do not write; exit 1 when README.md differs")
    a = ap.parse_args(argv)
    with open(README) as f:
        text = f.read()
    new, problems, not_generated = generate(text)
    for name in not_generated:
        print(f"{name}: not generated (no raw results)")
    for p in problems:
        print(p, file=sys.stderr)
    if a.check:
        if new != text:
            sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True),
                                                       "README.md", "README.md (from bench/results)"))
            print("README.md differs from what bench/results gives: run python3 bench/tables.py", file=sys.stderr)
            return 1
        return 1 if problems else 0
    if new != text:
        with open(README, "w") as f:
            f.write(new)
        print("README.md: tables rewritten")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
