//! `leanrd advise`: which compression loads fastest on this machine, by measurement.
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

#[derive(Args)]
pub struct AdviseArgs {
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

fn print_json(a: &AdviseArgs, dir: &Path, size_in: u64, rows: &[Row], reason: &str) -> Result<()> {
    let v: Vec<_> = rows
        .iter()
        .map(|r| {
            json!({"candidate": r.spec.to_string(), "format": r.spec.format.name(), "level": r.spec.level,
                   "size": r.size, "ratio": r.size as f64 / size_in as f64,
                   "compress_s": r.compress.as_secs_f64(), "read_ms": ms(r.read),
                   "decompress_ms": ms(r.decompress), "load_ms": ms(r.load())})
        })
        .collect();
    let out = json!({"input": a.input, "uncompressed": size_in, "directory": dir, "candidates": v,
                     "recommended": rows[0].spec.to_string(), "reason": reason, "method": METHOD});
    outln!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

fn print_table(a: &AdviseArgs, dir: &Path, size_in: u64, rows: &[Row], reason: &str) {
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
    outln!("method: {METHOD}");
}

pub fn run(a: AdviseArgs) -> Result<ExitCode> {
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
    if a.json {
        print_json(&a, &dir, size_in, &rows, &reason)?;
    } else {
        print_table(&a, &dir, size_in, &rows, &reason);
    }
    Ok(ExitCode::SUCCESS)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
