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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// Entries written (fillers and the trailer not counted).
    pub entries: usize,
    /// Bytes of the archive (uncompressed).
    pub bytes: u64,
    /// Regular files big enough to be aligned.
    pub eligible: usize,
    /// Of those, the ones whose data is aligned.
    pub aligned: usize,
    /// Filler entries inserted because a name was too long to pad.
    pub fillers: usize,
    /// File data shared with its source (FICLONERANGE succeeded).
    pub cloned: u64,
    /// File data copied.
    pub copied: u64,
    /// How long the write took (wall-clock).
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

/// How one file's data gets into the output.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Route {
    /// Read into the header buffer (small files).
    Inline,
    /// Its whole blocks cloned in place by the writer thread (block-aligned, at least a
    /// block), the partial last block read into the buffer with the headers after it.
    Clone,
    /// Copied in the kernel (`copy_file_range`) by a worker: large files not cloned.
    Worker,
}

fn route(size: u64, dst: u64, block: u64, clone_works: bool) -> Route {
    if size >= block && dst.is_multiple_of(block) {
        if clone_works { Route::Clone } else { Route::Worker }
    } else if size >= INLINE_MAX {
        Route::Worker
    } else {
        Route::Inline
    }
}

/// Write-back is started (one `sync_file_range` over the whole output) each time this many
/// more bytes were written, by any thread: the copying and the device's writing overlap, and
/// the final fsync has less left to do. A hint per write would cost a system call per small
/// run of headers (and cloned files have nothing to write back).
const HINT_EVERY: u64 = 8 << 20;

/// Counts written bytes and starts write-back every [`HINT_EVERY`].
struct Hinter<'a> {
    out: &'a File,
    written: AtomicU64,
}

impl Hinter<'_> {
    fn wrote(&self, n: u64) {
        let before = self.written.fetch_add(n, Ordering::Relaxed);
        if before / HINT_EVERY != (before + n) / HINT_EVERY {
            start_writeback(self.out, 0, 0);
        }
    }
}

struct Job<'a> {
    path: Cow<'a, Path>,
    size: u64,
    dst: u64,
}

/// Write `layout` into `out` at its planned offsets. `out` is extended to `layout.end`; bytes
/// before `layout.options.base` (earlier segments) are left as they are.
///
/// One thread walks the layout in order. Headers, small files and the partial last block of
/// cloned files go through one buffer, written with one `pwrite` per contiguous run; aligned
/// files are cloned (`FICLONERANGE`) by the same thread as they come: clones into one output
/// file serialise on its inode lock in XFS and Btrfs, so more threads would only add their
/// start-up and hand-over. Large files that cannot be cloned are copied in the kernel by
/// worker threads, started when the first one appears.
pub fn write_positional(layout: &Layout, out: &File) -> Result<Stats> {
    let start = Instant::now();
    let mut stats = Stats::from_layout(layout);
    let cur = out.metadata().context("cannot stat the output")?.len();
    out.set_len(cur.max(layout.end)).context("cannot size the output")?;
    let block = block_size(out);
    let copied = AtomicU64::new(0);
    let failure: Mutex<Option<crate::error::Error>> = Mutex::new(None);
    let (tx, rx) = std::sync::mpsc::channel::<Job>();
    let rx = Mutex::new(rx);
    let hinter = Hinter { out, written: AtomicU64::new(0) };
    let walked = std::thread::scope(|s| {
        let worker = || {
            loop {
                let job = match rx.lock() {
                    Ok(r) => r.recv(),
                    Err(_) => break,
                };
                let Ok(job) = job else { break };
                if failure.lock().map(|f| f.is_some()).unwrap_or(true) {
                    continue; // drain
                }
                match copy_job(&job, out, block, &AtomicBool::new(false)) {
                    Ok((_, k)) => {
                        hinter.wrote(k);
                        copied.fetch_add(k, Ordering::Relaxed);
                    }
                    Err(e) => {
                        if let Ok(mut f) = failure.lock() {
                            f.get_or_insert(e);
                        }
                    }
                }
            }
        };
        let mut workers = 0;
        let mut spawn = |n: usize| {
            while workers < n {
                s.spawn(worker);
                workers += 1;
            }
        };
        let r = walk_positional(layout, out, block, &hinter, &mut |job| {
            // Workers only when there is copying to do (one large clonable file starts none).
            spawn(leanrd_compress::default_threads() as usize);
            tx.send(job).is_ok()
        });
        drop(tx);
        r
    });
    if let Some(e) = failure.into_inner().unwrap_or(None) {
        return Err(e);
    }
    let (buffered, cloned) = walked?;
    stats.copied = buffered + copied.into_inner();
    stats.cloned = cloned;
    stats.elapsed = start.elapsed();
    Ok(stats)
}

/// The ordered walk of [`write_positional`]: headers, inline data and small files through one
/// buffer, clones in place, large copies handed to `send`. Returns (bytes copied here, bytes
/// cloned).
fn walk_positional<'a>(
    layout: &'a Layout,
    out: &File,
    block: u64,
    hinter: &Hinter,
    send: &mut dyn FnMut(Job<'a>) -> bool,
) -> Result<(u64, u64)> {
    let mut buf: Vec<u8> = Vec::with_capacity(FLUSH_AT + (1 << 16));
    let mut buf_start = layout.options.base;
    let (mut copied, mut cloned) = (0u64, 0u64);
    let mut clone_works = true;
    let mut dirs = crate::dircache::DirCache::default();
    let flush = |buf: &mut Vec<u8>, at: u64| -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        out.write_all_at(buf, at).context("write to the output failed")?;
        hinter.wrote(buf.len() as u64);
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
                let dst = p.data_offset();
                let path = p.entry.and_then(Entry::source).expect("a file entry has a source");
                let mut route = route(size, dst, block, clone_works);
                if route == Route::Clone {
                    let src = dirs.open(&path).with_context(|| format!("{}: cannot open", path.display()))?;
                    let whole = size / block * block;
                    match clone_range(&src, out, whole, dst) {
                        Ok(()) => {
                            flush(&mut buf, buf_start)?;
                            cloned += whole;
                            // The partial last block starts the next run, headers after it.
                            buf_start = dst + whole;
                            let tail = (size - whole) as usize;
                            buf.resize(tail, 0);
                            src.read_exact_at(&mut buf, whole).with_context(|| {
                                format!("{}: cannot read {size} bytes (did it change while archiving?)", path.display())
                            })?;
                            copied += tail as u64;
                            buf.resize(align4(buf.len() as u64) as usize, 0);
                            continue;
                        }
                        Err(e) => {
                            // Not a reflink file system (or not the same one): stop trying. Any
                            // other refusal (a file that changed, a busy swap file): this one
                            // file is copied instead, and the copy says what is wrong with it.
                            if not_clonable(&e) {
                                clone_works = false;
                            }
                            route = Route::Worker;
                        }
                    }
                }
                if route == Route::Worker {
                    flush(&mut buf, buf_start)?;
                    let shown = path.display().to_string();
                    if !send(Job { path, size, dst }) {
                        bail!("{shown}: the copying threads ended early");
                    }
                    continue;
                }
                let at = buf.len();
                buf.resize(at + size as usize, 0);
                let mut f = dirs.open(&path).with_context(|| format!("{}: cannot open", path.display()))?;
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
    flush(&mut buf, buf_start)?;
    Ok((copied, cloned))
}

/// Errors that say cloning cannot work here at all (rather than for this one file).
fn not_clonable(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EXDEV | libc::ENOTTY | libc::ENOSYS | libc::EBADF | libc::EINVAL)
    )
}

/// Start writing a range back to disk now (`len` 0: to the end of the file), without waiting
/// for it, so that the final fsync has less left to do. Purely an optimisation.
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
                if not_clonable(&e) {
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
pub(crate) fn place_file(path: &Path, out: &File, dst: u64) -> Result<(u64, u64)> {
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
