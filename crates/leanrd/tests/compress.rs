//! Compression through the CLI: round trips through the reference tools, images made by
//! those tools, multi-segment images, framing problems `check` must report, and
//! reproducibility across thread counts.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const FORMATS: [&str; 7] = ["zstd", "xz", "lz4", "gzip", "bzip2", "lzma", "lzo"];

/// The reference decompressor for a format, if installed.
fn reference_decompress(format: &str) -> Option<Vec<&'static str>> {
    let (tool, args): (&str, Vec<&str>) = match format {
        "zstd" => ("zstd", vec!["zstd", "-dc"]),
        "xz" => ("xz", vec!["xz", "-dc"]),
        "lzma" => ("xz", vec!["xz", "--format=lzma", "-dc"]),
        "lz4" => ("lz4", vec!["lz4", "-dc"]),
        "gzip" => ("gzip", vec!["gzip", "-dc"]),
        "bzip2" => ("bzip2", vec!["bzip2", "-dc"]),
        "lzo" => ("lzop", vec!["lzop", "-dc"]),
        _ => return None,
    };
    have(tool).then_some(args)
}

fn tree(t: &TempDir) -> PathBuf {
    let root = t.join("tree");
    fs::create_dir_all(root.join("lib/modules")).unwrap();
    for i in 0..40u64 {
        // Half compressible text, half noise, some files bigger than one lz4/gzip chunk.
        let mut data = format!("module {i} ").repeat(2000 + i as usize * 50).into_bytes();
        data.extend(noise(i, 3000 * i as usize));
        fs::write(root.join(format!("lib/modules/m{i}.ko")), data).unwrap();
    }
    fs::write(root.join("big"), noise(99, 9 << 20)).unwrap();
    std::os::unix::fs::symlink("lib", root.join("lib64")).unwrap();
    root
}

fn cpio(root: &Path, out: &Path, args: &[&str]) {
    ok(leanrd().args(["cpio", "--root"]).arg(root).arg("-o").arg(out).args(args));
}

fn ls(img: &Path) -> Vec<serde_json::Value> {
    String::from_utf8(ok(leanrd().args(["ls", "--json"]).arg(img)))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Entry identities, without where they sit.
fn idents(v: &[serde_json::Value]) -> Vec<String> {
    v.iter().map(|e| format!("{} {} {} {}", e["name"], e["mode"], e["size"], e["ino"])).collect()
}

#[test]
fn every_format_round_trips_through_leanrd_and_the_reference_tools() {
    let t = TempDir::new("cz");
    let root = tree(&t);
    let raw = t.join("raw.cpio");
    cpio(&root, &raw, &[]);
    let raw_bytes = fs::read(&raw).unwrap();
    let want = idents(&ls(&raw));
    for f in FORMATS {
        let img = t.join(format!("img.{f}"));
        cpio(&root, &img, &["--compress", f]);
        let got = ls(&img);
        assert_eq!(idents(&got), want, "{f}");
        assert!(got.iter().all(|e| e["compression"] == f && e["data_offset"].is_null()), "{f}");
        ok(leanrd().arg("check").arg(&img));
        let out = t.join(format!("x-{f}"));
        ok(leanrd().arg("extract").arg(&img).arg("-C").arg(&out));
        assert_same_tree(&describe(&out), &describe(&root), f);
        if let Some(args) = reference_decompress(f) {
            let o = Command::new(args[0]).args(&args[1..]).stdin(fs::File::open(&img).unwrap()).output().unwrap();
            assert!(o.status.success(), "{f}: {}", String::from_utf8_lossy(&o.stderr));
            assert!(o.stdout == raw_bytes, "{f}: the reference tool's output differs from the plain archive");
        } else {
            eprintln!("note: no reference tool for {f}");
        }
    }
}

#[test]
fn images_made_by_the_reference_tools_are_read() {
    let t = TempDir::new("cref");
    let root = tree(&t);
    let raw = t.join("raw.cpio");
    cpio(&root, &raw, &[]);
    let want = idents(&ls(&raw));
    let cases: [(&str, &str, bool); 9] = [
        ("zstd", "zstd -q -c -19", true),
        ("xz", "xz -c --check=crc32", true),
        ("lz4", "lz4 -q -l -c", true),
        ("gzip", "gzip -c", true),
        ("bzip2", "bzip2 -c", true),
        ("xz", "xz --format=lzma -c", true),
        ("lzop", "lzop -c", true),
        // Framings the kernel rejects: check must say so.
        ("xz", "xz -c --check=crc64", false),
        ("xz", "xz -c --check=crc32 --x86 --lzma2", false),
    ];
    for (tool, cmd, kernel_ok) in cases {
        if !have(tool) {
            skip::<()>(&format!("{cmd}: {tool} missing"));
            continue;
        }
        let img = t.join("ref.img");
        let st = Command::new("sh")
            .arg("-c")
            .arg(format!("{cmd} < {} > {}", raw.display(), img.display()))
            .status()
            .unwrap();
        assert!(st.success(), "{cmd}");
        assert_eq!(idents(&ls(&img)), want, "{cmd}");
        let o = leanrd().arg("check").arg(&img).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.success(), kernel_ok, "{cmd}: {text}");
        if cmd.contains("crc64") {
            assert!(text.contains("CRC64"), "{text}");
        }
        if cmd.contains("--x86") {
            assert!(text.contains("BCJ x86"), "{text}");
        }
    }
    if have("lz4") {
        // The modern lz4 frame: the kernel does not know it.
        let img = t.join("frame.img");
        let st = Command::new("sh")
            .arg("-c")
            .arg(format!("lz4 -q -c < {} > {}", raw.display(), img.display()))
            .status()
            .unwrap();
        assert!(st.success());
        let o = leanrd().arg("check").arg(&img).output().unwrap();
        assert!(!o.status.success());
        assert!(String::from_utf8_lossy(&o.stdout).contains("legacy format"), "{}", String::from_utf8_lossy(&o.stdout));
    }
}

#[test]
fn multi_segment_images() {
    let t = TempDir::new("cseg");
    let root = tree(&t);
    let raw = t.join("raw.cpio");
    cpio(&root, &raw, &[]);
    let main_idents = idents(&ls(&raw));
    let early = t.join("early");
    fs::create_dir_all(early.join("kernel/x86/microcode")).unwrap();
    fs::write(early.join("kernel/x86/microcode/GenuineIntel.bin"), noise(5, 5000)).unwrap();
    let img = t.join("multi.img");
    cpio(&early, &img, &[]);
    let mut want = idents(&ls(&img));
    for f in ["lz4", "zstd", "none", "gzip", "lz4"] {
        cpio(&root, &img, &["--append", "--compress", f, "--data-align", "4096"]);
        want.extend(main_idents.iter().cloned());
    }
    let got = ls(&img);
    // Fillers may repeat a directory in the aligned uncompressed segment; compare without them.
    let mut seen = std::collections::HashSet::new();
    let firsts: Vec<serde_json::Value> =
        got.iter().filter(|e| seen.insert((e["segment"].clone(), e["name"].clone()))).cloned().collect();
    assert_eq!(idents(&firsts), want);
    assert_eq!(got.iter().map(|e| e["segment"].as_u64().unwrap()).max(), Some(5));
    // The uncompressed segment after compressed ones starts 4-aligned with its data aligned.
    for e in got.iter().filter(|e| e["segment"] == 3 && e["type"] == "file" && e["size"].as_u64().unwrap() >= 4096) {
        assert_eq!(e["data_offset"].as_u64().unwrap() % 4096, 0, "{e}");
    }
    let o = String::from_utf8(ok(leanrd().arg("check").arg(&img))).unwrap();
    assert!(o.contains("6 segments"), "{o}");

    // lz4 followed by another segment without four zero bytes between: the kernel reads
    // the next segment's first bytes as an lz4 chunk size and loses the rest.
    let a = t.join("a.lz4");
    cpio(&early, &a, &["--compress", "lz4"]);
    let mut bytes = fs::read(&a).unwrap();
    bytes.resize(bytes.len().next_multiple_of(4), 0);
    let plain = t.join("p.cpio");
    cpio(&early, &plain, &[]);
    bytes.extend(fs::read(&plain).unwrap());
    let bad = t.join("bad.img");
    fs::write(&bad, &bytes).unwrap();
    let o = leanrd().arg("check").arg(&bad).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{text}");
    assert!(text.contains("zero padding"), "{text}");
}

#[test]
fn a_compressed_segment_must_end_on_an_entry_boundary() {
    let t = TempDir::new("ctrunc");
    let root = tree(&t);
    let raw = t.join("raw.cpio");
    cpio(&root, &raw, &[]);
    let bytes = fs::read(&raw).unwrap();
    // Cut the archive in the middle of an entry's data, then compress the piece.
    let cut = t.join("cut.cpio");
    fs::write(&cut, &bytes[..bytes.len() / 2 + 7]).unwrap();
    let img = t.join("cut.zst");
    let enc = leanrd_compress::compress_vec(
        leanrd_compress::Spec::new(leanrd_compress::Format::Zstd),
        1,
        &fs::read(&cut).unwrap(),
    )
    .unwrap();
    fs::write(&img, enc).unwrap();
    let o = leanrd().arg("check").arg(&img).output().unwrap();
    assert!(!o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("zstd segment at offset 0") && text.contains("offset"), "{text}");
}

#[test]
fn bad_compression_arguments_are_errors() {
    let t = TempDir::new("cargs");
    for bad in ["brotli", "zstd:99", "xz:x"] {
        let o = leanrd().args(["cpio", "--root"]).arg(t.path()).args(["--compress", bad]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("compress"), "{bad}");
    }
}

#[test]
fn advise_measures_and_recommends_the_fastest_to_load() {
    let t = TempDir::new("cadvise");
    let root = tree(&t);
    let o = ok(leanrd()
        .args(["advise", "--json", "--runs", "1", "--candidates", "none,lz4,zstd:3,gzip:6,xz:1", "--on"])
        .arg(t.path())
        .arg(&root));
    let v: serde_json::Value = serde_json::from_slice(&o).unwrap();
    let c = v["candidates"].as_array().unwrap();
    assert_eq!(c.len(), 5);
    let loads: Vec<f64> = c.iter().map(|r| r["load_ms"].as_f64().unwrap()).collect();
    assert!(loads.windows(2).all(|w| w[0] <= w[1]), "not sorted by load time: {loads:?}");
    assert_eq!(v["recommended"], c[0]["candidate"]);
    let none = c.iter().find(|r| r["format"] == "none").unwrap();
    assert_eq!(none["size"], v["uncompressed"]);
    let xz = c.iter().find(|r| r["format"] == "xz").unwrap();
    assert!(xz["size"].as_u64() < none["size"].as_u64());
    assert!(v["reason"].as_str().unwrap().contains(v["recommended"].as_str().unwrap()));
    // Nothing is left behind in the measuring directory but the tree.
    let left: Vec<_> = fs::read_dir(t.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("tree")]);
    // An image works as input too.
    let img = t.join("img");
    cpio(&root, &img, &["--compress", "zstd"]);
    let o = ok(leanrd()
        .args(["advise", "--json", "--runs", "1", "--candidates", "none,lz4", "--on"])
        .arg(t.path())
        .arg(&img));
    let v2: serde_json::Value = serde_json::from_slice(&o).unwrap();
    assert_eq!(v2["uncompressed"], v["uncompressed"]);
}

/// An image of compressed modules: advise also weighs the module strategies, the kernel
/// decompressing each module at boot against the image holding them decompressed.
#[test]
fn advise_weighs_the_module_strategies() {
    let t = TempDir::new("cadvise-ko");
    let root = t.join("tree");
    fs::create_dir_all(root.join("lib/modules/k/kernel")).unwrap();
    for i in 0..12u64 {
        let mut data = format!("module {i} ").repeat(4000).into_bytes();
        data.extend(noise(i, 20_000));
        let xz = leanrd_compress::compress_vec("xz:6".parse().unwrap(), 1, &data).unwrap();
        fs::write(root.join(format!("lib/modules/k/kernel/m{i}.ko.xz")), xz).unwrap();
    }
    let o = ok(leanrd()
        .args(["advise", "--json", "--runs", "1", "--candidates", "zstd:3", "--on"])
        .arg(t.path())
        .arg(&root));
    let v: serde_json::Value = serde_json::from_slice(&o).unwrap();
    let m = &v["module_strategies"];
    assert_eq!(m["modules"], 12, "{v}");
    assert!(m["keep"]["kernel_decompress_ms"].as_f64().unwrap() > 0.0, "{m}");
    assert!(m["decompress"]["uncompressed"].as_u64().unwrap() > v["uncompressed"].as_u64().unwrap(), "{m}");
    assert!(["keep", "decompress"].contains(&m["recommended"].as_str().unwrap()), "{m}");
    let text = String::from_utf8(ok(leanrd()
        .args(["advise", "--runs", "1", "--candidates", "zstd:3", "--on"])
        .arg(t.path())
        .arg(&root)))
    .unwrap();
    assert!(
        text.contains("module strategies (--module-compression)") && text.contains("12 modules one at a time"),
        "{text}"
    );
    // Without compressed modules there is nothing to weigh.
    let plain = t.join("plain");
    fs::create_dir_all(&plain).unwrap();
    fs::write(plain.join("a.ko"), b"\x7fELF").unwrap();
    let o =
        ok(leanrd().args(["advise", "--json", "--runs", "1", "--candidates", "lz4", "--on"]).arg(t.path()).arg(&plain));
    let v: serde_json::Value = serde_json::from_slice(&o).unwrap();
    assert!(v["module_strategies"].is_null(), "{v}");
}
