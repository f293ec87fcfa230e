//! What an image is made from, as one digest: when it is unchanged, the image need not be
//! rebuilt. Kept beside the image as IMAGE.leanrd-digest.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use leanrd_archive::output::is_secret;
use leanrd_archive::{Context, Result};
use leanrd_archive::{Data, Entry};
use leanrd_compress::Spec;
use sha2::{Digest, Sha256};

/// Where the digest of an image's inputs is kept.
pub fn digest_path(image: &Path) -> PathBuf {
    let mut p = image.as_os_str().to_owned();
    p.push(".leanrd-digest");
    PathBuf::from(p)
}

/// One segment's entries and how it is written.
pub struct SegmentInputs<'a> {
    /// The segment's entries, in archive order.
    pub entries: &'a [Entry],
    /// The segment's compression.
    pub compress: Spec,
    /// Alignment of file data in bytes (uncompressed segments); None: not aligned.
    pub data_align: Option<u64>,
}

/// What an image is made from, in one pass over its entries (one stat per source).
pub struct Inputs {
    /// A digest of the settings, every entry's metadata, and for its data the source's
    /// identity (path, size, mtime, inode) or, for generated and transformed files (under
    /// `tmp`), the content itself.
    pub digest: String,
    /// Each segment's own digest, as `inputs` would give for that segment alone (a kept
    /// compressed segment is named by it).
    pub segments: Vec<String>,
    /// The first regular file that others may not read (by its mode in the image or its
    /// source's on disk): the image must then be private too.
    pub secret: Option<String>,
}

/// The digest of an image made of `segments`, files under `tmp` hashed by content; an error when
/// such a file cannot be read or a source cannot be stat'ed.
pub fn inputs(segments: &[SegmentInputs], tmp: &Path) -> Result<Inputs> {
    let hex = |h: Sha256| h.finalize().iter().map(|b| format!("{b:02x}")).collect::<String>();
    let mut h = Sha256::new();
    let mut each = Vec::new();
    let mut secret = None;
    let mut note_secret = |mode: u32, e: &Entry| {
        if is_secret(mode) && secret.is_none() {
            secret = Some(String::from_utf8_lossy(&e.name).into_owned());
        }
    };
    let version = format!("leanrd {}\n", env!("CARGO_PKG_VERSION"));
    h.update(&version);
    for s in segments {
        // The whole image's digest and this segment's own, fed the same bytes.
        let mut g = Sha256::new();
        g.update(&version);
        let mut both = |b: &[u8]| {
            h.update(b);
            g.update(b);
        };
        both(format!("segment {} {:?}\n", s.compress, s.data_align).as_bytes());
        for e in s.entries {
            if e.is_regular() {
                note_secret(e.mode, e);
            }
            both(&e.name);
            both(
                format!(" {:o} {} {} {} {} {}\n", e.mode, e.uid, e.gid, e.mtime, e.rdev_major, e.rdev_minor).as_bytes(),
            );
            match &e.data {
                Data::None => {}
                Data::Inline(v) => both(v),
                Data::File { path, .. } if path.starts_with(tmp) => {
                    both(&fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?)
                }
                Data::File { .. } | Data::Tree { .. } => {
                    let path = e.source().expect("a file entry has a source");
                    let path = path.as_ref();
                    let md = fs::metadata(path).with_context(|| format!("{}: cannot stat", path.display()))?;
                    note_secret(md.mode(), e);
                    both(
                        format!(
                            "{} {} {} {} {} {}\n",
                            path.display(),
                            md.len(),
                            md.mtime(),
                            md.mtime_nsec(),
                            md.ino(),
                            md.dev()
                        )
                        .as_bytes(),
                    );
                }
            }
        }
        each.push(hex(g));
    }
    Ok(Inputs { digest: hex(h), segments: each, secret })
}

#[cfg(test)]
mod tests {
    use super::*;
    use leanrd_compress::Format;

    #[test]
    fn each_segments_digest_is_that_segment_alone() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("m.ko");
        fs::write(&f, b"module").unwrap();
        let entry =
            |name: &str| Entry::new(name.as_bytes(), leanrd_newc::FileKind::Regular, 0o644, Data::file(&f, 6).unwrap());
        let (a, b) = ([entry("a.ko")], [entry("b.ko")]);
        let seg = |e| SegmentInputs { entries: e, compress: Spec::new(Format::Zstd), data_align: None };
        let tmp = t.path().join("tmp");
        let both = inputs(&[seg(&a), seg(&b)], &tmp).unwrap();
        assert_eq!(both.segments, [inputs(&[seg(&a)], &tmp).unwrap().digest, inputs(&[seg(&b)], &tmp).unwrap().digest]);
        assert_ne!(both.segments[0], both.segments[1]);
        assert_ne!(both.digest, both.segments[1]);
    }
}
