//! Fuzzing as part of `cargo test`: the checked-in regression corpus (tests/corpus), then a
//! bounded number of structure-aware mutations of it and of archives the writer makes, fed to
//! the reader, `check`, `extract` and the manifest parser. Nothing may panic or hang, and
//! extraction may never create or change anything outside its target directory.
//!
//! `LEANRD_FUZZ_CASES=N` runs N mutations per target instead of the default (a few seconds'
//! worth); `LEANRD_FUZZ_SEED` changes the sequence.

use std::fs;
use std::io::Read;
use std::path::Path;

use leanrd_archive::Checker;
use leanrd_archive::Extractor;
use leanrd_archive::layout::{self, Layout};
use leanrd_archive::read::{ReadEntry, Visitor, read_image};
use leanrd_archive::{Normalize, image, manifest};
use leanrd_compress::{Format, Spec};

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut v: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), fs::read(e.path()).unwrap()))
        .collect();
    v.sort();
    v
}

fn cases(default: usize) -> usize {
    std::env::var("LEANRD_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Rng(u64);

impl Rng {
    fn new(salt: u64) -> Rng {
        let seed = std::env::var("LEANRD_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed);
        Rng((seed ^ salt).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next() % n as u64) as usize }
    }
}

/// One mutation of `b`, aware of newc headers: flips, cuts, zero runs, a header field set to
/// a chosen value (the sizes and modes that matter), a splice of another input.
fn mutate(rng: &mut Rng, b: &mut Vec<u8>, other: &[u8]) {
    if b.is_empty() {
        b.extend_from_slice(other);
        return;
    }
    match rng.below(7) {
        0 => {
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
        }
        1 => b.truncate(rng.below(b.len())),
        2 => {
            let i = rng.below(b.len());
            let n = rng.below(300).min(b.len() - i);
            b[i..i + n].fill(0);
        }
        3 | 4 => {
            // A header field: find a magic, pick one of the 13 fields, write a value.
            let starts: Vec<usize> =
                b.windows(6).enumerate().filter(|(_, w)| w.starts_with(b"07070")).map(|(i, _)| i).collect();
            if starts.is_empty() {
                return;
            }
            let at = starts[rng.below(starts.len())] + 6 + 8 * rng.below(13);
            let values = [
                0u64,
                1,
                2,
                3,
                4095,
                4096,
                4097,
                0xffff_ffff,
                0o040777,
                0o120777,
                0o100644,
                0o020644,
                0o010644,
                0o006777,
                rng.next() & 0xffff_ffff,
            ];
            let v = values[rng.below(values.len())];
            let text = format!("{v:08X}");
            if at + 8 <= b.len() {
                b[at..at + 8].copy_from_slice(text.as_bytes());
            }
        }
        5 => {
            // Splice: a prefix of this, then a suffix of the other.
            let i = rng.below(b.len());
            let j = rng.below(other.len());
            b.truncate(i);
            b.extend_from_slice(&other[j..]);
        }
        _ => {
            // Duplicate a slice (entries repeated, names shadowed).
            let i = rng.below(b.len());
            let n = rng.below(600).min(b.len() - i);
            let s = b[i..i + n].to_vec();
            let at = rng.below(b.len());
            b.splice(at..at, s);
        }
    }
}

/// Lists everything (reads all data), as `ls` does.
struct Lister(usize);
impl Visitor for Lister {
    fn entry(&mut self, _e: &ReadEntry, data: &mut dyn Read) -> leanrd_archive::Result<()> {
        let mut sink = Vec::new();
        data.read_to_end(&mut sink)?;
        self.0 += 1;
        Ok(())
    }
}

/// Run every reader target on `img`; extract into a fresh directory when `extract`, and
/// check nothing appeared beside it.
fn run_reader(img: &[u8], extract: bool, scratch: &Path, what: &str) {
    let r = std::panic::catch_unwind(|| {
        let mut c = Checker::new();
        let _ = read_image(img, &mut c);
        let _ = read_image(img, &mut Lister(0));
    });
    assert!(r.is_ok(), "{what}: the reader panicked");
    if extract {
        let target = scratch.join("t/x");
        let _ = fs::remove_dir_all(scratch.join("t"));
        let r = std::panic::catch_unwind(|| {
            let mut x = Extractor::new(&target).unwrap();
            let _ = read_image(img, &mut x);
            x.finish();
        });
        assert!(r.is_ok(), "{what}: extract panicked");
        let beside: Vec<_> = fs::read_dir(scratch.join("t")).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(beside.len(), 1, "{what}: extract made {beside:?} outside its target");
    }
}

/// Archives the writer makes: one per compression, from a small manifest.
fn written(scratch: &Path) -> Vec<Vec<u8>> {
    let f = scratch.join("data");
    fs::write(&f, vec![0x5a; 9000]).unwrap();
    let text = format!(
        "dir /d 755 0 0\nfile /d/f {} 644 0 0 /d/h\nslink /d/l f 777 0 0\nnod /d/c 600 0 0 c 1 3\npipe /p 644 0 0\n",
        f.display()
    );
    let norm = Normalize { first_ino: 1, ..Default::default() };
    let mut out = Vec::new();
    for (format, align, crc) in [
        (Format::None, None, false),
        (Format::None, Some(4096), false),
        (Format::None, None, true),
        (Format::Zstd, None, false),
        (Format::Gzip, None, false),
        (Format::Xz, None, false),
        (Format::Lz4, None, false),
        (Format::Lzo, None, false),
    ] {
        let entries = manifest::parse(text.as_bytes(), "m", &norm, &|_| None).unwrap();
        let l = Layout::plan(entries, layout::Options { data_align: align, checksum: crc, base: 0 }).unwrap();
        let mut v = Vec::new();
        image::write_compressed(&l, Spec::new(format), 1, &mut v).unwrap();
        out.push(v);
    }
    out
}

#[test]
fn regressions() {
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("file");
    fs::write(&file, b"x").unwrap();
    let norm = Normalize { first_ino: 1, ..Default::default() };
    let lookup = |v: &str| (v == "FILE").then(|| file.display().to_string());
    // Archives the kernel unpacks as they say (a symlink replaced by a directory, a
    // directory by a symlink that later names go through): `check` passes them, and only
    // `extract` has to be careful. Every other one `check` must report.
    let kernel_fine = [
        "symlink-then-setuid-dir.cpio",
        "relative-symlink-then-dir.cpio",
        "dir-replaced-by-symlink.cpio",
        "absolute-name.cpio",
    ];
    for (name, bytes) in corpus() {
        if name.ends_with(".cpio") {
            run_reader(&bytes, true, scratch.path(), &name);
            let mut c = Checker::new();
            let r = read_image(&bytes[..], &mut c);
            let reported = r.is_err() || !c.problems.is_empty();
            assert_eq!(reported, !kernel_fine.contains(&name.as_str()), "{name}: {:?}", c.problems);
        } else if name.ends_with(".manifest") {
            let r = manifest::parse(&bytes, &name, &norm, &lookup);
            let ok = name.starts_with("not-utf8");
            match r {
                Ok(_) if ok => {}
                Err(e) if !ok => assert!(e.to_string().starts_with(&format!("{name}:")), "{name}: {e}"),
                other => panic!("{name}: {:?}", other.map(|e| e.len())),
            }
        }
    }
}

#[test]
fn mutated_archives_never_panic_or_escape() {
    let scratch = tempfile::tempdir().unwrap();
    let mut seeds: Vec<Vec<u8>> = corpus().into_iter().filter(|(n, _)| n.ends_with(".cpio")).map(|(_, b)| b).collect();
    seeds.extend(written(scratch.path()));
    let mut rng = Rng::new(1);
    for i in 0..cases(4000) {
        let mut b = seeds[rng.below(seeds.len())].clone();
        let other = seeds[rng.below(seeds.len())].clone();
        for _ in 0..1 + rng.below(3) {
            mutate(&mut rng, &mut b, &other);
        }
        // Extraction touches the file system: every 8th case.
        run_reader(&b, i % 8 == 0, scratch.path(), &format!("case {i}"));
    }
}

#[test]
fn mutated_manifests_never_panic_and_what_parses_is_written_and_read_back() {
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("file");
    fs::write(&file, b"contents").unwrap();
    let base = "dir /d 755 0 0\nfile /d/f ${FILE} 644 0 0 /d/h\nslink /d/l f 777 0 0\nnod /d/c 600 0 5 c 1 3\n\
                pipe /p 644 0 0\nsock /s 600 0 0\n# comment\n";
    let mut seeds: Vec<Vec<u8>> = vec![base.as_bytes().to_vec()];
    seeds.extend(corpus().into_iter().filter(|(n, _)| n.ends_with(".manifest")).map(|(_, b)| b));
    let tokens: [&[u8]; 14] = [
        b"/..",
        b"/.",
        b"/",
        b"\0",
        b"\xff",
        b" ",
        b"\n",
        b"777",
        b"99999999999",
        b"-1",
        b"${FILE}",
        b"${",
        b"file",
        b"c",
    ];
    let norm = Normalize { first_ino: 1, ..Default::default() };
    let lookup = |v: &str| (v == "FILE").then(|| file.display().to_string());
    let mut rng = Rng::new(2);
    let mut parsed = 0;
    for i in 0..cases(3000) {
        let mut b = seeds[rng.below(seeds.len())].clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(b.len() + 1);
            match rng.below(3) {
                0 => b.splice(at..at, tokens[rng.below(tokens.len())].iter().copied()).for_each(drop),
                1 => {
                    let n = rng.below(6).min(b.len() - at);
                    b.drain(at..at + n);
                }
                _ => {
                    if at < b.len() {
                        b[at] = rng.next() as u8;
                    }
                }
            }
        }
        let r = std::panic::catch_unwind(|| {
            let Ok(entries) = manifest::parse(&b, "m", &norm, &lookup) else { return false };
            let names: Vec<Vec<u8>> = entries.iter().map(|e| e.name.to_vec()).collect();
            // Whatever the parser accepts, the writer writes and the reader reads back.
            let l = Layout::plan(entries, layout::Options::default()).expect("a parsed manifest is writable");
            let mut v = Vec::new();
            leanrd_archive::write::write_stream(&l, &mut v).expect("write");
            let mut c = Checker::new();
            read_image(&v[..], &mut c).expect("read back");
            // The one thing the writer allows and the kernel does not do: a name whose parent
            // directory is not in the archive (gen_init_cpio accepts such manifests too).
            let real: Vec<_> = c
                .problems
                .iter()
                .filter(|p| !p.contains("is not in the archive") && !p.contains("which was not created"))
                .collect();
            assert!(real.is_empty(), "{real:?} {names:?}");
            assert_eq!(c.entries, names.len());
            true
        });
        match r {
            Ok(p) => parsed += p as usize,
            Err(_) => panic!("case {i}: {:?}", String::from_utf8_lossy(&b)),
        }
    }
    assert!(parsed > 0, "no mutated manifest parsed at all: the harness tests nothing");
}

/// Corrupted images (bytes flipped, cut, zeroed, in plain and compressed segments) give an
/// error or a listing, never a panic.
#[test]
fn corrupted_images_never_panic() {
    let scratch = tempfile::tempdir().unwrap();
    let images = written(scratch.path());
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut errors = 0;
    for (k, img) in images.iter().enumerate() {
        for round in 0..150 {
            let mut b = img.clone();
            match round % 4 {
                0 => {
                    for _ in 0..1 + next() % 8 {
                        let i = (next() as usize) % b.len();
                        b[i] ^= 1 << (next() % 8);
                    }
                }
                1 => b.truncate((next() as usize) % b.len()),
                2 => {
                    let i = (next() as usize) % b.len();
                    let n = ((next() as usize) % 200).min(b.len() - i);
                    b[i..i + n].fill(0);
                }
                _ => {
                    // Garbage in a header field: hex digits replaced by other bytes.
                    let i = (next() as usize) % b.len().min(4096);
                    b[i] = b"0123456789ABCDEFxyz\xff"[(next() % 20) as usize];
                }
            }
            let r = std::panic::catch_unwind(|| {
                let mut c = Checker::new();
                read_image(&b[..], &mut c).is_err() || !c.problems.is_empty()
            });
            match r {
                Ok(failed) => errors += failed as usize,
                Err(_) => panic!("image {k}, round {round}: the reader panicked"),
            }
        }
    }
    // Most mutations must be noticed.
    assert!(errors > 600, "only {errors} of 1200 corrupted images were reported");
}

/// Found by the archive fuzz target (tests/corpus/absolute-name.cpio): an entry named `/0f`.
/// The kernel unpacks it as `0f`, and `check` passed the image, but `extract` refused it
/// ("absolute name"). Both now take it as the kernel does, inside the target directory.
#[test]
fn an_absolute_name_is_extracted_where_the_kernel_puts_it() {
    let img = fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/absolute-name.cpio")).unwrap();
    let mut c = Checker::new();
    read_image(&img[..], &mut c).unwrap();
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    let scratch = tempfile::tempdir().unwrap();
    let target = scratch.path().join("x");
    let mut x = Extractor::new(&target).unwrap();
    let _ = read_image(&img[..], &mut x);
    x.finish();
    assert!(x.errors.is_empty(), "{:?}", x.errors);
    assert!(target.join("0f").exists(), "/0f not extracted as 0f");
    let beside: Vec<_> = fs::read_dir(scratch.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(beside, ["x"], "extract made {beside:?} outside its target");
}
