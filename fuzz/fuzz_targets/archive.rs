//! The archive reader on any bytes, as `leanrd ls`, `check` and `extract` read an image a user
//! hands them (crates/archive: read, check, extract; newc's `Header`).
//!
//! Holds to:
//! - nothing panics;
//! - every header read re-encodes to bytes that decode to the same header (newc `Header`);
//! - `ls` of the bytes as a file (data skipped by seeking, a UKI read through its `.initrd`
//!   window) lists exactly what `ls` of them as a stream lists (data read through), and fails
//!   exactly when it fails;
//! - `extract` into a fresh directory creates and changes nothing outside it: the directory it
//!   is in holds only it, and a file beside that directory keeps its contents, mtime and link
//!   count;
//! - `check` and `extract` agree: an image `check` refuses to read, `extract` refuses too
//!   (unless a checksum stopped it before); every problem the reader reports to `check` is an
//!   error of `extract`'s; and an image `check` passes, `extract` restores without an error but
//!   for the names it refuses on purpose (a later name through a symlink the archive made).

#![no_main]

use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;

use leanrd_archive::Checker;
use leanrd_archive::Extractor;
use leanrd_archive::read::{Problem, ReadEntry, Segment, SegmentEnd, Visitor, read_image, read_image_file};
use leanrd_newc::Header;
use libfuzzer_sys::fuzz_target;

/// Regular files' data above this (after decompression) is not extracted: the fuzzer's time
/// goes to parsing, not to writing files.
const EXTRACT_LIMIT: u64 = 16 << 20;
const EXTRACT_ENTRIES: usize = 2000;

/// What a listing records of an entry: everything the reader says about it.
type Listed = (usize, u64, Option<u64>, Vec<u8>, Header);

/// `ls`: every entry, reading its data through (`all`) or not at all (the file source seeks).
struct Lister {
    all: bool,
    entries: Vec<Listed>,
    problems: Vec<String>,
}

impl Visitor for Lister {
    fn entry(&mut self, e: &ReadEntry, data: &mut dyn Read) -> leanrd_archive::Result<()> {
        let h = e.header;
        assert_eq!(Header::decode(&h.encode()), Ok(h), "a header does not survive its encoding");
        self.entries.push((e.segment, e.stream_offset, e.data_offset, e.name.clone(), h));
        if self.all {
            let n = std::io::copy(data, &mut std::io::sink())?;
            assert!(n <= u64::from(h.filesize), "more data than the header declares");
        }
        Ok(())
    }
    fn problem(&mut self, p: &Problem) -> leanrd_archive::Result<()> {
        self.problems.push(p.to_string());
        Ok(())
    }
}

/// `check`, counting what an extraction would write.
struct Counted {
    c: Checker,
    bytes: u64,
    entries: usize,
    reader_problems: Vec<String>,
}

impl Visitor for Counted {
    fn segment(&mut self, s: &Segment) -> leanrd_archive::Result<()> {
        self.c.segment(s)
    }
    fn entry(&mut self, e: &ReadEntry, data: &mut dyn Read) -> leanrd_archive::Result<()> {
        self.entries += 1;
        self.bytes += u64::from(e.header.filesize);
        self.c.entry(e, data)
    }
    fn segment_end(&mut self, s: &SegmentEnd) -> leanrd_archive::Result<()> {
        self.c.segment_end(s)
    }
    fn problem(&mut self, p: &Problem) -> leanrd_archive::Result<()> {
        self.reader_problems.push(p.to_string());
        self.c.problem(p)
    }
}

fn ls_stream(data: &[u8]) -> (bool, Lister) {
    let mut l = Lister { all: true, entries: Vec::new(), problems: Vec::new() };
    let ok = read_image(data, &mut l).is_ok();
    (ok, l)
}

fn ls_file(data: &[u8]) -> (bool, Lister) {
    let f = leanrd_fuzz::memfile(data).try_clone().expect("dup");
    let mut l = Lister { all: false, entries: Vec::new(), problems: Vec::new() };
    let ok = read_image_file(f, &mut l).is_ok();
    (ok, l)
}

/// Whether an extraction error is one `extract` makes on purpose where the kernel would
/// follow a symlink the archive made (RESOLVE_BENEATH), or replace what a hard link needs.
fn refused_on_purpose(e: &str) -> bool {
    e.contains("cannot open beneath the target directory")
}

fuzz_target!(|data: &[u8]| {
    // newc headers on their own: what decodes, encodes back to the same bytes (hex case aside).
    if let Ok(b) = <&[u8; 110]>::try_from(data.get(..110).unwrap_or(&[]))
        && let Ok(h) = Header::decode(b)
    {
        assert_eq!(&h.encode()[..], &b.to_ascii_uppercase()[..]);
    }

    // `ls`, two ways.
    let (stream_ok, stream) = ls_stream(data);
    let (file_ok, file) = ls_file(data);
    let uki = leanrd_archive::uki::initrd_section(&data[..data.len().min(4096)]).is_some();
    if !uki {
        assert_eq!(stream_ok, file_ok, "ls of a stream and of a file disagree on the verdict");
        assert_eq!(stream.entries, file.entries, "ls of a stream and of a file list different entries");
        assert_eq!(stream.problems, file.problems);
    }

    // `check`.
    let mut c = Counted { c: Checker::new(), bytes: 0, entries: 0, reader_problems: Vec::new() };
    let check_ok = read_image(data, &mut c).is_ok();
    assert_eq!(check_ok, stream_ok, "check and ls disagree on whether the image reads");
    let passes = check_ok && c.c.problems.is_empty();
    if c.bytes > EXTRACT_LIMIT || c.entries > EXTRACT_ENTRIES {
        return;
    }

    // `extract`, into scratch/t/x, with a canary beside t.
    let scratch = leanrd_fuzz::scratch();
    let canary = scratch.join("canary");
    if !canary.exists() {
        fs::write(&canary, b"canary").unwrap();
    }
    let before = fs::symlink_metadata(&canary).unwrap();
    let t = scratch.join("t");
    let _ = fs::remove_dir_all(&t);
    let target = t.join("x");
    let mut x = Extractor::new(&target).unwrap();
    let extract_ok = read_image(data, &mut x).is_ok();
    x.finish();

    let beside: Vec<_> = fs::read_dir(&t).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(beside, ["x"], "extract made something beside its target directory");
    let mut top: Vec<_> = fs::read_dir(scratch).unwrap().map(|e| e.unwrap().file_name()).collect();
    top.sort();
    assert_eq!(top, ["canary", "t"], "extract made something outside its target directory");
    let after = fs::symlink_metadata(&canary).unwrap();
    assert_eq!(fs::read(&canary).unwrap(), b"canary", "extract changed a file outside its target directory");
    assert_eq!(
        (after.ino(), after.mtime(), after.mtime_nsec(), after.nlink(), after.mode()),
        (before.ino(), before.mtime(), before.mtime_nsec(), before.nlink(), before.mode()),
        "extract touched a file outside its target directory"
    );

    let stopped = x.errors.iter().any(|e| e.contains("the kernel stops unpacking here"));
    if !stopped {
        assert_eq!(check_ok, extract_ok, "check and extract disagree on whether the image reads: {:?}", x.errors);
    }
    for p in &c.reader_problems {
        assert!(stopped || x.errors.contains(p), "the reader told check of {p:?} but not extract: {:?}", x.errors);
    }
    if passes {
        let unexpected: Vec<&String> = x.errors.iter().filter(|e| !refused_on_purpose(e)).collect();
        assert!(unexpected.is_empty(), "check passes the image, extract fails it: {unexpected:?}");
    }
});
