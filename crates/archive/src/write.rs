//! Put a [`Layout`] into bytes.
//!
//! [`write_positional`] writes into a regular file at the planned offsets: headers and small
//! files through one buffer, larger file data with `FICLONERANGE` (block-aligned offsets: the
//! extents are shared, nothing is copied) or `copy_file_range` (an in-kernel copy, falling
//! back to read/write across file systems), by worker threads in parallel. File data never
//! passes through a `dyn Write`, which would turn every clone into a copy.
//!
//! [`write_stream`] writes the same bytes sequentially to any `Write` (stdout, a compressor).

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Context, Result, bail};
use leanrd_newc::align4;

use crate::entry::{Data, Entry};
use crate::layout::Layout;

/// Files smaller than this (and not aligned) are read into the header buffer; larger ones
/// are copied in the kernel by a worker.
const INLINE_MAX: u64 = 64 * 1024;
/// Headers and small files are written in runs of about this many bytes.
const FLUSH_AT: usize = 1 << 20;

/// What a write did.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub entries: usize,
    pub bytes: u64,
    pub eligible: usize,
    pub aligned: usize,
    pub fillers: usize,
    /// File data shared with its source (FICLONERANGE succeeded).
    pub cloned: u64,
    /// File data copied.
    pub copied: u64,
    pub elapsed: Duration,
}

impl Stats {
    fn from_layout(l: &Layout) -> Stats {
        Stats {
            entries: l.entries.len(),
            bytes: l.len(),
            eligible: l.eligible,
            aligned: l.aligned,
            fillers: l.fillers,
            ..Stats::default()
        }
    }

    /// A one-line human summary.
    pub fn summary(&self) -> String {
        let pct = if self.eligible == 0 { 100.0 } else { 100.0 * self.aligned as f64 / self.eligible as f64 };
        format!(
            "entries {}, bytes {}, eligible {}, aligned {} ({pct:.1} %), fillers {}, cloned {} B, copied {} B, time {:.3} s",
            self.entries,
            self.bytes,
            self.eligible,
            self.aligned,
            self.fillers,
            self.cloned,
            self.copied,
            self.elapsed.as_secs_f64()
        )
    }
}

/// Whether a file's data is written by a worker (cloned or copied in the kernel) rather than
/// read into the header buffer: large files, and files with a whole block at a block boundary.
fn by_worker(size: u64, dst: u64, block: u64) -> bool {
    size >= INLINE_MAX || (size >= block && dst.is_multiple_of(block))
}

struct Job<'a> {
    path: Cow<'a, Path>,
    size: u64,
    dst: u64,
}

/// Write `layout` into `out` at its planned offsets. `out` is extended to `layout.end`; bytes
/// before `layout.options.base` (earlier segments) are left as they are.
pub fn write_positional(layout: &Layout, out: &File) -> Result<Stats> {
    let start = Instant::now();
    let mut stats = Stats::from_layout(layout);
    let cur = out.metadata().context("cannot stat the output")?.len();
    out.set_len(cur.max(layout.end)).context("cannot size the output")?;
    let block = block_size(out);

    // Which file data goes to workers.
    let mut jobs = Vec::new();
    for p in layout.iter() {
        let size = p.data().len();
        if let Some(path) = p.entry.and_then(Entry::source) {
            let dst = p.data_offset();
            if by_worker(size, dst, block) {
                jobs.push(Job { path, size, dst });
            }
        }
    }
    // Largest first, so the two workers finish together.
    jobs.sort_by_key(|j| std::cmp::Reverse(j.size));

    let next = AtomicUsize::new(0);
    let cloned = AtomicU64::new(0);
    let copied = AtomicU64::new(0);
    let clone_works = AtomicBool::new(true);
    let failure: Mutex<Option<crate::error::Error>> = Mutex::new(None);
    let workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(jobs.len());

    let buffered = std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    if failure.lock().map(|f| f.is_some()).unwrap_or(true) {
                        break;
                    }
                    match copy_job(job, out, block, &clone_works) {
                        Ok((c, k)) => {
                            if k > 0 {
                                start_writeback(out, job.dst, job.size);
                            }
                            cloned.fetch_add(c, Ordering::Relaxed);
                            copied.fetch_add(k, Ordering::Relaxed);
                        }
                        Err(e) => {
                            if let Ok(mut f) = failure.lock() {
                                f.get_or_insert(e);
                            }
                            break;
                        }
                    }
                }
            });
        }
        write_buffered(layout, out, block)
    });
    if let Some(e) = failure.into_inner().unwrap_or(None) {
        return Err(e);
    }
    stats.copied = buffered? + copied.into_inner();
    stats.cloned = cloned.into_inner();
    stats.elapsed = start.elapsed();
    Ok(stats)
}

/// Headers, inline data and small files, through one buffer. Returns the file bytes copied.
fn write_buffered(layout: &Layout, out: &File, block: u64) -> Result<u64> {
    let mut buf: Vec<u8> = Vec::with_capacity(FLUSH_AT + (1 << 16));
    let mut buf_start = layout.options.base;
    let mut copied = 0;
    let flush = |buf: &mut Vec<u8>, at: u64| -> Result<()> {
        out.write_all_at(buf, at).context("write to the output failed")?;
        start_writeback(out, at, buf.len() as u64);
        buf.clear();
        Ok(())
    };
    for p in layout.iter() {
        if buf.is_empty() {
            buf_start = p.offset;
        }
        leanrd_newc::encode_head_into(&p.header, p.name, &mut buf);
        match p.data() {
            Data::None => {}
            Data::Inline(v) => {
                buf.extend_from_slice(v);
                buf.resize(align4(buf.len() as u64) as usize, 0);
            }
            Data::File { size, .. } | Data::Tree { size, .. } => {
                let size = *size as u64;
                if by_worker(size, p.data_offset(), block) {
                    // A worker writes this one; what follows starts a new run.
                    flush(&mut buf, buf_start)?;
                    continue;
                }
                let path = p.entry.and_then(Entry::source).expect("a file entry has a source");
                let at = buf.len();
                buf.resize(at + size as usize, 0);
                let mut f = File::open(&path).with_context(|| format!("{}: cannot open", path.display()))?;
                f.read_exact(&mut buf[at..]).with_context(|| {
                    format!("{}: cannot read {size} bytes (did it change while archiving?)", path.display())
                })?;
                copied += size;
                buf.resize(align4(buf.len() as u64) as usize, 0);
            }
        }
        if buf.len() >= FLUSH_AT {
            flush(&mut buf, buf_start)?;
        }
    }
    if !buf.is_empty() {
        flush(&mut buf, buf_start)?;
    }
    Ok(copied)
}

/// Start writing a range back to disk now, without waiting, so that the final fsync has
/// less left to do: the copy and the write-back overlap. Purely an optimisation.
fn start_writeback(out: &File, offset: u64, len: u64) {
    // SAFETY: plain syscall on an open descriptor; errors are ignored on purpose.
    unsafe {
        libc::sync_file_range(out.as_raw_fd(), offset as i64, len as i64, libc::SYNC_FILE_RANGE_WRITE);
    }
}

/// Clone what can be cloned, copy the rest. Returns (cloned, copied) bytes.
fn copy_job(job: &Job, out: &File, block: u64, clone_works: &AtomicBool) -> Result<(u64, u64)> {
    let src = File::open(&job.path).with_context(|| format!("{}: cannot open", job.path.display()))?;
    let mut done = 0u64;
    let mut cloned = 0u64;
    let whole = job.size / block * block;
    if whole > 0 && job.dst.is_multiple_of(block) && clone_works.load(Ordering::Relaxed) {
        match clone_range(&src, out, whole, job.dst) {
            Ok(()) => {
                done = whole;
                cloned = whole;
            }
            Err(e) => {
                // Not a reflink file system (or not the same one): stop trying.
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EXDEV | libc::ENOTTY | libc::ENOSYS | libc::EBADF)
                ) {
                    clone_works.store(false, Ordering::Relaxed);
                }
            }
        }
    }
    let mut use_cfr = true;
    while done < job.size {
        let left = job.size - done;
        let n = if use_cfr {
            let (mut si, mut di) = (done, job.dst + done);
            match rustix::fs::copy_file_range(&src, Some(&mut si), out, Some(&mut di), left.min(1 << 30) as usize) {
                Ok(n) => n as u64,
                Err(
                    rustix::io::Errno::XDEV
                    | rustix::io::Errno::INVAL
                    | rustix::io::Errno::NOSYS
                    | rustix::io::Errno::OPNOTSUPP
                    | rustix::io::Errno::PERM,
                ) => {
                    use_cfr = false;
                    continue;
                }
                Err(e) => {
                    return Err(io::Error::from(e)).with_context(|| format!("{}: copy failed", job.path.display()));
                }
            }
        } else {
            read_write(&src, out, done, job.dst + done, left)
                .with_context(|| format!("{}: copy failed", job.path.display()))?
        };
        if n == 0 {
            bail!("{}: file shrank while archiving ({} of {} bytes)", job.path.display(), done, job.size);
        }
        done += n;
    }
    Ok((cloned, job.size - cloned))
}

fn read_write(src: &File, out: &File, from: u64, to: u64, len: u64) -> io::Result<u64> {
    let mut buf = vec![0u8; len.min(1 << 20) as usize];
    let n = src.read_at(&mut buf, from)?;
    out.write_all_at(&buf[..n], to)?;
    Ok(n as u64)
}

/// The block size of the file system holding `out` (what clones are aligned to).
pub fn block_size(out: &File) -> u64 {
    rustix::fs::fstatvfs(out).map(|s| s.f_bsize).unwrap_or(4096).max(512)
}

/// The whole file `path` at offset `dst` of `out`: its whole blocks cloned when `dst` is
/// block-aligned on a reflink file system, the rest copied in the kernel. Returns (cloned,
/// copied) bytes.
pub fn place_file(path: &Path, out: &File, dst: u64) -> Result<(u64, u64)> {
    let size = std::fs::metadata(path).with_context(|| format!("{}: cannot stat", path.display()))?.len();
    let job = Job { path: Cow::Borrowed(path), size, dst };
    copy_job(&job, out, block_size(out), &AtomicBool::new(true))
}

/// `FICLONERANGE`: share `len` bytes of `src` from offset 0 at `dst` in `out`.
fn clone_range(src: &File, out: &File, len: u64, dst: u64) -> io::Result<()> {
    // Not wrapped by rustix (only whole-file FICLONE is); the struct is from linux/fs.h.
    #[repr(C)]
    struct FileCloneRange {
        src_fd: i64,
        src_offset: u64,
        src_length: u64,
        dest_offset: u64,
    }
    const FICLONERANGE: libc::c_ulong = 0x4020_940d; // _IOW(0x94, 13, struct file_clone_range)
    let arg = FileCloneRange { src_fd: src.as_raw_fd() as i64, src_offset: 0, src_length: len, dest_offset: dst };
    // SAFETY: both descriptors are open for the duration of the call and `arg` matches the
    // kernel's struct file_clone_range layout.
    let r = unsafe { libc::ioctl(out.as_raw_fd(), FICLONERANGE as _, &arg as *const FileCloneRange) };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Write `layout` sequentially to `w` (all data copied). The caller buffers and flushes `w`.
pub fn write_stream(layout: &Layout, w: &mut dyn Write) -> Result<Stats> {
    let start = Instant::now();
    let mut stats = Stats::from_layout(layout);
    let zeros = [0u8; 4];
    for p in layout.iter() {
        w.write_all(&p.head_bytes()).context("write failed")?;
        let data = p.data();
        match data {
            Data::None => {}
            Data::Inline(v) => w.write_all(v).context("write failed")?,
            Data::File { size, .. } | Data::Tree { size, .. } => {
                let size = *size as u64;
                let path = p.entry.and_then(Entry::source).expect("a file entry has a source");
                let f = File::open(&path).with_context(|| format!("{}: cannot open", path.display()))?;
                let n = io::copy(&mut f.take(size), w).with_context(|| format!("{}: copy failed", path.display()))?;
                if n != size {
                    bail!("{}: file shrank while archiving ({n} of {size} bytes)", path.display());
                }
                stats.copied += n;
            }
        }
        let pad = (align4(data.len()) - data.len()) as usize;
        w.write_all(&zeros[..pad]).context("write failed")?;
    }
    // No flush: a flush inside a compressed stream costs ratio (and the lzma-alone encoder
    // rejects it); the caller finishes the encoder and flushes its sink.
    stats.elapsed = start.elapsed();
    Ok(stats)
}
