//! `leanrd ls`, `extract`, `check`: read images.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use leanrd_archive::check::Checker;
use leanrd_archive::extract::Extractor;
use leanrd_archive::names::{escape, symlink_target};
use leanrd_archive::read::{Problem, ReadEntry, Segment, Visitor, read_image, read_image_file};
use leanrd_compress::Format;
use leanrd_newc::FileKind;
use serde_json::json;

#[derive(Args)]
pub struct LsArgs {
    /// The image (`-` for stdin).
    image: PathBuf,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ExtractArgs {
    /// The image (`-` for stdin).
    image: PathBuf,
    /// Directory to extract into (created if missing).
    #[arg(short = 'C', long = "directory", value_name = "DIR", default_value = ".")]
    dir: PathBuf,
    /// Go on past a file whose 070702 checksum does not match (the kernel stops there).
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
pub struct CheckArgs {
    /// The image.
    image: PathBuf,
}

/// Walk the image `p`: a file (read with seeks past data nobody reads) or `-`, standard
/// input, streamed, whatever the compression.
pub fn walk(p: &Path, v: &mut dyn Visitor) -> Result<()> {
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

struct Lister<W: Write> {
    out: W,
    json: bool,
    format: Format,
    /// What the reader had to skip or found wrong (said on stderr; exit 1).
    problems: Vec<String>,
}

impl<W: Write> Visitor for Lister<W> {
    fn segment(&mut self, s: &Segment) -> leanrd_archive::Result<()> {
        self.format = s.format;
        Ok(())
    }
    fn problem(&mut self, p: &Problem) -> leanrd_archive::Result<()> {
        self.problems.push(p.to_string());
        Ok(())
    }
    fn entry(&mut self, e: &ReadEntry, data: &mut dyn Read) -> leanrd_archive::Result<()> {
        let h = &e.header;
        let target = if h.kind() == Some(FileKind::Symlink) && h.filesize as usize <= 4096 {
            let mut t = Vec::new();
            data.read_to_end(&mut t)?;
            Some(symlink_target(&t).to_vec())
        } else {
            None
        };
        if self.json {
            let mut v = json!({
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
            writeln!(self.out, "{v}")?;
        } else {
            let size = match h.kind() {
                Some(k) if k.is_device() => format!("{},{}", h.rdev_major, h.rdev_minor),
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
            writeln!(self.out)?;
        }
        Ok(())
    }
}

pub fn ls(a: LsArgs) -> Result<ExitCode> {
    let out = BufWriter::new(io::stdout().lock());
    let mut l = Lister { out, json: a.json, format: Format::None, problems: Vec::new() };
    walk(&a.image, &mut l)?;
    l.out.flush()?;
    for p in &l.problems {
        eprintln!("leanrd: {}: {p}", a.image.display());
    }
    Ok(if l.problems.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

pub fn extract(a: ExtractArgs) -> Result<ExitCode> {
    let mut x = Extractor::new(&a.dir)?;
    x.force = a.force;
    let walked = walk(&a.image, &mut x);
    x.finish();
    for w in &x.warnings {
        eprintln!("leanrd: warning: {w}");
    }
    for e in &x.errors {
        eprintln!("leanrd: {}: {e}", a.image.display());
    }
    walked?;
    if x.errors.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("leanrd: {}: {} entries not extracted as the archive says", a.image.display(), x.errors.len());
        Ok(ExitCode::FAILURE)
    }
}

pub fn check(a: CheckArgs) -> Result<ExitCode> {
    let mut c = Checker::new();
    let r = walk(&a.image, &mut c);
    if let Err(e) = r {
        c.problems.push(format!("{e:#}"));
    }
    if c.problems.is_empty() {
        outln!("{}: OK ({} segments, {} entries)", a.image.display(), c.segments, c.entries);
        Ok(ExitCode::SUCCESS)
    } else {
        for p in &c.problems {
            outln!("{}: {p}", a.image.display());
        }
        outln!(
            "{}: {} problem(s); the kernel would not unpack all of it as intended",
            a.image.display(),
            c.problems.len()
        );
        Ok(ExitCode::FAILURE)
    }
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
    }
}
