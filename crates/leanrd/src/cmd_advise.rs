//! `leanrd advise`: which compression loads fastest on this machine, by measurement, and,
//! for an image of compressed modules (`.ko.xz`, `.ko.zst`, `.ko.gz`), which module strategy
//! (`leanrd build --module-compression`) boots faster.
//!
//! For each candidate: compress the archive, write it where the image will live, fsync it,
//! drop it from the page cache (`posix_fadvise(DONTNEED)`), then time reading it back cold
//! and decompressing it on one thread, as the kernel does. Unpacking the cpio into the
//! rootfs costs the same for every candidate and is not counted.

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use leanrd_archive::read::{ReadEntry, Segment, SegmentEnd, Visitor};
use leanrd_archive::{Layout, Normalize, input, layout, write};
use leanrd_compress::{Format, Spec};
use serde_json::json;

const ADVISE_EXAMPLES: &str = "\
Examples:
  leanrd advise /boot/initrd.img-$(uname -r)         every compression, timed here
  leanrd advise --candidates zstd:3,lz4,none IMG     only these
  leanrd advise --runs 5 --json IMG                  more runs, raw figures";

#[derive(Args)]
#[command(after_long_help = ADVISE_EXAMPLES)]
pub(crate) struct AdviseArgs {
    /// An image (any segments, any compression) or a directory tree to archive.
    input: PathBuf,
    /// Directory on the disk the image will live on (default: /boot if writable, else the
    /// input's directory). Candidates are written there and removed.
    #[arg(long, value_name = "DIR")]
    on: Option<PathBuf>,
    /// Candidates to try (default: a level or three of each format).
    #[arg(long, value_delimiter = ',', value_name = "FORMAT[:LEVEL],...")]
    candidates: Option<Vec<Spec>>,
    /// Timed repetitions of each read + decompress (the median is kept).
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

const DEFAULT: &[&str] = &[
    "none", "lz4", "lzo", "zstd:1", "zstd:3", "zstd:9", "zstd:19", "gzip:1", "gzip:6", "gzip:9", "xz:1", "xz:6",
    "bzip2:9", "lzma:6",
];

struct Row {
    spec: Spec,
    size: u64,
    compress: Duration,
    read: Duration,
    decompress: Duration,
}

impl Row {
    fn load(&self) -> Duration {
        self.read + self.decompress
    }
}

/// Removes a file on drop.
struct Scratch(PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// Concatenate the image's segments, decompressed, into `out` (one uncompressed archive
/// stream per segment, as the kernel sees them).
fn decompress_image(image: &Path, out: &mut File) -> Result<()> {
    #[derive(Default)]
    struct Segs(Vec<(u64, u64, Format)>, Option<Format>);
    impl Visitor for Segs {
        fn segment(&mut self, s: &Segment) -> leanrd_archive::Result<()> {
            self.1 = Some(s.format);
            Ok(())
        }
        fn entry(&mut self, _e: &ReadEntry, _d: &mut dyn Read) -> leanrd_archive::Result<()> {
            Ok(())
        }
        fn segment_end(&mut self, s: &SegmentEnd) -> leanrd_archive::Result<()> {
            self.0.push((s.offset, s.len, self.1.unwrap_or(Format::None)));
            Ok(())
        }
    }
    let mut segs = Segs::default();
    crate::cmd_read::walk(image, &mut segs)?;
    let mut f = File::open(image)?;
    let mut w = BufWriter::new(out);
    for (off, len, format) in segs.0 {
        f.seek(SeekFrom::Start(off))?;
        let part = io::BufReader::new((&f).take(len));
        let mut dec = leanrd_compress::decoder(format, part)?;
        io::copy(&mut dec, &mut w)?;
        // Keep the next segment's cpio 4-aligned, as it is in the image.
        let pos = w.stream_position()?;
        w.write_all(&vec![0u8; (pos.next_multiple_of(4) - pos) as usize])?;
    }
    w.flush()?;
    Ok(())
}

fn evict(f: &File) -> Result<()> {
    f.sync_all()?;
    // SAFETY: plain syscall on an open descriptor.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r != 0 {
        bail!("posix_fadvise failed: {}", io::Error::from_raw_os_error(r));
    }
    Ok(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn measure(raw: &Path, dir: &Path, spec: Spec, runs: u32) -> Result<Row> {
    let path = dir.join(format!(".leanrd-advise-{}-{}", std::process::id(), spec.to_string().replace(':', "-")));
    let _scratch = Scratch(path.clone());
    let size_in = fs::metadata(raw)?.len();
    let t = Instant::now();
    {
        let out = File::create(&path).with_context(|| format!("{}: cannot create", path.display()))?;
        let mut w = BufWriter::with_capacity(1 << 20, &out);
        let mut enc = leanrd_compress::encoder(spec, leanrd_compress::default_threads(), Some(size_in), &mut w)?;
        io::copy(&mut File::open(raw)?, &mut enc)?;
        enc.finish()?;
        w.flush()?;
    }
    let compress = t.elapsed();
    let size = fs::metadata(&path)?.len();
    let (mut reads, mut decs) = (Vec::new(), Vec::new());
    for _ in 0..runs.max(1) {
        let f = File::open(&path)?;
        evict(&f)?;
        let t = Instant::now();
        let mut data = Vec::with_capacity(size as usize);
        (&f).read_to_end(&mut data)?;
        reads.push(t.elapsed());
        let t = Instant::now();
        let mut dec = leanrd_compress::decoder(spec.format, &data[..])?;
        let n = io::copy(&mut dec, &mut io::sink())?;
        decs.push(t.elapsed());
        if n != size_in {
            bail!("{spec}: decompressed {n} bytes, expected {size_in}");
        }
    }
    Ok(Row { spec, size, compress, read: median(reads), decompress: median(decs) })
}

fn writable(dir: &Path) -> bool {
    let p = dir.join(format!(".leanrd-probe-{}", std::process::id()));
    let ok = File::create(&p).is_ok();
    let _ = fs::remove_file(&p);
    ok
}

/// The uncompressed archive to measure, in the directory measured: the input tree archived,
/// or the input image decompressed.
fn raw_archive(a: &AdviseArgs, dir: &Path) -> Result<Scratch> {
    let raw = Scratch(dir.join(format!(".leanrd-advise-{}-raw", std::process::id())));
    let mut out = File::create(&raw.0).with_context(|| format!("{}: cannot create", raw.0.display()))?;
    if a.input.is_dir() {
        let entries = input::entries(input::tree(&a.input)?, &Normalize::from_env())?;
        let l = Layout::plan(entries, layout::Options::default())?;
        let mut w = BufWriter::new(&out);
        write::write_stream(&l, &mut w)?;
        w.flush()?;
    } else {
        decompress_image(&a.input, &mut out)?;
    }
    Ok(raw)
}

/// The two module strategies measured on an image of compressed modules.
struct Modules {
    /// Compressed modules in the image.
    count: usize,
    /// Their single-threaded decompression, one at a time, as the kernel does at boot.
    kernel_decompress: Duration,
    /// The image with them stored decompressed, compressed with the best candidate.
    decompressed: Row,
    uncompressed: u64,
}

/// The archive `raw` with every compressed module stored decompressed, written to `out`,
/// timing each module's decompression on one thread. None when it holds no compressed module.
fn decompressed_modules(raw: &Path, out: &Path) -> Result<Option<(usize, Duration, Scratch)>> {
    use leanrd_archive::{Data, Entry};
    struct Collect {
        entries: Vec<Entry>,
        count: usize,
        took: Duration,
    }
    impl Visitor for Collect {
        fn entry(&mut self, e: &ReadEntry, d: &mut dyn Read) -> leanrd_archive::Result<()> {
            let Some(kind) = e.header.kind() else { return Ok(()) };
            let mut data = Vec::new();
            d.read_to_end(&mut data)?;
            let mut name = e.name.clone();
            if let (plain, Some(c)) = leanrd_kmod::split_compression(&String::from_utf8_lossy(&e.name))
                && leanrd_kmod::is_module_file(plain)
                && let Some(f) = Format::from_name(c.format)
            {
                let t = Instant::now();
                data = leanrd_compress::decompress_vec_max(f, &data, leanrd_gen::MODULE_MAX)?;
                self.took += t.elapsed();
                self.count += 1;
                name = plain.as_bytes().to_vec();
            }
            let body = if data.is_empty() { Data::None } else { Data::Inline(data.into_boxed_slice()) };
            self.entries.push(Entry::new(name, kind, e.header.mode & 0o7777, body));
            Ok(())
        }
    }
    let mut c = Collect { entries: Vec::new(), count: 0, took: Duration::ZERO };
    leanrd_archive::read::read_image(File::open(raw)?, &mut c)?;
    if c.count == 0 {
        return Ok(None);
    }
    let scratch = Scratch(out.to_path_buf());
    let l = Layout::plan(c.entries, layout::Options::default())?;
    let f = File::create(out).with_context(|| format!("{}: cannot create", out.display()))?;
    let mut w = BufWriter::new(&f);
    write::write_stream(&l, &mut w)?;
    w.flush()?;
    Ok(Some((c.count, c.took, scratch)))
}

const METHOD: &str = "read: cold (fsync + posix_fadvise DONTNEED) from the target directory; decompress: \
    leanrd's userspace decoder on one thread. The kernel's decoders are slower in absolute terms, and more so \
    for xz/bzip2/lzma, but rank the formats alike (under QEMU TCG: none 0.75 s, lz4 1.16 s, zstd 2.21 s, gzip \
    3.11 s, xz 15.7 s for 107 MB); unpacking into the rootfs costs the same for every candidate and is not \
    counted.";

/// Why the first row (fastest to load) is recommended.
fn reason(rows: &[Row]) -> String {
    let best = &rows[0];
    let smallest = rows.iter().min_by_key(|r| r.size).expect("rows");
    if best.spec == smallest.spec {
        return format!("{} loads fastest and is also the smallest", best.spec);
    }
    format!(
        "{} loads fastest ({:.1} ms read + {:.1} ms decompress); the smallest, {}, is {:.0} % smaller but takes \
         {:.1} ms more to load",
        best.spec,
        ms(best.read),
        ms(best.decompress),
        smallest.spec,
        100.0 * (1.0 - smallest.size as f64 / best.size as f64),
        ms(smallest.load()) - ms(best.load())
    )
}

/// The module strategies' comparison, in words.
fn module_lines(best: &Row, m: &Modules) -> (String, String, &'static str) {
    let keep = best.load() + m.kernel_decompress;
    let dec = m.decompressed.load();
    let keep_line = format!(
        "keep:       {} bytes; load {:.1} ms + the kernel decompressing {} modules one at a time {:.1} ms = {:.1} ms",
        best.size,
        ms(best.load()),
        m.count,
        ms(m.kernel_decompress),
        ms(keep)
    );
    let dec_line =
        format!("decompress: {} bytes ({} uncompressed); load {:.1} ms", m.decompressed.size, m.uncompressed, ms(dec));
    (keep_line, dec_line, if dec <= keep { "decompress" } else { "keep" })
}

fn print_json(a: &AdviseArgs, dir: &Path, size_in: u64, rows: &[Row], reason: &str, m: Option<&Modules>) -> Result<()> {
    let v: Vec<_> = rows
        .iter()
        .map(|r| {
            json!({"candidate": r.spec.to_string(), "format": r.spec.format.name(), "level": r.spec.level,
                   "size": r.size, "ratio": r.size as f64 / size_in as f64,
                   "compress_s": r.compress.as_secs_f64(), "read_ms": ms(r.read),
                   "decompress_ms": ms(r.decompress), "load_ms": ms(r.load())})
        })
        .collect();
    let modules = m.map(|m| {
        let best = &rows[0];
        json!({"compression": best.spec.to_string(), "modules": m.count,
               "keep": {"size": best.size, "load_ms": ms(best.load()), "kernel_decompress_ms": ms(m.kernel_decompress),
                        "total_ms": ms(best.load() + m.kernel_decompress)},
               "decompress": {"size": m.decompressed.size, "uncompressed": m.uncompressed,
                              "load_ms": ms(m.decompressed.load()), "total_ms": ms(m.decompressed.load())},
               "recommended": module_lines(best, m).2})
    });
    let out = json!({"input": a.input, "uncompressed": size_in, "directory": dir, "candidates": v,
                     "recommended": rows[0].spec.to_string(), "reason": reason, "method": METHOD,
                     "module_strategies": modules});
    outln!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

fn print_table(a: &AdviseArgs, dir: &Path, size_in: u64, rows: &[Row], reason: &str, m: Option<&Modules>) {
    outln!("{}: {} bytes uncompressed; measured in {}", a.input.display(), size_in, dir.display());
    outln!(
        "{:<10} {:>12} {:>7} {:>11} {:>9} {:>13} {:>11}",
        "candidate",
        "size",
        "ratio",
        "compress s",
        "read ms",
        "decompress ms",
        "load ms"
    );
    for r in rows {
        outln!(
            "{:<10} {:>12} {:>6.1}% {:>11.2} {:>9.1} {:>13.1} {:>11.1}",
            r.spec.to_string(),
            r.size,
            100.0 * r.size as f64 / size_in as f64,
            r.compress.as_secs_f64(),
            ms(r.read),
            ms(r.decompress),
            ms(r.load())
        );
    }
    outln!("recommended: {} — {reason}", rows[0].spec);
    if let Some(m) = m {
        let (keep, dec, best) = module_lines(&rows[0], m);
        outln!("module strategies (--module-compression), with {}:", rows[0].spec);
        outln!("  {keep}");
        outln!("  {dec}");
        outln!("  recommended: --module-compression {best}");
    }
    outln!("method: {METHOD}");
}

pub(crate) fn run(a: AdviseArgs) -> Result<ExitCode> {
    let dir = match &a.on {
        Some(d) => d.clone(),
        None if writable(Path::new("/boot")) => PathBuf::from("/boot"),
        None => a.input.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf(),
    };
    let raw = raw_archive(&a, &dir)?;
    let specs: Vec<Spec> = match &a.candidates {
        Some(c) => c.clone(),
        None => DEFAULT.iter().map(|s| s.parse().expect("valid default")).collect(),
    };
    if specs.is_empty() {
        bail!("no candidates to measure");
    }
    let size_in = fs::metadata(&raw.0)?.len();
    let mut rows = Vec::new();
    for spec in specs {
        if !a.json {
            eprint!("\rmeasuring {spec:<10}");
        }
        rows.push(measure(&raw.0, &dir, spec, a.runs)?);
    }
    if !a.json {
        eprint!("\r{:30}\r", "");
    }
    rows.sort_by_key(|r| r.load());
    let reason = reason(&rows);
    // Compressed modules: the same image with them decompressed, under the best candidate.
    let alt = dir.join(format!(".leanrd-advise-{}-modules", std::process::id()));
    let modules = match decompressed_modules(&raw.0, &alt)? {
        Some((count, kernel_decompress, plain)) => {
            if !a.json {
                eprint!("\rmeasuring modules decompressed");
            }
            let decompressed = measure(&plain.0, &dir, rows[0].spec, a.runs)?;
            let uncompressed = fs::metadata(&plain.0)?.len();
            Some(Modules { count, kernel_decompress, decompressed, uncompressed })
        }
        None => None,
    };
    if !a.json {
        eprint!("\r{:40}\r", "");
    }
    if a.json {
        print_json(&a, &dir, size_in, &rows, &reason, modules.as_ref())?;
    } else {
        print_table(&a, &dir, size_in, &rows, &reason, modules.as_ref());
    }
    Ok(ExitCode::SUCCESS)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
