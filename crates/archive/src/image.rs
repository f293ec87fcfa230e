//! Whole images: one or more segments, each with its own compression, written one after
//! the other into a file with the padding the kernel needs between them.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Context, Result};
use leanrd_compress::{Format, Spec};
use leanrd_newc::align4;

use crate::entry::Entry;
use crate::layout::{self, Layout};
use crate::write::{self, Stats};

/// One segment to write.
#[derive(Debug, Clone)]
pub struct SegmentSpec {
    /// The segment's entries, in archive order.
    pub entries: Vec<Entry>,
    /// The segment's compression (`none` for an uncompressed segment).
    pub compress: Spec,
    /// Data alignment (uncompressed segments only; meaningless inside a compressed stream).
    pub data_align: Option<u64>,
    /// Write `070702` headers with data checksums the kernel verifies.
    pub checksum: bool,
    /// Where this (compressed) segment's bytes are kept between builds: when the file is
    /// there, its bytes are the segment (copied in, nothing compressed); when it is not, the
    /// segment is written and then kept there (synced, then renamed into place, so the file
    /// exists only whole). Its name must change with everything the segment is made from.
    pub kept: Option<PathBuf>,
}

/// What writing a segment did.
#[derive(Debug, Clone)]
pub struct SegmentStats {
    /// Offset of its first byte in the image file.
    pub offset: u64,
    /// Bytes it takes in the image file (compressed, for a compressed segment).
    pub len: u64,
    /// The compression it was written with.
    pub compress: Spec,
    /// What writing its archive did (for a reused segment, only the entry count and archive size).
    pub archive: Stats,
    /// Taken whole from its kept file ([`SegmentSpec::kept`]).
    pub reused: bool,
}

/// Where the next segment may start after `end`, the previous one having been `prev`:
/// 4-aligned, and after four zero bytes if it was lz4 (its legacy frame has no end marker).
pub fn next_start(end: u64, prev: Option<Format>) -> u64 {
    let pad = prev.map(|f| f.trailing_zeros()).unwrap_or(0);
    align4(end + pad)
}

/// Stream a planned archive through `spec`'s encoder (or as it is, for `none`) into `w`. The
/// caller flushes `w`.
pub fn write_compressed(layout: &Layout, spec: Spec, threads: u32, w: &mut (dyn Write + Send)) -> Result<Stats> {
    if spec.format == Format::None {
        return write::write_stream(layout, w);
    }
    let mut enc = leanrd_compress::encoder(spec, threads, Some(layout.len()), w)
        .with_context(|| format!("cannot start the {spec} encoder"))?;
    let stats = write::write_stream(layout, &mut enc)?;
    enc.finish().context("compression failed")?;
    Ok(stats)
}

/// Write `seg` into `out` starting at `start` (4-aligned). Returns its stats; the file ends
/// at `start + len` (it is truncated there).
pub fn write_segment(out: &File, start: u64, seg: SegmentSpec, threads: u32) -> Result<SegmentStats> {
    let compressed = seg.compress.format != Format::None;
    let opts = layout::Options {
        data_align: if compressed { None } else { seg.data_align },
        checksum: seg.checksum,
        base: if compressed { 0 } else { start },
    };
    let layout = Layout::plan(seg.entries, opts)?;
    out.set_len(start).context("cannot size the output")?;
    let kept = seg.kept.filter(|_| compressed);
    if let Some(k) = &kept
        && let Ok(mut from) = File::open(k)
    {
        let mut to = out;
        to.seek(SeekFrom::Start(start)).context("cannot seek the output")?;
        // copy_file_range underneath: in the kernel, shared where the file system can.
        let len = std::io::copy(&mut from, &mut to).with_context(|| format!("{}: cannot copy", k.display()))?;
        let archive = Stats { entries: layout.entries.len(), bytes: layout.len(), ..Stats::default() };
        return Ok(SegmentStats { offset: start, len, compress: seg.compress, archive, reused: true });
    }
    let archive = if compressed {
        let mut f = out;
        f.seek(SeekFrom::Start(start)).context("cannot seek the output")?;
        let mut buf = BufWriter::with_capacity(1 << 20, f);
        let stats = write_compressed(&layout, seg.compress, threads, &mut buf)?;
        buf.flush().context("write to the output failed")?;
        stats
    } else {
        write::write_positional(&layout, out)?
    };
    let end = out.metadata().context("cannot stat the output")?.len();
    if let Some(k) = &kept {
        // Best effort: a segment that cannot be kept is made again next time.
        let _ = keep(out, start, end - start, k);
    }
    Ok(SegmentStats { offset: start, len: end - start, compress: seg.compress, archive, reused: false })
}

/// Copy `len` bytes of `out` from `start` into a new file at `path` (synced, then renamed).
fn keep(out: &File, start: u64, len: u64, path: &Path) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut t = tempfile::NamedTempFile::new_in(dir)?;
    let mut from = out;
    from.seek(SeekFrom::Start(start))?;
    let n = std::io::copy(&mut std::io::Read::take(from, len), t.as_file_mut())?;
    if n != len {
        return Err(std::io::Error::other("the segment was cut short"));
    }
    t.as_file().sync_all()?;
    t.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Write all `segments` into `out` from offset `start`.
pub fn write_image(out: &File, start: u64, segments: Vec<SegmentSpec>, threads: u32) -> Result<Vec<SegmentStats>> {
    let mut at = start;
    let mut prev = None;
    let mut all = Vec::new();
    for seg in segments {
        let begin = if at == 0 { 0 } else { next_start(at, prev) };
        // Zero padding between segments is what set_len leaves.
        let format = seg.compress.format;
        let s = write_segment(out, begin, seg, threads)?;
        at = s.offset + s.len;
        prev = Some(format);
        all.push(s);
    }
    // An image ending in lz4 gets its four zero bytes too, so that anything appended later
    // (e.g. by a bootloader concatenating images) is not lost.
    if prev == Some(Format::Lz4) {
        out.set_len(at + 4).context("cannot pad the output")?;
    }
    Ok(all)
}
