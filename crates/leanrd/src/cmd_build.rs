//! `leanrd build`: generate a minimal initramfs for a kernel.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use leanrd_archive::image::{self, SegmentSpec};
use leanrd_archive::output::{self, AtomicFile, DEFAULT_IMAGE_MODE};
use leanrd_archive::{Data, Entry, Normalize, manifest};
use leanrd_compress::{Format, Spec};
use leanrd_gen::{Options, generate};
use serde::Deserialize;

#[derive(Args, Default)]
pub struct BuildArgs {
    /// Kernel release (default: the running kernel).
    #[arg(short = 'k', long = "kver", value_name = "KVER")]
    kver: Option<String>,
    /// Output image (default: /boot/initrd.img-KVER), written atomically.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Every storage, file-system and crypto driver: an image that boots on any machine.
    #[arg(long)]
    universal: bool,
    /// Root of the system to build for (binaries, libraries, modules, firmware).
    #[arg(long, value_name = "DIR")]
    sysroot: Option<PathBuf>,
    /// Configuration file (default: /etc/leanrd/leanrd.toml if present).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Compression (default zstd:3; `none` gives an uncompressed image aligned for reflinks).
    #[arg(short, long, value_name = "FORMAT[:LEVEL]")]
    compress: Option<Spec>,
    /// Data alignment for uncompressed images (default: 4096 when uncompressed).
    #[arg(long, value_name = "N")]
    data_align: Option<u64>,
    /// Print the image as a gen_init_cpio manifest (for `leanrd cpio`) and write no image.
    #[arg(long)]
    print_manifest: bool,
    /// Add a feature (repeatable).
    #[arg(long, value_name = "FEATURE")]
    include: Vec<String>,
    /// Leave a feature out (repeatable).
    #[arg(long, value_name = "FEATURE")]
    exclude: Vec<String>,
    /// The /init executable (default: $LEANRD_INIT, leanrd-init next to leanrd, /usr/lib/leanrd/leanrd-init).
    #[arg(long, value_name = "FILE")]
    init: Option<PathBuf>,
    /// Directory of user features (default /etc/leanrd/features.d under the sysroot).
    #[arg(long, value_name = "DIR")]
    features_dir: Option<PathBuf>,
    /// Where proc/ and sys/ are read for host detection (testing on fixture trees).
    #[arg(long, value_name = "DIR", hide = true)]
    host_root: Option<PathBuf>,
    /// Compression threads (default: all cores).
    #[arg(long, value_name = "N")]
    threads: Option<u32>,
    /// Rebuild even if nothing the image is made from has changed.
    #[arg(long)]
    force: bool,
    /// Mode of the image, octal (default: kept from the image replaced, else 0600). An image
    /// holding a file that others may not read is never readable by others.
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    image_mode: Option<u32>,
}

/// An octal file mode (`0640`, `640`, `0o640`).
pub fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    match u32::from_str_radix(digits, 8) {
        Ok(m) if m <= 0o7777 => Ok(m),
        _ => Err(format!("{s:?} is not an octal mode (e.g. 0600)")),
    }
}

/// Where the digest of an image's inputs is kept.
pub fn digest_path(image: &Path) -> PathBuf {
    let mut p = image.as_os_str().to_owned();
    p.push(".leanrd-digest");
    PathBuf::from(p)
}

/// What an image is made from, in one pass over its entries (one stat per source).
struct Inputs {
    /// A digest of the settings, every entry's metadata, and for its data the source's
    /// identity (path, size, mtime, inode) or, for generated and transformed files, the
    /// content itself.
    digest: String,
    /// The first regular file that others may not read (by its mode in the image or its
    /// source's on disk): the image must then be private too.
    secret: Option<String>,
}

fn inputs(segments: &[(&[Entry], Spec, Option<u64>)], tmp: &Path) -> Result<Inputs> {
    use leanrd_archive::output::is_secret;
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::MetadataExt;
    let mut h = Sha256::new();
    let mut secret = None;
    h.update(format!("leanrd {}\n", env!("CARGO_PKG_VERSION")));
    for (entries, spec, align) in segments {
        h.update(format!("segment {spec} {align:?}\n"));
        for e in entries.iter() {
            if e.is_regular() && is_secret(e.mode) && secret.is_none() {
                secret = Some(String::from_utf8_lossy(&e.name).into_owned());
            }
            h.update(&e.name);
            h.update(format!(" {:o} {} {} {} {} {}\n", e.mode, e.uid, e.gid, e.mtime, e.rdev_major, e.rdev_minor));
            match &e.data {
                Data::None => {}
                Data::Inline(v) => h.update(v),
                Data::File { path, .. } if path.starts_with(tmp) => {
                    h.update(fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?)
                }
                Data::File { .. } | Data::Tree { .. } => {
                    let path = e.source().expect("a file entry has a source");
                    let path = path.as_ref();
                    let md = fs::metadata(path).with_context(|| format!("{}: cannot stat", path.display()))?;
                    if is_secret(md.mode()) && secret.is_none() {
                        secret = Some(String::from_utf8_lossy(&e.name).into_owned());
                    }
                    h.update(format!(
                        "{} {} {} {} {} {}\n",
                        path.display(),
                        md.len(),
                        md.mtime(),
                        md.mtime_nsec(),
                        md.ino(),
                        md.dev()
                    ));
                }
            }
        }
    }
    Ok(Inputs { digest: h.finalize().iter().map(|b| format!("{b:02x}")).collect(), secret })
}

/// /etc/leanrd/leanrd.toml: the same settings as the command line (which wins).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    compress: Option<String>,
    data_align: Option<u64>,
    universal: Option<bool>,
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
    init: Option<PathBuf>,
    features_dir: Option<PathBuf>,
    output: Option<String>,
    threads: Option<u32>,
    /// Octal mode of new images (TOML `0o640` or the string "0640").
    image_mode: Option<ModeValue>,
}

/// `image_mode` as TOML writes it: an integer (`0o640`) or a string (`"0640"`).
#[derive(Deserialize)]
#[serde(untagged)]
enum ModeValue {
    Int(u32),
    Text(String),
}

impl ModeValue {
    fn get(&self, cfg: &Path) -> Result<u32> {
        match self {
            ModeValue::Int(m) if *m <= 0o7777 => Ok(*m),
            ModeValue::Int(m) => bail!("{}: image_mode {m:#o} has bits beyond 0o7777", cfg.display()),
            ModeValue::Text(t) => parse_mode(t).map_err(|e| anyhow::anyhow!("{}: image_mode: {e}", cfg.display())),
        }
    }
}

pub fn load_config(path: &Path, required: bool) -> Result<Config> {
    match fs::read_to_string(path) {
        Ok(t) => parse_config(&t, path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => Ok(Config::default()),
        Err(e) => Err(e).with_context(|| format!("{}: cannot read", path.display())),
    }
}

/// The configuration in `text`, read from `path` (named in errors, with the line).
fn parse_config(text: &str, path: &Path) -> Result<Config> {
    leanrd_gen::features::reject_nul(text, &path.display().to_string())?;
    toml::from_str(text).map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.to_string().trim_end()))
}

fn find_init(explicit: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p);
    }
    if let Some(p) = std::env::var_os("LEANRD_INIT") {
        return Ok(PathBuf::from(p));
    }
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        candidates.push(dir.join("leanrd-init"));
        // A development tree: target/release/leanrd and target/<triple>/init/leanrd-init.
        if let Some(target) = dir.parent() {
            candidates.push(target.join("x86_64-unknown-linux-gnu/init/leanrd-init"));
        }
    }
    candidates.push(PathBuf::from("/usr/lib/leanrd/leanrd-init"));
    candidates.push(PathBuf::from("/usr/local/lib/leanrd/leanrd-init"));
    candidates.into_iter().find(|p| p.is_file()).context(
        "no /init binary found: build it with `cargo build --profile init -p leanrd-init --features \
         standalone --target x86_64-unknown-linux-gnu` (see README) or pass --init",
    )
}

/// Entries with inline data get a real file in `dir`, so the printed manifest can be fed to
/// `leanrd cpio`.
fn materialise(entries: &mut [Entry], dir: &Path) -> Result<()> {
    for e in entries.iter_mut().filter(|e| e.is_regular()) {
        if let Data::Inline(v) = &e.data {
            let p = dir.join(String::from_utf8_lossy(&e.name).as_ref());
            fs::create_dir_all(p.parent().expect("has parent"))?;
            fs::write(&p, v).with_context(|| format!("{}: cannot write", p.display()))?;
            e.data = Data::file(p, v.len() as u64)?;
        }
    }
    Ok(())
}

/// Move entries' transformed files (in `tmp`, removed after the run) into `keep`.
fn keep_transformed(entries: &mut [Entry], tmp: &Path, keep: &Path) -> Result<()> {
    for e in entries.iter_mut() {
        if let Data::File { path, size } = &e.data
            && path.starts_with(tmp)
        {
            let dst = keep.join(path.strip_prefix(tmp).expect("prefix checked"));
            fs::create_dir_all(dst.parent().expect("has parent"))?;
            fs::copy(path, &dst).with_context(|| format!("{}: cannot copy", dst.display()))?;
            e.data = Data::file(dst, *size as u64)?;
        }
    }
    Ok(())
}

/// Make a removal in `path`'s directory durable before what follows it.
fn sync_dir(path: &Path) {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// A progress line on a terminal (nothing when stderr is a file or a pipe).
fn progress(start: Instant, what: &str) {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        eprintln!("leanrd: [{:6.3} s] {what}", start.elapsed().as_secs_f64());
    }
}

pub fn run(a: BuildArgs) -> Result<ExitCode> {
    let start = Instant::now();
    let sysroot = a.sysroot.clone().unwrap_or_else(|| PathBuf::from("/"));
    let cfg_path = a.config.clone().unwrap_or_else(|| sysroot.join("etc/leanrd/leanrd.toml"));
    let cfg = load_config(&cfg_path, a.config.is_some())?;
    let kver = match a.kver.clone() {
        Some(k) => k,
        None => leanrd_gen::modules::running_kernel()?,
    };
    let compress = match (&a.compress, &cfg.compress) {
        (Some(c), _) => *c,
        (None, Some(c)) => c.parse().map_err(|e| anyhow::anyhow!("{}: compress: {e}", cfg_path.display()))?,
        (None, None) => Spec::new(Format::Zstd),
    };
    let data_align = a.data_align.or(cfg.data_align).or((compress.format == Format::None).then_some(4096));
    if let Some(n) = data_align
        && (n < 4 || n % 4 != 0)
    {
        bail!("--data-align {n}: must be a positive multiple of 4");
    }
    let requested_mode = match (a.image_mode, &cfg.image_mode) {
        (Some(m), _) => Some(m),
        (None, Some(m)) => Some(m.get(&cfg_path)?),
        (None, None) => None,
    };
    let scratch = output::scratch_dir("build")?;
    let tmp = scratch.path();
    let opts = Options {
        sysroot: sysroot.clone(),
        host_root: a.host_root.clone().unwrap_or_else(|| PathBuf::from("/")),
        kver: kver.clone(),
        universal: a.universal || cfg.universal.unwrap_or(false),
        include: a.include.iter().chain(&cfg.include).cloned().collect(),
        exclude: a.exclude.iter().chain(&cfg.exclude).cloned().collect(),
        features_dir: Some(
            a.features_dir
                .clone()
                .or(cfg.features_dir.clone())
                .unwrap_or_else(|| sysroot.join("etc/leanrd/features.d")),
        ),
        init: find_init(a.init.clone().or(cfg.init.clone()))?,
        tmp: tmp.to_path_buf(),
    };
    progress(
        start,
        &format!("resolving for kernel {kver} ({})", if opts.universal { "universal" } else { "host-only" }),
    );
    let g = generate(&opts)?;
    progress(start, &format!("{} entries planned, features {}", g.main.items.len(), g.features.join(" ")));
    for w in &g.warnings {
        eprintln!("leanrd: warning: {w}");
    }
    let mut norm = Normalize::from_env();
    norm.mtime = Some(norm.clamp_mtime.unwrap_or(0));
    norm.owner = Some((0, 0));
    let mut early = match &g.early {
        Some(p) => p.entries(&norm)?,
        None => Vec::new(),
    };
    let mut main = g.main.entries(&norm)?;

    if a.print_manifest {
        // The generated files must outlive this run for the manifest to be usable: a private
        // directory with an unpredictable name, kept.
        let keep = tempfile::Builder::new()
            .prefix(&format!("leanrd-manifest-{kver}-"))
            .tempdir()
            .context("cannot create a directory for the generated files")?
            .keep();
        materialise(&mut main, &keep)?;
        keep_transformed(&mut early, tmp, &keep)?;
        keep_transformed(&mut main, tmp, &keep)?;
        println!("# leanrd build --print-manifest: kernel {kver}, features {}", g.features.join(" "));
        println!("# generated and transformed files are in {}", keep.display());
        if !early.is_empty() {
            println!("# early segment (uncompressed):");
            print!("{}", manifest::print(&early));
            println!("# main segment:");
        }
        print!("{}", manifest::print(&main));
        return Ok(ExitCode::SUCCESS);
    }

    let out_path = a
        .output
        .clone()
        .or(cfg.output.map(|o| PathBuf::from(o.replace("{kver}", &kver))))
        .unwrap_or_else(|| sysroot.join(format!("boot/initrd.img-{kver}")));
    let Inputs { digest, secret } =
        inputs(&[(&early, Spec::new(Format::None), None), (&main, compress, data_align)], tmp)?;
    let mode = output::output_mode(&out_path, requested_mode, DEFAULT_IMAGE_MODE, secret.is_some());
    if let (Some(name), Some(m)) = (&secret, requested_mode)
        && m != mode
    {
        eprintln!("leanrd: warning: image mode {m:04o} lowered to {mode:04o}: /{name} is not readable by others");
    }
    // The mode is part of what the image is: a change of mode rebuilds.
    let digest = format!("{digest} mode {mode:o}");
    let dpath = digest_path(&out_path);
    // One build at a time writes into this directory: two builds of the same image with
    // different inputs would otherwise leave one's image beside the other's digest.
    let _lock = output::lock_dir(&out_path)?;
    if !a.force && out_path.exists() && fs::read_to_string(&dpath).is_ok_and(|d| d.trim() == digest) {
        eprintln!("leanrd: {} is up to date (inputs unchanged; --force rebuilds)", out_path.display());
        return Ok(ExitCode::SUCCESS);
    }
    progress(start, &format!("writing {} ({compress})", out_path.display()));
    let out = AtomicFile::create(&out_path)?;
    let mut segs = Vec::new();
    if !early.is_empty() {
        segs.push(SegmentSpec { entries: early, compress: Spec::new(Format::None), data_align: None, checksum: false });
    }
    segs.push(SegmentSpec { entries: main, compress, data_align, checksum: false });
    let threads = a.threads.or(cfg.threads).unwrap_or_else(leanrd_compress::default_threads);
    let stats = image::write_image(out.file(), 0, segs, threads)?;
    // The old digest goes before the new image arrives: a build killed between the two
    // renames leaves no digest, so the next build rebuilds instead of trusting a stale one.
    match fs::remove_file(&dpath) {
        Ok(()) => sync_dir(&dpath),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("{}: cannot remove the old digest", dpath.display())),
    }
    out.commit(mode)?;
    let d = AtomicFile::create(&dpath)?;
    std::io::Write::write_all(&mut d.file(), format!("{digest}\n").as_bytes())
        .with_context(|| format!("{}: cannot write", dpath.display()))?;
    // The digest is no more readable than the image.
    d.commit(mode & 0o666)?;
    let size = fs::metadata(&out_path)?.len();
    let entries: usize = stats.iter().map(|s| s.archive.entries).sum();
    let cloned: u64 = stats.iter().map(|s| s.archive.cloned).sum();
    let copied: u64 = stats.iter().map(|s| s.archive.copied).sum();
    eprintln!(
        "leanrd: {} in {:.3} s: {entries} entries, {} modules, features {}; {size} bytes, {compress}; {cloned} B cloned, \
         {copied} B copied",
        out_path.display(),
        start.elapsed().as_secs_f64(),
        g.modules.len(),
        g.features.join(" ")
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bounded mutation fuzzing of the configuration parser: an error names the file, and
    /// an `image_mode` that parses is checked; never a panic.
    #[test]
    fn mutated_configs_never_panic() {
        let text = "compress = \"zstd:3\"\ndata_align = 4096\nuniversal = false\ninclude = [\"luks\"]\n\
                    exclude = []\ninit = \"/usr/lib/leanrd/leanrd-init\"\noutput = \"/boot/initrd.img-{kver}\"\n\
                    threads = 2\nimage_mode = 0o600\n";
        let path = Path::new("leanrd.toml");
        assert!(parse_config(text, path).is_ok());
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..3000 {
            let t = leanrd_gen::features::mutate_toml(&mut state, text);
            match parse_config(&t, path) {
                Ok(c) => {
                    if let Some(m) = &c.image_mode {
                        let _ = m.get(path);
                    }
                }
                Err(e) => assert!(e.to_string().starts_with("leanrd.toml"), "case {i}: {e}"),
            }
        }
    }
}
