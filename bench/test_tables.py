#!/usr/bin/env python3
"""Unit checks of bench/tables.py on results and README.md and docs/*.md texts made here (not the
repository's): the newest results file is the one rendered, an unknown commit is marked so, a
table out of date is a difference, results without markers or renderer are problems, a marked
table without results stays as written, a table in docs/ is made there with its link relative to
it, a marker twice or unknown is a problem naming its files; and each renderer on results shaped
as its bench saves them.

Usage: python3 bench/test_tables.py (crates/testkit/tests/bench_tables.rs runs it)
"""

import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tables  # noqa: E402


def proof_results(ms):
    return {"bench": "proof", "date": "", "commit": "", "command": "python3 bench/proof.py --runs 1",
            "host": {"cores": 2}, "kernel": "6.1.0-1-amd64", "runs": 1,
            "builds": {"host-only": {"build_ms": [ms], "proof_ms": [0.5], "checks": 4}}}


def saved(bench, data, peers=None):
    """What common.save() writes around a bench's data (put() sets the date and commit)."""
    return {"bench": bench, "time": "12:00:00Z", "host": {"cores": 2, "kernel": "6.1.0-1-amd64"},
            "peers": peers or {}, "command": f"python3 bench/{bench}.py --runs 3", **data}


def resume_results():
    runs = [{"cold_s": 6.5, "cold_run_init_s": 2.6, "resume_s": 7.17, "resume_run_init_s": 2.61,
             "image_read_kib": 87540, "image_read_s": 0.66},
            {"cold_s": 6.4, "cold_run_init_s": 2.5, "resume_s": None, "resume_run_init_s": None,
             "image_read_kib": None, "image_read_s": None},
            {"cold_s": 6.6, "cold_run_init_s": 2.7, "resume_s": 7.17, "resume_run_init_s": 2.61,
             "image_read_kib": 87540, "image_read_s": 0.66}]
    return saved("resume", {"kernel": "6.1.0-1-amd64", "runs": 3, "memory_mib": 512, "runs_raw": runs})


def luks_results(boot):
    host = [{"root": "LUKS + keymap", "build_s": [0.2, 0.187, 0.18], "image_bytes": 5896 * 1024, "entries": 107,
             "cryptsetup": True, "keymap": True},
            {"root": "plain root", "build_s": [0.039, 0.04, 0.038], "image_bytes": 756 * 1024, "entries": 46,
             "cryptsetup": False, "keymap": False}]
    mb = 2 ** 20
    uni = [{"generator": "leanrd --universal", "build_s": [0.44, 0.45, 0.43], "image_bytes": int(21.9 * mb)},
           {"generator": "initramfs-tools most", "build_s": [18.88, 19.0, 18.0], "image_bytes": int(33.1 * mb)},
           {"generator": "dracut generic +crypt", "build_s": [15.41, 15.0, 16.0], "image_bytes": int(32.8 * mb)}]
    timings = {"universal_ps2_de": {"prompt": [1.06, 1.07, 1.09], "unlocked": [3.1, 3.0, 3.2]},
               "host_keyfile": {"unlocked": [2.55, 2.5, 2.6]}} if boot else {}
    return saved("luks", {"kernel": "6.1.0-1-amd64", "runs": 3, "host_only": host, "universal": uni,
                          "boot_after_run_init_s": timings})


def uki_results():
    return saved("uki", {
        "kernel": "6.1.0-1-amd64", "runs": 3,
        "ukis": {"leanrd --uki": {"build_s": [0.33, 0.32, 0.34], "bytes": 31_300_000},
                 "dracut --uefi": {"build_s": [18.68, 18.0, 19.0], "bytes": 42_700_000}},
        "on_xfs": {"zstd": {"bytes": 21_000_000, "exclusive_bytes": 12_790_000, "build_s": 0.21},
                   "reflinked": {"bytes": 60_700_000, "exclusive_bytes": 1_590_000, "build_s": 0.32}},
        "boots": {"leanrd zstd": [{"to_root_s": 11.54, "uptime_s": 4.15}] * 3,
                  "dracut": [{"to_root_s": 24.14, "uptime_s": 16.07}, {"to_root_s": None, "uptime_s": None},
                             {"to_root_s": 24.14, "uptime_s": 16.07}]}}, {"dracut": "059-4", "qemu": "QEMU 7.2"})


def seeds_results():
    cases = []
    for fs, figures in (("btrfs", ((1.705, 2.3999), (0.095, None), (0.076, 2.0322))),
                        ("xfs", ((1.457, 3.3449), (0.072, 2.0929), (0.040, 2.3875)))):
        for mode, (build, boot), fiemap in zip(("xz", "zstd", "reflink"), figures, (
                {"total": 548864, "shared": 0, "exclusive": 548864},
                {"total": 753664, "shared": 0, "exclusive": 753664},
                {"total": 2990080, "shared": 2924544, "exclusive": 65536})):
            cases.append({"fs": fs, "image": "host-only", "mode": mode, "build_s": [build, build + 0.01, build - 0.001],
                          "kernel_to_init_s": boot, "fiemap": dict(fiemap, extents=12)})
    return saved("seeds_table", {"kernel": "6.1.0-1-amd64", "runs": 3, "cases": cases})


def timeline_results():
    def run(kernel, initramfs, root, total, modules=None, nmod=None):
        r = {"kernel": kernel, "initramfs": initramfs, "root": root, "total": total}
        return dict(r, modules=modules, nmod=nmod) if modules is not None else r
    return saved("timeline", {"kernel": "6.1.0-1-amd64", "runs": 3, "phases": {
        "leanrd-host-only": [run(1.64, 0.49, 14.31, 16.43, 0.40, 11)] * 3,
        "leanrd-universal": [run(2.54, 1.02, 14.65, 18.25, 0.78, 17)] * 3,
        "initramfs-tools-dep": [run(2.37, 5.27, 15.37, 22.84)] * 2}})


class Measure(unittest.TestCase):
    """bench/debian.py's reading of a boot's console, which bench/arm64.py shares."""

    def test_systemd_analyze_totals_past_a_minute_are_read(self):
        import debian
        for text, want in (("950ms", 0.95), ("12.345s", 12.345), ("1min 5.234s", 65.234)):
            self.assertAlmostEqual(debian.systemd_seconds(text), want)
        self.assertIsNone(debian.systemd_seconds("5.2s (kernel)"))
        log = ("LEANRD-STATE running\n"
               "LEANRD-ANALYZE Startup finished in 5.1s (kernel) + 1min 2.5s (userspace) = 1min 7.6s\r\n")
        self.assertEqual(debian.measure(log)[:2], (True, 67.6))


def unlock_results():
    def boot(flavour, how, u, m, i):
        return {"name": f"{flavour}-{how}-1", "flavour": flavour, "how": how, "unlocked_s": u, "root_mounted_s": m,
                "root_init_s": i}
    boots = [boot("leanrd", "tang", 6.1, 6.3, 6.5), boot("leanrd", "tang", 6.3, 6.5, 6.7),
             boot("leanrd", "tang", 6.2, 6.4, None), boot("initramfs-tools", "tang", 28.5, 30.1, 31.8),
             boot("dracut", "tang", 26.4, 28.6, 30.3), boot("initramfs-tools", "ssh", None, None, None)]
    sizes = {"leanrd": 21_000_000, "leanrd +clevis": 22_000_000, "leanrd +ssh": 21_500_000,
             "leanrd +clevis +ssh": 22_500_000, "initramfs-tools": 33_000_000,
             "initramfs-tools +clevis +dropbear": 40_600_000, "dracut": 32_000_000, "dracut +clevis": 49_800_000}
    return saved("unlock", {"kernel": "6.1.0-1-amd64", "runs": 3, "image_bytes": sizes, "boots": boots},
                 peers={"dracut": {"dracut": "059-4", "clevis-dracut": "19-2"}})


def shutdown_results():
    def boot(s, halves, exitrd=True):
        return {"running": True, "poweroff_s": s, "units_stopped_s": s - 2, "entered_exitrd": exitrd,
                "key_halves_in_ram": halves}
    variants = {"leanrd": {"boots": [boot(5.2, [0, 0]), boot(5.0, [0, 0]), boot(5.6, [0, 0])]},
                "initramfs-tools": {"boots": [boot(4.1, [1, 1], False), boot(4.3, [1, 1], False),
                                              boot(4.2, None, False)]},
                "dracut": {"boots": [boot(6.0, [1, 1], False)]}}
    return saved("shutdown", {"kernel": "6.12.1-amd64", "runs": 3, "memory_mib": 1024, "variants": variants},
                 peers={"dracut": "106-6", "systemd": "257.9-1"})


def gpu_firmware_results():
    def gpu(name, driver, pci, known, kept, kept_bytes, files, list_bytes):
        return {"gpu": name, "driver": driver, "pci": pci, "ip": [], "known": known, "list_files": files + 2,
                "list_present": files, "list_bytes": list_bytes, "kept_files": kept, "kept_present": kept,
                "kept_bytes": kept_bytes, "kept": {}}
    return saved("gpu_firmware", {"kernel": "6.12.1-amd64", "results": [
        gpu("Navi 21", "amdgpu", "1002:73bf", True, 12, 2_770_000, 625, 81_540_000),
        gpu("A card", "amdgpu", "1002:ffff", False, 625, 81_540_000, 625, 81_540_000)]},
        peers={"firmware-amd-graphics": "20250410-2"})


def storage_results():
    def boot(ok, phase=None, init=None):
        return {"ok": ok, "initramfs_s": phase, "root_init_s": init, "run_init_s": 3.0}
    stacks = [{"name": "LVM thin", "append": "root=/dev/mapper/vgs-thin rd.lvm.lv=vgs/thin", "disks": [],
               "boots": {"leanrd": [boot(True, 4.3, 7.3), boot(True, 4.1, 7.1), boot(True, 4.5, 7.5)],
                         "dracut": [boot(True, 14.0, 17.0), boot(True, 14.2, 17.2), boot(False)],
                         "dracut-systemd": [boot(False)]}},
              {"name": "multipath, 2 paths", "append": "ro root=UUID=x", "disks": [],
               "boots": {"leanrd": [boot(True, 1.6, 4.6)], "dracut": [boot(False, None, 15.0)],
                         "dracut-checkers": [boot(False)]}}]
    images = {"leanrd": {"image_bytes": 34_000_000}, "dracut": {"image_bytes": 48_000_000},
              "dracut-checkers": {"image_bytes": 48_100_000}, "dracut-systemd": {"image_bytes": 49_000_000}}
    return saved("storage", {"kernel": "6.1.0-1-amd64", "runs": 3, "images": images, "stacks": stacks},
                 peers={"dracut": "059-4", "nbd-client": None})


def verity_results():
    def boot(ok, mounted=None, init=None, phase=None):
        return {"ok": ok, "root_mounted_s": mounted, "root_init_s": init, "initramfs_s": phase}
    return saved("verity", {"kernel": "6.12.1-amd64", "runs": 3, "append": "root=/dev/mapper/root roothash=00",
                            "images": {"leanrd": {"image_bytes": 26_000_000}, "dracut": {"image_bytes": 39_500_000}},
                            "boots": {"leanrd": [boot(True, 3.8, 3.9, 0.9), boot(True, 3.6, 3.7, 0.8)],
                                      "dracut": [boot(True, 19.3, 22.2, 18.2), boot(False)]}},
                 peers={"dracut": "106-6", "systemd": "257.9-1"})


class Tables(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="leanrd-tables-")
        self.results = os.path.join(self.dir.name, "results")
        os.makedirs(self.results)
        self.saved = (tables.RESULTS, tables.README, tables.ROOT)
        tables.RESULTS, tables.README, tables.ROOT = self.results, os.path.join(self.dir.name, "README.md"), self.dir.name

    def tearDown(self):
        tables.RESULTS, tables.README, tables.ROOT = self.saved
        self.dir.cleanup()

    def put(self, name, data):
        m = tables.NAME.match(name)
        date, commit = m.group("date"), m.group("commit")
        data = dict(data, date=date, commit=commit if commit != "unknown" else "")
        with open(os.path.join(self.results, name), "w") as f:
            json.dump(data, f)

    def readme(self, text):
        with open(tables.README, "w") as f:
            f.write(text)

    def doc(self, name, text=None):
        """docs/NAME written with `text`; its text (None: read it)."""
        path = os.path.join(self.dir.name, "docs", name)
        if text is None:
            with open(path) as f:
                return f.read()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return text

    def run_main(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = tables.main(list(args))
        return rc, out.getvalue(), err.getvalue()

    def test_the_newest_results_file_is_rendered(self):
        self.put("proof-2026-01-02-abc1234.json", proof_results(10.0))
        self.put("proof-2026-03-01-def5678.json", proof_results(20.0))
        self.put("proof-2025-12-31-0123456.json", proof_results(30.0))
        got = tables.render_proof()
        self.assertIn("2026-03-01, commit def5678", got)
        self.assertIn("| host-only | 20.0 ms |", got)

    def test_an_unknown_commit_is_marked(self):
        self.put("proof-2026-01-02-unknown.json", proof_results(10.0))
        self.assertIn("commit unknown", tables.render_proof())

    def test_check_fails_with_a_diff_until_the_tables_are_written(self):
        self.put("proof-2026-01-02-abc1234.json", proof_results(10.0))
        self.readme("# x\n\n<!-- bench:proof -->\nold table\n<!-- /bench:proof -->\n\ntext after\n")
        rc, out, _ = self.run_main("--check")
        self.assertEqual(rc, 1)
        self.assertIn("-old table", out)
        self.assertIn("+| host-only | 10.0 ms |", out)
        rc, _, _ = self.run_main()
        self.assertEqual(rc, 0)
        rc, out, err = self.run_main("--check")
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("boot: not generated (no raw results)", out)
        with open(tables.README) as f:
            text = f.read()
        self.assertTrue(text.startswith("# x\n\n<!-- bench:proof -->\n_`python3 bench/proof.py --runs 1`"))
        self.assertTrue(text.endswith("<!-- /bench:proof -->\n\ntext after\n"))

    def test_results_without_markers_are_a_problem(self):
        self.put("proof-2026-01-02-abc1234.json", proof_results(10.0))
        self.readme("<!-- bench:boot -->\n<!-- /bench:boot -->\n")
        rc, out, err = self.run_main("--check")
        self.assertEqual(rc, 1)
        self.assertIn("proof: raw results in bench/results but no table: no <!-- bench:proof --> ... "
                      "<!-- /bench:proof --> markers in README.md", err)
        self.assertNotIn("boot", err)
        self.assertIn("boot: not generated (no raw results)", out)
        # Every file is named where none has the table.
        self.doc("guide.md", "# guide\n")
        _, _, err = self.run_main("--check")
        self.assertIn("markers in README.md, docs/guide.md", err)

    def test_a_table_in_docs_is_made_there_with_its_link_relative_to_it(self):
        name = "proof-2026-01-02-abc1234.json"
        self.put(name, proof_results(10.0))
        self.readme("# x\n\nSee docs/benchmarks.md.\n")
        self.doc("benchmarks.md", "# b\n\n<!-- bench:proof -->\nold table\n<!-- /bench:proof -->\n")
        self.doc("guide.md", "# guide\n")
        rc, out, err = self.run_main("--check")
        self.assertEqual(rc, 1)
        self.assertIn("--- docs/benchmarks.md\n", out)
        self.assertIn("-old table", out)
        self.assertIn("docs/benchmarks.md differs from what bench/results gives", err)
        self.assertNotIn("README.md differs", err)
        rc, out, _ = self.run_main()
        self.assertEqual(rc, 0)
        self.assertIn("docs/benchmarks.md: tables rewritten", out)
        got = self.doc("benchmarks.md")
        self.assertIn(f"raw results: [results/{name}](../results/{name})._", got)
        self.assertIn("| host-only | 10.0 ms |", got)
        self.assertEqual(self.doc("guide.md"), "# guide\n")
        self.assertEqual(self.run_main("--check")[0], 0)

    def test_a_marker_in_two_places_or_unknown_or_unclosed_is_a_problem(self):
        self.put("proof-2026-01-02-abc1234.json", proof_results(10.0))
        self.readme("<!-- bench:proof -->\n<!-- /bench:proof -->\n<!-- bench:nosuch -->\n<!-- /bench:nosuch -->\n")
        self.doc("benchmarks.md", "<!-- bench:proof -->\n<!-- /bench:proof -->\n<!-- bench:boot -->\nno end\n")
        rc, _, err = self.run_main("--check")
        self.assertEqual(rc, 1)
        self.assertIn("proof: marked in more than one place (README.md, docs/benchmarks.md): a table has one place",
                      err)
        self.assertIn("README.md marks a table tables.py does not know: nosuch", err)
        self.assertIn("docs/benchmarks.md: <!-- bench:boot --> has no <!-- /bench:boot --> after it", err)

    def test_a_marked_table_without_results_stays_as_written_until_they_appear(self):
        hand = ("<!-- bench:resume -->\n_written by hand_\n\n| boot | s |\n|---|---:|\n| cold boot | 6.50 s |\n"
                "<!-- /bench:resume -->\n")
        self.readme("# x\n\n" + hand + "\nafter\n")
        rc, out, err = self.run_main("--check")
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("resume: not generated (no raw results)", out)
        self.assertEqual(self.run_main()[0], 0)
        with open(tables.README) as f:
            self.assertEqual(f.read(), "# x\n\n" + hand + "\nafter\n")
        self.put("resume-2026-01-02-abc1234.json", resume_results())
        rc, out, _ = self.run_main("--check")
        self.assertEqual(rc, 1)
        self.assertIn("-| cold boot | 6.50 s |", out)
        self.assertEqual(self.run_main()[0], 0)
        self.assertEqual(self.run_main("--check")[0], 0)
        with open(tables.README) as f:
            text = f.read()
        self.assertIn("<!-- bench:resume -->\n_`python3 bench/resume.py --runs 3`, 2026-01-02", text)
        self.assertNotIn("written by hand", text)

    def test_results_no_renderer_takes_are_a_problem(self):
        saved = tables.TABLES
        tables.TABLES = dict(saved, uki=None)
        try:
            with open(os.path.join(self.results, "uki-2026-01-02-abc1234.json"), "w") as f:
                json.dump({"date": "2026-01-02"}, f)
            self.readme("")
            rc, _, err = self.run_main("--check")
        finally:
            tables.TABLES = saved
        self.assertEqual(rc, 1)
        self.assertIn("uki: raw results in bench/results but tables.py cannot render them yet", err)

    def test_every_table_has_a_renderer(self):
        self.assertEqual([n for n, r in tables.TABLES.items() if r is None], [])

    # The renderers of the benches that had none, each on results shaped as its script saves them.

    def provenance(self, bench, name, what):
        return (f"_`python3 bench/{bench}.py --runs 3`, {name[len(bench) + 1:len(bench) + 11]}, commit abc1234, "
                f"2 cores{what}; raw results: [results/{name}](results/{name})._")

    def test_resume(self):
        name = "resume-2026-01-02-abc1234.json"
        self.put(name, resume_results())
        got = tables.render_resume()
        self.assertTrue(got.startswith(self.provenance(
            "resume", name, ", kernel 6.1.0-1-amd64, QEMU TCG -m 512, medians of 3") + "\n"), got)
        self.assertIn("| cold boot | 6.50 s | 2.60 s | – |", got)
        self.assertIn("| resume | 7.17 s | 2.61 s | 87,540 KiB in 0.66 s |", got)
        self.assertIn("Not reached (left out of the medians): resumes 1 of 3.", got)

    def test_luks(self):
        name = "luks-2026-01-02-abc1234.json"
        self.put(name, luks_results(boot=True))
        got = tables.render_luks()
        self.assertTrue(got.startswith(self.provenance("luks", name, ", kernel 6.1.0-1-amd64, medians of 3") + "\n"))
        self.assertIn("| root on LUKS, crypttab, KEYMAP=de | 0.187 s | 5,896 KB | 107 |", got)
        self.assertIn("LUKS + keymap against the plain root: 5,140 KB more (7.8× the size), build 4.8× the time.", got)
        self.assertIn("| the same machine, root not encrypted | 0.039 s | 756 KB | 46 |", got)
        self.assertIn("| initramfs-tools, MODULES=most, cryptsetup-initramfs | 18.88 s | 33.1 MB | 1.51× |", got)
        self.assertIn("| leanrd --universal (+ KEYMAP=de) | 0.44 s | 21.9 MB | 1.00× |", got)
        self.assertIn("| `host_keyfile` | – | 2.55 s |", got)
        self.assertIn("| `universal_ps2_de` | 1.07 s | 3.10 s |", got)
        self.put("luks-2026-01-03-abc1234.json", luks_results(boot=False))
        self.assertIn("Boot not measured in this run (`--no-boot`).", tables.render_luks())

    def test_unlock(self):
        name = "unlock-2026-01-02-abc1234.json"
        self.put(name, unlock_results())
        got = tables.render_unlock()
        self.assertTrue(got.startswith(self.provenance(
            "unlock", name, ", kernel 6.1.0-1-amd64, QEMU TCG, medians of 3") + "\n"), got)
        self.assertIn("| leanrd --universal --include clevis | Tang | 6.20 s | 6.40 s | 6.60 s | 2/3 | 22,000,000 |", got)
        self.assertIn("| dracut + clevis-dracut, `rd.neednet=1 ip=dhcp` | Tang | 26.40 s | 28.60 s | 30.30 s | 1/1 | "
                      "49,800,000 |", got)
        self.assertIn("| the same initramfs-tools image, dropbear-initramfs: `cryptroot-unlock` | SSH | – | – | – | 0/1 | "
                      "40,600,000 |", got)
        self.assertIn("| + clevis (Tang) | 22,000,000 | +1,000,000 |", got)
        self.assertIn("| + clevis-initramfs + dropbear-initramfs | 40,600,000 | +7,600,000 |", got)
        self.assertIn("Peers: dracut: dracut 059-4, clevis-dracut 19-2.", got)
        bad = unlock_results()
        bad["boots"].append({"flavour": "booster", "how": "tang"})
        self.put("unlock-2026-01-03-abc1234.json", bad)
        with self.assertRaises(SystemExit):
            tables.render_unlock()

    def test_shutdown(self):
        name = "shutdown-2026-01-02-abc1234.json"
        self.put(name, shutdown_results())
        got = tables.render_shutdown()
        self.assertTrue(got.startswith(self.provenance(
            "shutdown", name, ", kernel 6.12.1-amd64, QEMU TCG -m 1024, medians of 3") + "\n"), got)
        self.assertIn("| leanrd --universal (its exitrd) | 5.20 s | 3.20 s | 2.00 s | 3/3 | 0 + 0 | 3/3 |", got)
        self.assertIn("| initramfs-tools, cryptsetup-initramfs (no exitrd) | 4.20 s | 2.20 s | 2.00 s | 0/3 | 1 + 1, – | 3/3 |", got)
        self.assertIn("| dracut --add \"crypt shutdown\", as shipped | 6.00 s | 4.00 s | 2.00 s | 0/1 | 1 + 1 | 1/1 |", got)
        self.assertNotIn("forced", got)
        self.assertIn("Peers: dracut 106-6, systemd 257.9-1.", got)
        bad = shutdown_results()
        bad["variants"]["booster"] = {"boots": []}
        self.put("shutdown-2026-01-03-abc1234.json", bad)
        with self.assertRaises(SystemExit):
            tables.render_shutdown()

    def test_storage(self):
        name = "storage-2026-01-02-abc1234.json"
        self.put(name, storage_results())
        got = tables.render_storage()
        self.assertTrue(got.startswith(self.provenance(
            "storage", name, ", kernel 6.1.0-1-amd64, QEMU TCG, medians of 3 boots") + "\n"), got)
        self.assertIn("| LVM thin | 4.30 s | 7.30 s | 3/3 | 14.10 s | 17.10 s | 2/3 |", got)
        self.assertIn("| multipath, 2 paths | 1.60 s | 4.60 s | 1/1 | – | – | 0/1 |", got)
        self.assertIn("Images (one each, for every stack): leanrd 34,000,000 bytes, dracut 48,000,000 bytes.", got)
        self.assertIn("(not booted again): dracut: multipath, 2 paths.", got)
        self.assertIn("`--include /usr/lib/multipath`), 48,100,000 bytes: multipath, 2 paths booted 0/1.", got)
        self.assertIn("dracut with its systemd modules, 49,000,000 bytes: LVM thin booted 0/1.", got)
        self.assertIn("Peers: dracut 059-4.", got)
        bad = storage_results()
        bad["images"]["booster"] = {"image_bytes": 1}
        self.put("storage-2026-01-03-abc1234.json", bad)
        with self.assertRaises(SystemExit):
            tables.render_storage()

    def test_verity(self):
        name = "verity-2026-01-02-abc1234.json"
        self.put(name, verity_results())
        got = tables.render_verity()
        self.assertTrue(got.startswith(self.provenance(
            "verity", name, ", kernel 6.12.1-amd64, QEMU TCG, medians of 3 boots") + "\n"), got)
        self.assertIn("| leanrd `--universal` | 26,000,000 | 3.70 s | 3.80 s | 0.85 s | 2/2 |", got)
        self.assertIn("| dracut `--add systemd-veritysetup` | 39,500,000 | 19.30 s | 22.20 s | 18.20 s | 1/2 |", got)
        self.assertIn("Peers: dracut 106-6, systemd 257.9-1.", got)

    def test_gpu_firmware(self):
        name = "gpu_firmware-2026-01-02-abc1234.json"
        self.put(name, gpu_firmware_results())
        got = tables.render_gpu_firmware()
        self.assertTrue(got.startswith(self.provenance("gpu_firmware", name, ", kernel 6.12.1-amd64") + "\n"), got)
        self.assertIn("| Navi 21 | `1002:73bf` | amdgpu | 12 files, 2.77 MB | 625 files, 81.54 MB | 3.4 % |", got)
        self.assertIn("| A card | `1002:ffff` | amdgpu | not in the table: all | 625 files, 81.54 MB | 100.0 % |", got)
        self.assertIn("Firmware: firmware-amd-graphics 20250410-2.", got)

    def test_uki(self):
        name = "uki-2026-01-02-abc1234.json"
        self.put(name, uki_results())
        got = tables.render_uki()
        self.assertTrue(got.startswith(self.provenance(
            "uki", name, ", kernel 6.1.0-1-amd64, medians of 3, alternating") + "\n"))
        self.assertIn("| `leanrd build --universal --uki` | 0.33 s | 31.3 MB | 11.54 s | 4.15 s |", got)
        self.assertIn("| `dracut --no-hostonly --uefi --zstd` | 18.68 s | 42.7 MB | 24.14 s | 16.07 s |", got)
        self.assertIn("Boots that did not reach the root's init (left out of the medians): "
                      "`dracut --no-hostonly --uefi --zstd` 1 of 3.", got)
        self.assertIn("leanrd is 57× faster to build its UKI.", got)
        self.assertIn("On loop XFS (sysroot on the same file system): the zstd UKI is 21.0 MB of which 12.79 MB "
                      "exclusive, built in 0.21 s; the reflinked one (`--compress none`) is 60.7 MB of which "
                      "1.59 MB exclusive, built in 0.32 s.", got)

    def test_seeds_table(self):
        name = "seeds_table-2026-01-02-abc1234.json"
        self.put(name, seeds_results())
        got = tables.render_seeds_table()
        self.assertTrue(got.startswith(self.provenance(
            "seeds_table", name, ", kernel 6.1.0-1-amd64, build runtime median of 3") + "\n"))
        # The README's hand-written XFS host-only table, from its rounded figures (so the
        # runtimes' percentages and ratio differ a little).
        self.assertIn("""XFS host-only | leanrd xz | leanrd zstd | leanrd reflink
---|---:|---:|---:
leanrd runtime | 1.457s (ref) | 0.072s (-95.06%) | 0.040s (-97.25%)
QEMU boot time: kernel to /init | 3344.9ms (ref) | 2092.9ms (-37.43%) | 2387.5ms (-28.62%)
total bytes | 548864 (ref) | 753664 (+37.31%) | 2990080 (+444.78%)
shared (deduplicated) | 0 (ref) | 0 | 2924544
exclusive | 548864 (ref) | 753664 (+37.31%) | 65536 (-88.06%)

reflink exclusive / xz image: 11.9 %; reflink build / zstd build: 0.56""", got)
        self.assertIn("QEMU boot time: kernel to /init | 2399.9ms (ref) | – | 2032.2ms (-15.32%)", got)
        self.assertTrue(got.endswith("Targets: reflink build faster than zstd: met (0.56–0.80×). Reflink exclusive "
                                     "bytes ≤ 10 % of the xz image: not met (11.9 % host-only)."), got)

    def test_timeline(self):
        name = "timeline-2026-01-02-abc1234.json"
        self.put(name, timeline_results())
        got = tables.render_timeline()
        self.assertTrue(got.startswith(self.provenance(
            "timeline", name, ", kernel 6.1.0-1-amd64, `leanrd analyze` of each boot, median of 3") + "\n"))
        self.assertIn("| leanrd host-only | 1.64 s | 0.49 s | 11 (0.40 s) | 14.31 s | 16.43 s |", got)
        self.assertIn("| initramfs-tools MODULES=dep | 2.37 s | 5.27 s | not logged | 15.37 s | 22.84 s |", got)
        self.assertIn("Boots analysed (the others did not reach running or were not analysed): "
                      "initramfs-tools MODULES=dep 2 of 3.", got)

    def test_debian_bookworm_is_its_suite_s_newest(self):
        def debian(suite, multi_user):
            boots = [{"running": True, "multi_user_s": multi_user, "initramfs_s": 0.9}]
            return {"bench": "debian", "command": f"python3 bench/debian.py --suite {suite} --runs 1",
                    "host": {"cores": 2}, "suite": suite, "kernel": "6.1.0-1-amd64", "runs": 1,
                    "variants": {"leanrd host-only": {"build_s": [0.5], "image_bytes": 761754, "boots": boots}}}
        self.put("debian-2026-01-02-abc1234.json", debian("bookworm", 14.5))
        self.put("debian-2026-01-03-abc1234.json", debian("trixie", 19.8))
        got = tables.render_debian("bookworm")
        self.assertIn("2026-01-02, commit abc1234", got)
        self.assertIn("| leanrd host-only (in the VM) | 0.50 | – | 761,754 | 14.50 | 0.90 | 1/1 |", got)


if __name__ == "__main__":
    unittest.main()
