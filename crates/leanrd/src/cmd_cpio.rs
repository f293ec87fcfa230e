//! `leanrd cpio`: create an archive (a segment of an image).

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use leanrd_archive::image::{self, SegmentSpec};
use leanrd_archive::output::{self, AtomicFile};
use leanrd_archive::{Entry, Layout, Normalize, input, layout, manifest};
use leanrd_compress::{Format, Spec};

const CPIO_EXAMPLES: &str = "\
Examples:
  leanrd cpio --root tree -o tree.cpio                 a directory tree, sorted, reproducible
  leanrd cpio --root tree -c zstd:19 -o tree.cpio.zst  compressed as the kernel unpacks it
  leanrd cpio --root tree -c none --data-align 4096 -o img   data on block boundaries (reflinks)
  find . | leanrd cpio --paths > list.cpio             the paths on stdin, as cpio -o -H newc
  leanrd cpio manifest.txt -o img                      a gen_init_cpio manifest
  leanrd cpio --root more -o img --append              a second segment after the first";

#[derive(Args)]
#[command(after_long_help = CPIO_EXAMPLES)]
pub(crate) struct CpioArgs {
    /// gen_init_cpio manifest to archive (`-` for stdin).
    #[arg(conflicts_with_all = ["root", "paths"], required_unless_present_any = ["root", "paths"])]
    manifest: Option<PathBuf>,
    /// Archive the tree under DIR (names relative to it, sorted, parents first).
    #[arg(long, value_name = "DIR", conflicts_with = "paths")]
    root: Option<PathBuf>,
    /// Archive the paths listed on stdin, as `find . | cpio -o -H newc` does.
    #[arg(long)]
    paths: bool,
    /// With --paths: the list is NUL-separated.
    #[arg(short = '0', long = "null", requires = "paths")]
    null: bool,
    /// Output file, written atomically (default: stdout).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Add the archive as a new segment after the existing content of the output file.
    #[arg(long, requires = "output")]
    append: bool,
    /// Compression: none, zstd, lz4, xz, gzip, bzip2, lzma, lzo, optionally with :LEVEL.
    #[arg(short, long, value_name = "FORMAT[:LEVEL]", default_value = "none")]
    compress: Spec,
    /// Compression threads (default: all cores; the output does not depend on it).
    #[arg(long, value_name = "N")]
    threads: Option<u32>,
    /// Start the data of every regular file of at least N bytes at a multiple of N.
    #[arg(long, value_name = "N", value_parser = leanrd_archive::layout::parse_data_align)]
    data_align: Option<u64>,
    /// Write 070702 headers with data checksums.
    #[arg(long)]
    checksum: bool,
    /// Set every mtime to EPOCH (SOURCE_DATE_EPOCH, if set, clamps mtimes otherwise).
    #[arg(long, value_name = "EPOCH")]
    mtime: Option<u32>,
    /// Set every owner to UID:GID.
    #[arg(long, value_name = "UID:GID", value_parser = parse_owner)]
    owner: Option<(u32, u32)>,
    /// Keep source device numbers in c_maj/c_min (default: 0).
    #[arg(long)]
    keep_devno: bool,
    /// First inode number (GNU cpio --renumber-inodes starts at 0).
    #[arg(long, value_name = "N", default_value_t = 1)]
    first_ino: u32,
    /// Print what was written (entries, alignment, bytes cloned and copied, time) to stderr.
    #[arg(long)]
    stats: bool,
    /// Print the entries as a gen_init_cpio manifest instead of writing an archive.
    #[arg(long)]
    print_manifest: bool,
}

fn parse_owner(s: &str) -> Result<(u32, u32), String> {
    let (u, g) = s.split_once(':').ok_or("expected UID:GID")?;
    Ok((u.parse().map_err(|_| format!("bad uid {u:?}"))?, g.parse().map_err(|_| format!("bad gid {g:?}"))?))
}

fn read_stdin() -> Result<Vec<u8>> {
    let mut v = Vec::new();
    io::stdin().read_to_end(&mut v).context("cannot read stdin")?;
    Ok(v)
}

/// The entries the arguments ask for.
fn entries(a: &CpioArgs, norm: &Normalize) -> Result<Vec<Entry>> {
    if let Some(root) = &a.root {
        return Ok(input::entries(input::tree(root)?, norm)?);
    }
    if a.paths {
        let list = read_stdin()?;
        return Ok(input::entries(input::paths("<stdin>", input::split_path_list(&list, a.null)), norm)?);
    }
    let m = a.manifest.as_ref().expect("clap requires an input");
    let (text, origin) = if m.as_os_str() == "-" {
        (read_stdin()?, PathBuf::from("<stdin>"))
    } else {
        (fs::read(m).with_context(|| format!("{}: cannot read manifest", m.display()))?, m.clone())
    };
    Ok(manifest::parse_with_env(&text, &origin, norm)?)
}

pub(crate) fn run(a: CpioArgs) -> Result<ExitCode> {
    let mut norm = Normalize::from_env();
    norm.mtime = a.mtime;
    norm.owner = a.owner;
    norm.keep_devno = a.keep_devno;
    norm.first_ino = a.first_ino;
    let entries = entries(&a, &norm)?;
    if a.print_manifest {
        out!("{}", manifest::print(&entries));
        return Ok(ExitCode::SUCCESS);
    }
    let threads = a
        .threads
        .unwrap_or_else(|| if a.compress.format == Format::None { 1 } else { leanrd_compress::default_threads() });
    let seg = SegmentSpec { entries, compress: a.compress, data_align: a.data_align, checksum: a.checksum, kept: None };

    let stats = match &a.output {
        None => {
            // stdout: a stream, so data is copied (a reflink needs a file to clone into).
            let layout = Layout::plan(
                seg.entries,
                layout::Options { data_align: seg.data_align, checksum: seg.checksum, base: 0 },
            )?;
            let mut buf = BufWriter::with_capacity(1 << 20, io::stdout());
            let s = image::write_compressed(&layout, a.compress, threads, &mut buf)?;
            buf.flush().context("write to stdout failed")?;
            vec![(0, layout.len(), a.compress, s)]
        }
        Some(path) => {
            // New archives get 0666 less the umask, as a shell redirection would; one that
            // holds a file others may not read is not readable by others either.
            let secret = leanrd_archive::first_secret(&seg.entries, a.manifest.is_none()).is_some();
            let mode = output::output_mode(path, None, 0o666 & !output::umask(), secret);
            let out = AtomicFile::create(path)?;
            let mut start = 0;
            if a.append {
                // Copy the existing image into the temporary file (copy_file_range: a reflink
                // where the file system can), then add the segment after it.
                let mut old =
                    File::open(path).with_context(|| format!("{}: cannot open for --append", path.display()))?;
                let mut f = out.file();
                start = io::copy(&mut old, &mut f).with_context(|| format!("{}: cannot copy", path.display()))?;
                if start > 0 {
                    // The previous segment may be lz4, which needs four zero bytes after it.
                    start = image::next_start(start, Some(Format::Lz4));
                }
            }
            let s = image::write_segment(out.file(), start, seg, threads)?;
            out.commit_atomic(mode)?;
            vec![(s.offset, s.len, s.compress, s.archive)]
        }
    };
    if a.stats {
        for (offset, len, spec, s) in stats {
            eprintln!("segment at {offset}: {len} bytes, compression {spec}; {}", s.summary());
        }
    }
    Ok(ExitCode::SUCCESS)
}
