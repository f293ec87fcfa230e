//! `leanrd ls`, `extract`, `check`: read images.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use leanrd_archive::Checker;
use leanrd_archive::Extractor;
use leanrd_archive::Select;
use leanrd_archive::names::{escape, symlink_target};
use leanrd_archive::read::{Problem, ReadEntry, Segment, Summing, Visitor, read_image, read_image_file};
use leanrd_compress::Format;
use leanrd_newc::FileKind;
use serde_json::json;

const LS_EXAMPLES: &str = "\
Examples:
  leanrd ls /boot/initrd.img                      names, one per line (escaped as ls -b)
  leanrd ls -lh /boot/initrd.img                  long format, sizes in K/M/G
  leanrd ls IMG 'usr/lib/modules/*/kernel/fs/*'   names matching a shell pattern
  leanrd ls --parts 2- IMG                        all but the first segment (early microcode)
  leanrd ls --count IMG                           how many segments
  leanrd ls --json IMG | jq -r .name              every header field, one object per line
  leanrd ls IMG -F other.img                      several images
  zstd -dc img.zst | leanrd ls -                  standard input, streamed";

const EXTRACT_EXAMPLES: &str = "\
Examples:
  leanrd extract IMG -C /tmp/x                          everything, as the kernel would unpack it
  leanrd extract IMG -C /tmp/x 'usr/lib/modules/*/kernel/fs/*'
                                                        matching names (their parents are made)
  leanrd extract --subdir part IMG -C /tmp/x            segment 1 in /tmp/x/part1, 2 in part2, ...
  leanrd extract --parts 1 IMG -C /tmp/ucode            the early microcode segment only
  leanrd extract -O IMG etc/leanrd/init.conf            a file's bytes on standard output
  leanrd extract --force IMG -C /tmp/x                  replace files already in /tmp/x
  leanrd extract IMG -F second.img -C /tmp/x            images one after another, as concatenated
  cat /boot/initrd.img | leanrd extract - -C /tmp/x     standard input, streamed";

/// Say which patterns matched no name (as tar does); true if any. A pattern that names a file
/// was probably meant as another image.
fn unmatched(select: &Select) -> bool {
    let left = select.unmatched();
    for p in &left {
        let hint = if Path::new(p).is_file() { " (another image is given with -F FILE)" } else { "" };
        eprintln!("leanrd: {p}: no name in the image matches this pattern{hint}");
    }
    !left.is_empty()
}

/// The images a reader command takes: the first positional one and `-F` others.
fn images(first: &Path, more: &[PathBuf]) -> Vec<PathBuf> {
    std::iter::once(first.to_path_buf()).chain(more.iter().cloned()).collect()
}

/// Patterns as bytes (names in images need not be UTF-8, nor need patterns).
fn select(parts: Option<&str>, patterns: &[OsString]) -> Result<Select> {
    let pats: Vec<&[u8]> = patterns.iter().map(|p| p.as_bytes()).collect();
    Select::new(parts, &pats).map_err(anyhow::Error::msg)
}

#[derive(Args)]
#[command(disable_help_flag = true, after_long_help = LS_EXAMPLES)]
pub(crate) struct LsArgs {
    /// The image (`-` for stdin): newc or crc segments, any kernel compression, or a UKI.
    image: PathBuf,
    /// List only names matching one of these shell patterns (glob(7), as `cpio -i`: `*`
    /// matches `/` too; a leading `./` in the archive is ignored).
    #[arg(value_name = "PATTERN")]
    patterns: Vec<OsString>,
    /// Another image, listed after the first (repeatable).
    #[arg(short = 'F', long = "file", value_name = "IMAGE")]
    more: Vec<PathBuf>,
    /// Only these segments, counted from 1: N, N-, N-M or -M, comma-separated (as 3cpio).
    #[arg(short = 'P', long, value_name = "LIST")]
    parts: Option<String>,
    /// Print the number of segments (concatenated archives) instead of the entries.
    #[arg(long, conflicts_with_all = ["json", "long", "patterns", "parts"])]
    count: bool,
    /// Long format: mode, owner, group, size (device numbers), mtime (UTC), name, link target.
    #[arg(short = 'l', long)]
    long: bool,
    /// With -l: sizes in K, M, G (powers of 1024), as `ls -lh`.
    #[arg(short = 'h', long = "human-readable")]
    human: bool,
    /// One JSON object per line with every header field, the image, segment and offsets (a
    /// name or target that is not UTF-8 also comes as `name_hex`/`target_hex`).
    #[arg(long, conflicts_with = "long")]
    json: bool,
    /// Print help.
    #[arg(long, action = clap::ArgAction::Help)]
    help: Option<bool>,
}

#[derive(Args)]
#[command(after_long_help = EXTRACT_EXAMPLES)]
pub(crate) struct ExtractArgs {
    /// The image (`-` for stdin): newc or crc segments, any kernel compression, or a UKI.
    image: PathBuf,
    /// Extract only names matching one of these shell patterns (glob(7), as `cpio -i`); the
    /// parents they need are made, with their archived mode when the archive has them.
    #[arg(value_name = "PATTERN")]
    patterns: Vec<OsString>,
    /// Another image, extracted after the first into the same place, as if concatenated.
    #[arg(short = 'F', long = "file", value_name = "IMAGE")]
    more: Vec<PathBuf>,
    /// Directory to extract into (created if missing). Parents missing in the archive are
    /// made with a warning (the kernel would drop what is under them).
    #[arg(short = 'C', long = "directory", value_name = "DIR", default_value = ".")]
    dir: PathBuf,
    /// Only these segments, counted from 1: N, N-, N-M or -M, comma-separated (as 3cpio).
    #[arg(short = 'P', long, value_name = "LIST")]
    parts: Option<String>,
    /// Write the data of the selected regular files to standard output, one after another;
    /// nothing is created.
    #[arg(short = 'O', long = "to-stdout", conflicts_with_all = ["subdir", "dir"])]
    to_stdout: bool,
    /// Each segment into its own directory under DIR: NAME1, NAME2, ... (numbered on over
    /// several images).
    #[arg(short = 's', long, value_name = "NAME")]
    subdir: Option<String>,
    /// Give files the owner and group in the archive (the default for root, as cpio; without
    /// root only one's own ids can be given, others are a warning).
    #[arg(short = 'p', long = "preserve-permissions", overrides_with = "no_preserve_owner")]
    preserve: bool,
    /// Leave extracted files owned by the user who extracts, even as root (GNU cpio's switch).
    #[arg(long = "no-preserve-owner", overrides_with = "preserve")]
    no_preserve_owner: bool,
    /// Replace files that were in DIR before (without it they are left and reported), and go
    /// on past a file whose 070702 checksum does not match (the kernel stops there).
    #[arg(long)]
    force: bool,
}

const CHECK_EXAMPLES: &str = "\
Examples:
  leanrd check /boot/initrd.img-$(uname -r)    exit 0 only if the kernel unpacks all of it
  leanrd check a.img b.img                      several images";

#[derive(Args)]
#[command(after_long_help = CHECK_EXAMPLES)]
pub(crate) struct CheckArgs {
    /// The images (`-` for stdin).
    #[arg(required = true)]
    images: Vec<PathBuf>,
}

/// Walk the image `p`: a file (read with seeks past data nobody reads) or `-`, standard
/// input, streamed, whatever the compression.
pub(crate) fn walk(p: &Path, v: &mut dyn Visitor) -> Result<()> {
    if p.as_os_str() == "-" {
        Ok(read_image(io::stdin(), v)?)
    } else {
        Ok(read_image_file(File::open(p).with_context(|| format!("{}: cannot open", p.display()))?, v)?)
    }
}

fn mode_string(mode: u32) -> String {
    let t = FileKind::from_mode(mode).map_or('-', FileKind::letter);
    let mut s = String::from(t);
    let bits = [
        (0o400, 'r'),
        (0o200, 'w'),
        (0o100, 'x'),
        (0o40, 'r'),
        (0o20, 'w'),
        (0o10, 'x'),
        (0o4, 'r'),
        (0o2, 'w'),
        (0o1, 'x'),
    ];
    for (i, (b, c)) in bits.iter().enumerate() {
        let on = mode & b != 0;
        let special = match i {
            2 => mode & 0o4000 != 0,
            5 => mode & 0o2000 != 0,
            8 => mode & 0o1000 != 0,
            _ => false,
        };
        s.push(match (on, special) {
            (true, false) => *c,
            (false, false) => '-',
            (true, true) => {
                if i == 8 {
                    't'
                } else {
                    's'
                }
            }
            (false, true) => {
                if i == 8 {
                    'T'
                } else {
                    'S'
                }
            }
        });
    }
    s
}

/// Lower-case hex of `b`.
fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Civil date from a Unix time (UTC), for listings.
fn date(t: u32) -> String {
    let days = t as i64 / 86400;
    let secs = t as i64 % 86400;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}", secs / 3600, secs % 3600 / 60)
}

/// Sizes as `ls -h` prints them: powers of 1024, one decimal below 10, rounded up.
fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["K", "M", "G", "T", "P"];
    if n < 1024 {
        return n.to_string();
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    let mut r = if v < 10.0 { (v * 10.0).ceil() / 10.0 } else { v.ceil() };
    if r >= 1024.0 && u + 1 < UNITS.len() {
        // 1023.9K rounds up to the next unit.
        r = 1.0;
        u += 1;
    }
    if r < 10.0 { format!("{r:.1}{}", UNITS[u]) } else { format!("{r}{}", UNITS[u]) }
}

#[derive(Clone, Copy, PartialEq)]
enum Style {
    Names,
    Long { human: bool },
    Json,
}

struct Lister<'a, W: Write> {
    out: W,
    style: Style,
    select: &'a Select,
    image: String,
    format: Format,
    /// What the reader had to skip or found wrong (said on stderr; exit 1).
    problems: Vec<String>,
}

impl<W: Write> Visitor for Lister<'_, W> {
    fn segment(&mut self, s: &Segment) -> leanrd_archive::Result<()> {
        self.format = s.format;
        Ok(())
    }
    fn problem(&mut self, p: &Problem) -> leanrd_archive::Result<()> {
        if self.select.segment(p.segment) {
            self.problems.push(p.to_string());
        }
        Ok(())
    }
    fn done(&self, next: usize) -> bool {
        self.select.past_last(next)
    }
    fn entry(&mut self, e: &ReadEntry, data: &mut dyn Read) -> leanrd_archive::Result<()> {
        if !self.select.entry(e) {
            return Ok(());
        }
        let h = &e.header;
        if self.style == Style::Names {
            writeln!(self.out, "{}", e.name_escaped())?;
            return Ok(());
        }
        let target = if h.kind() == Some(FileKind::Symlink) && h.filesize as usize <= 4096 {
            let mut t = Vec::new();
            data.read_to_end(&mut t)?;
            Some(symlink_target(&t).to_vec())
        } else {
            None
        };
        if let Style::Long { human: hu } = self.style {
            let size = match h.kind() {
                Some(k) if k.is_device() => format!("{},{}", h.rdev_major, h.rdev_minor),
                _ if hu => human(h.filesize.into()),
                _ => h.filesize.to_string(),
            };
            write!(
                self.out,
                "{} {:>5} {:>5} {:>10} {} {}",
                mode_string(h.mode),
                h.uid,
                h.gid,
                size,
                date(h.mtime),
                e.name_escaped()
            )?;
            if let Some(t) = target {
                write!(self.out, " -> {}", escape(&t))?;
            }
            return Ok(writeln!(self.out)?);
        }
        let mut v = json!({
            "image": self.image,
            "name": String::from_utf8_lossy(&e.name),
            "type": leanrd_newc::kind_name(h.mode),
            "mode": h.mode,
            "uid": h.uid,
            "gid": h.gid,
            "size": h.filesize,
            "mtime": h.mtime,
            "nlink": h.nlink,
            "ino": h.ino,
            "dev_major": h.dev_major,
            "dev_minor": h.dev_minor,
            "rdev_major": h.rdev_major,
            "rdev_minor": h.rdev_minor,
            "namesize": h.namesize,
            "segment": e.segment,
            "compression": self.format.name(),
            "header_offset": e.stream_offset,
            "data_offset": e.data_offset,
            "target": target.as_deref().map(String::from_utf8_lossy),
        });
        // Lossless: a name or target that is not UTF-8 also comes as hex bytes.
        if std::str::from_utf8(&e.name).is_err() {
            v["name_hex"] = hex(&e.name).into();
        }
        if let Some(t) = target.as_deref().filter(|t| std::str::from_utf8(t).is_err()) {
            v["target_hex"] = hex(t).into();
        }
        Ok(writeln!(self.out, "{v}")?)
    }
}

/// Counts segments (`ls --count`).
#[derive(Default)]
struct Counter(usize);

impl Visitor for Counter {
    fn segment(&mut self, _s: &Segment) -> leanrd_archive::Result<()> {
        self.0 += 1;
        Ok(())
    }
    fn entry(&mut self, _e: &ReadEntry, _data: &mut dyn Read) -> leanrd_archive::Result<()> {
        Ok(())
    }
}

pub(crate) fn ls(a: LsArgs) -> Result<ExitCode> {
    let images = images(&a.image, &a.more);
    let several = images.len() > 1;
    let select = select(a.parts.as_deref(), &a.patterns)?;
    let style = match (a.json, a.long) {
        (true, _) => Style::Json,
        (false, true) => Style::Long { human: a.human },
        (false, false) => Style::Names,
    };
    let mut failed = false;
    for (i, img) in images.iter().enumerate() {
        if a.count {
            let mut c = Counter::default();
            walk(img, &mut c)?;
            if several {
                outln!("{}: {}", img.display(), c.0);
            } else {
                outln!("{}", c.0);
            }
            continue;
        }
        if several && style != Style::Json {
            // As `ls DIR1 DIR2`: a heading per image, a blank line between.
            outln!("{}{}:", if i > 0 { "\n" } else { "" }, img.display());
        }
        let out = BufWriter::new(io::stdout().lock());
        let image = img.display().to_string();
        let mut l = Lister { out, style, select: &select, image, format: Format::None, problems: Vec::new() };
        let walked = walk(img, &mut l);
        l.out.flush()?;
        walked?;
        for p in &l.problems {
            eprintln!("leanrd: {}: {p}", img.display());
        }
        failed |= !l.problems.is_empty();
    }
    failed |= !a.count && unmatched(&select);
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// `extract -O`: the data of the selected regular files, one after another, on stdout.
struct Catter<'a, W: Write> {
    out: W,
    select: &'a Select,
    force: bool,
    /// A checksum did not match and `force` is off: nothing more is written.
    stopped: bool,
    errors: Vec<String>,
}

impl<W: Write> Visitor for Catter<'_, W> {
    fn problem(&mut self, p: &Problem) -> leanrd_archive::Result<()> {
        if self.select.segment(p.segment) {
            self.errors.push(p.to_string());
        }
        Ok(())
    }
    fn done(&self, next: usize) -> bool {
        self.stopped || self.select.past_last(next)
    }
    fn entry(&mut self, e: &ReadEntry, data: &mut dyn Read) -> leanrd_archive::Result<()> {
        let h = &e.header;
        if self.stopped || !self.select.entry(e) || h.kind() != Some(FileKind::Regular) || h.filesize == 0 {
            return Ok(());
        }
        let mut summed = Summing::new(data);
        io::copy(&mut summed, &mut self.out)?;
        let sum = summed.sum();
        if h.crc && sum != h.check {
            self.stopped = !self.force;
            self.errors.push(format!(
                "{}: data checksum {sum:08x} does not match the header's {:08x}{}",
                e.name_escaped(),
                h.check,
                if self.force {
                    " (--force: going on)"
                } else {
                    ": stopped here, as the kernel does (--force goes on)"
                }
            ));
        }
        Ok(())
    }
}

pub(crate) fn extract(a: ExtractArgs) -> Result<ExitCode> {
    let images = images(&a.image, &a.more);
    let select = select(a.parts.as_deref(), &a.patterns)?;
    if a.to_stdout {
        let out = BufWriter::new(io::stdout().lock());
        let mut c = Catter { out, select: &select, force: a.force, stopped: false, errors: Vec::new() };
        // Every error fails the run, `--force` or not; only a bad checksum stops the output.
        let mut failed = false;
        for img in &images {
            let walked = walk(img, &mut c);
            c.out.flush()?;
            walked?;
            for e in c.errors.drain(..) {
                eprintln!("leanrd: {}: {e}", img.display());
                failed = true;
            }
        }
        failed |= unmatched(&select);
        return Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS });
    }
    let mut x = Extractor::new(&a.dir)?;
    x.force = a.force;
    x.select = select;
    x.subdir = a.subdir;
    if a.preserve {
        x.owner = true;
    } else if a.no_preserve_owner {
        x.owner = false;
    }
    let mut walked = Ok(());
    let mut errors = 0;
    for img in &images {
        walked = walk(img, &mut x);
        for e in x.errors.drain(..) {
            eprintln!("leanrd: {}: {e}", img.display());
            errors += 1;
        }
        if walked.is_err() {
            break;
        }
    }
    x.finish();
    for w in &x.warnings {
        eprintln!("leanrd: warning: {w}");
    }
    for e in &x.errors {
        eprintln!("leanrd: {}: {e}", a.dir.display());
    }
    errors += x.errors.len();
    walked?;
    if errors > 0 {
        eprintln!("leanrd: {errors} entries not extracted as the archive says");
    }
    let missed = unmatched(&x.select);
    Ok(if errors > 0 || missed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

pub(crate) fn check(a: CheckArgs) -> Result<ExitCode> {
    let mut failed = false;
    for img in &a.images {
        let mut c = Checker::new();
        if let Err(e) = walk(img, &mut c) {
            c.problems.push(format!("{e:#}"));
        }
        if c.problems.is_empty() {
            outln!("{}: OK ({} segments, {} entries)", img.display(), c.segments, c.entries);
            continue;
        }
        failed = true;
        for p in &c.problems {
            outln!("{}: {p}", img.display());
        }
        outln!("{}: {} problem(s); the kernel would not unpack all of it as intended", img.display(), c.problems.len());
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(mode_string(0o104755), "-rwsr-xr-x");
        assert_eq!(mode_string(0o41777), "drwxrwxrwt");
        assert_eq!(date(0), "1970-01-01 00:00");
        assert_eq!(date(1_700_000_000), "2023-11-14 22:13");
        for (n, h) in [(0, "0"), (1023, "1023"), (1024, "1.0K"), (1025, "1.1K"), (10 * 1024, "10K"), (10_300, "11K")] {
            assert_eq!(human(n), h, "{n}");
        }
        assert_eq!(human(5 << 30), "5.0G");
        assert_eq!(human((1 << 20) - 1), "1.0M");
    }
}
