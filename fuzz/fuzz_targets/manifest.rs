//! gen_init_cpio manifests (`leanrd cpio MANIFEST`; crates/archive/src/manifest.rs).
//!
//! Holds to:
//! - nothing panics; an error names the manifest and a line that exists;
//! - what parses is written (`Layout::plan`, `write_stream`, plain and with 070702 checksums
//!   and data alignment) and read back by the reader: the same names, in order, and nothing
//!   `check` reports but parents missing from the manifest (which gen_init_cpio allows);
//! - what parses prints (`manifest::print`) as a manifest that parses to the same entries,
//!   and prints the same again — when its names and targets are text (print writes text).

#![no_main]

use std::fs;
use std::io::Read;
use std::path::PathBuf;
use std::sync::OnceLock;

use leanrd_archive::Checker;
use leanrd_archive::{Data, Entry};
use leanrd_archive::layout::{self, Layout};
use leanrd_archive::read::{ReadEntry, Visitor, read_image};
use leanrd_archive::{Normalize, manifest};
use libfuzzer_sys::fuzz_target;

/// The file `${FILE}` names: some bytes, a fixed mtime.
fn file() -> &'static str {
    static F: OnceLock<String> = OnceLock::new();
    F.get_or_init(|| {
        let p: PathBuf = leanrd_fuzz::scratch().join("file");
        fs::write(&p, b"the data of a file in a manifest\n").unwrap();
        let t = fs::File::options().write(true).open(&p).unwrap();
        t.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000)).unwrap();
        p.display().to_string()
    })
}

struct Names(Vec<Vec<u8>>, Checker);
impl Visitor for Names {
    fn entry(&mut self, e: &ReadEntry, data: &mut dyn Read) -> leanrd_archive::Result<()> {
        self.0.push(e.name.clone());
        self.1.entry(e, data)
    }
    fn segment(&mut self, s: &leanrd_archive::read::Segment) -> leanrd_archive::Result<()> {
        self.1.segment(s)
    }
    fn problem(&mut self, p: &leanrd_archive::read::Problem) -> leanrd_archive::Result<()> {
        self.1.problem(p)
    }
}

fn text_only(entries: &[Entry]) -> bool {
    entries.iter().all(|e| {
        std::str::from_utf8(&e.name).is_ok()
            && match &e.data {
                Data::Inline(t) => std::str::from_utf8(t).is_ok(),
                _ => true,
            }
    })
}

fuzz_target!(|data: &[u8]| {
    let norm = Normalize { first_ino: 1, ..Default::default() };
    let path = file();
    let lookup = |v: &str| (v == "FILE").then(|| path.to_string());
    let lines = data.split(|&b| b == b'\n').count();
    let entries = match manifest::parse(data, "m", &norm, &lookup) {
        Ok(e) => e,
        Err(e) => {
            assert_eq!(e.file, "m");
            assert!((1..=lines).contains(&e.line), "error on line {} of {lines}: {e}", e.line);
            return;
        }
    };
    let names: Vec<Vec<u8>> = entries.iter().map(|e| e.name.to_vec()).collect();

    // Written and read back, plain and with checksums and alignment.
    for options in [layout::Options::default(), layout::Options { data_align: Some(16), checksum: true, base: 0 }] {
        let l = Layout::plan(entries.clone(), options).expect("a parsed manifest is writable");
        let mut v = Vec::new();
        leanrd_archive::write::write_stream(&l, &mut v).expect("write");
        let mut r = Names(Vec::new(), Checker::new());
        read_image(&v[..], &mut r).expect("what the writer wrote reads back");
        // The manifest's names in order; alignment may add fillers between them, each naming
        // the root or repeating a directory written before.
        let mut want = names.iter().peekable();
        for n in &r.0 {
            if want.peek() == Some(&n) {
                want.next();
            } else {
                let dir = entries.iter().any(|e| *e.name == **n && e.kind() == Some(leanrd_newc::FileKind::Dir));
                assert!(n == b"." || dir, "the writer wrote {:?}, which the manifest does not have there", n);
            }
        }
        assert!(want.peek().is_none(), "names of the manifest missing in what was written");
        if options.data_align.is_none() {
            assert_eq!(r.0, names, "the names read back are not the manifest's");
        }
        let real: Vec<&String> =
            r.1.problems
                .iter()
                .filter(|p| !p.contains("is not in the archive") && !p.contains("which was not created"))
                .collect();
        assert!(real.is_empty(), "check reports what the manifest parser accepted: {real:?}");
    }

    // Printed and parsed back.
    if text_only(&entries) {
        let printed = manifest::print(&entries);
        let back = manifest::parse(printed.as_bytes(), "printed", &norm, &lookup)
            .unwrap_or_else(|e| panic!("print's manifest does not parse: {e}\n{printed}"));
        assert_eq!(back, entries, "print's manifest parses to other entries:\n{printed}");
        assert_eq!(manifest::print(&back), printed);
    }
});
