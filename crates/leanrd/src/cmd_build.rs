//! `leanrd build`: generate a minimal initramfs for a kernel.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use leanrd_archive::image::{self, SegmentSpec};
use leanrd_archive::output::{self, AtomicFile, DEFAULT_IMAGE_MODE};
use leanrd_archive::{Data, Entry, Normalize, manifest};
use leanrd_compress::{Format, Spec};
use leanrd_gen::ModuleCache;
use leanrd_gen::request::{ArgKind, SETTINGS, command_line_value};
use leanrd_gen::{Generated, Request, Settings, generate};
use leanrd_gen::{Inputs, SegmentInputs, digest_path, inputs};

const BUILD_EXAMPLES: &str = "\
Examples:
  sudo leanrd build                                this machine's image for the running kernel
  sudo leanrd build -k 6.12.57+deb13-amd64         another installed kernel
  leanrd build --universal -o /tmp/any.img         for any machine
  leanrd build --print-manifest                    what it would hold; writes nothing
  sudo leanrd build --include rescue               with a rescue shell
  leanrd build --sysroot /srv/root -k KVER -o img  for another root tree
  sudo leanrd build --uki -o /efi/EFI/Linux/l.efi  a Unified Kernel Image";

#[derive(Args, Default)]
#[command(after_long_help = BUILD_EXAMPLES)]
pub(crate) struct BuildArgs {
    /// Kernel release (default: the running kernel).
    #[arg(short = 'k', long = "kver", value_name = "KVER")]
    kver: Option<String>,
    /// Root of the system to build for (binaries, libraries, modules, firmware).
    #[arg(long, value_name = "DIR")]
    sysroot: Option<PathBuf>,
    /// Configuration file (default: /etc/leanrd/leanrd.toml if present).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the image as a gen_init_cpio manifest (for `leanrd cpio`) and write no image.
    #[arg(long)]
    print_manifest: bool,
    /// Where proc/ and sys/ are read for host detection (testing on fixture trees).
    #[arg(long, value_name = "DIR", hide = true)]
    host_root: Option<PathBuf>,
    /// Rebuild even if nothing the image is made from has changed.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    settings: SettingArgs,
    #[command(flatten)]
    uki: crate::build_uki::UkiArgs,
}

/// The options that the configuration file's settings have too, made from leanrd_gen's
/// SETTINGS table (their name, value and help) rather than declared here a second time; what
/// was given, by key, is read by the same deserializer as the file (`Settings::layered`).
#[derive(Default)]
struct SettingArgs(Vec<(&'static str, Vec<String>)>);

impl SettingArgs {
    fn given(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| *k == key)
    }
}

impl clap::FromArgMatches for SettingArgs {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut s = SettingArgs::default();
        s.update_from_arg_matches(m)?;
        Ok(s)
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        for x in SETTINGS {
            let given = match x.arg {
                ArgKind::Switch => m.get_flag(x.key).then(Vec::new),
                _ => m.get_many::<String>(x.key).map(|v| v.cloned().collect()),
            };
            if let Some(values) = given {
                self.0.retain(|(k, _)| *k != x.key);
                self.0.push((x.key, values));
            }
        }
        Ok(())
    }
}

impl Args for SettingArgs {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        for x in SETTINGS {
            let long = x.flag.trim_start_matches('-');
            let mut arg = clap::Arg::new(x.key).long(long).help(x.text());
            if let Some(c) = x.short {
                arg = arg.short(c);
            }
            arg = match x.arg {
                ArgKind::Switch => arg.action(clap::ArgAction::SetTrue),
                kind => {
                    let key = x.key;
                    // Read as the file's value would be; a path must be UTF-8, as in the file.
                    use clap::builder::TypedValueParser;
                    let check = clap::builder::OsStringValueParser::new().try_map(move |v| {
                        let v = v
                            .into_string()
                            .map_err(|v| format!("{v:?} is not UTF-8, which leanrd.toml's values are"))?;
                        command_line_value(key, std::slice::from_ref(&v)).map(|_| v)
                    });
                    let a = arg.value_name(x.value_name).value_parser(check);
                    let a = if kind == ArgKind::List { a.action(clap::ArgAction::Append) } else { a };
                    // Completion of paths, by what the value names.
                    match x.value_name {
                        "FILE" => a.value_hint(clap::ValueHint::FilePath),
                        "DIR" => a.value_hint(clap::ValueHint::DirPath),
                        _ => a,
                    }
                }
            };
            cmd = cmd.arg(arg);
        }
        cmd
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
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

/// The image's segments as entries: early (uncompressed microcode), main, and the module
/// and firmware files (last: main has made their directories). The kernel unpacks the
/// archives one after the other; the modules' own segment is what a build whose modules did
/// not change takes from the cache instead of compressing it again.
struct Segments {
    early: Vec<Entry>,
    main: Vec<Entry>,
    modules: Vec<Entry>,
}

/// Whether an entry is a module or firmware file (it goes in the modules' segment).
fn module_payload(e: &Entry, modules: &std::collections::BTreeSet<&str>) -> bool {
    let name = String::from_utf8_lossy(&e.name);
    let name = name.trim_start_matches('/');
    e.is_regular()
        && (modules.contains(name) || name.starts_with("lib/firmware/") || name.starts_with("usr/lib/firmware/"))
}

fn segments(g: &Generated) -> Result<Segments> {
    let mut norm = Normalize::from_env();
    norm.mtime = Some(norm.clamp_mtime.unwrap_or(0));
    norm.owner = Some((0, 0));
    let early = match &g.early {
        Some(p) => p.entries(&norm)?,
        None => Vec::new(),
    };
    let modules: std::collections::BTreeSet<&str> = g.main.modules.keys().map(|k| k.trim_start_matches('/')).collect();
    let (modules, main) = g.main.entries(&norm)?.into_iter().partition(|e| module_payload(e, &modules));
    Ok(Segments { early, main, modules })
}

/// `--print-manifest`: the image as a gen_init_cpio manifest, with generated and transformed
/// files kept where the manifest points.
fn print_manifest(mut s: Segments, r: &Request, g: &Generated) -> Result<()> {
    // The generated files must outlive this run for the manifest to be usable: a private
    // directory with an unpredictable name, kept.
    let keep = tempfile::Builder::new()
        .prefix(&format!("leanrd-manifest-{}-", r.kver))
        .tempdir()
        .context("cannot create a directory for the generated files")?
        .keep();
    // One archive's content: the modules' files with the rest.
    s.main.append(&mut s.modules);
    materialise(&mut s.main, &keep)?;
    keep_transformed(&mut s.early, &r.tmp, &keep)?;
    keep_transformed(&mut s.main, &r.tmp, &keep)?;
    outln!("# leanrd build --print-manifest: kernel {}, features {}", r.kver, g.features.join(" "));
    outln!("# generated and transformed files are in {}", keep.display());
    if !s.early.is_empty() {
        outln!("# early segment (uncompressed):");
        out!("{}", manifest::print(&s.early));
        outln!("# main segment:");
    }
    out!("{}", manifest::print(&s.main));
    Ok(())
}

/// The digest of the image's inputs with its mode (a change of mode rebuilds), the mode, and
/// the modules' segment's own digest (its name in the cache).
fn digest_and_mode(s: &Segments, r: &Request) -> Result<(String, u32, String)> {
    let Inputs { digest, segments, secret } = inputs(
        &[
            SegmentInputs { entries: &s.early, compress: Spec::new(Format::None), data_align: None },
            SegmentInputs { entries: &s.main, compress: r.compress, data_align: r.data_align },
            SegmentInputs { entries: &s.modules, compress: r.compress, data_align: r.data_align },
        ],
        &r.tmp,
    )?;
    let mode = output::output_mode(&r.output, r.image_mode, DEFAULT_IMAGE_MODE, secret.is_some());
    if let (Some(name), Some(m)) = (&secret, r.image_mode)
        && m != mode
    {
        eprintln!("leanrd: warning: image mode {m:04o} lowered to {mode:04o}: /{name} is not readable by others");
    }
    let modules = segments.last().expect("three segments").clone();
    Ok((format!("{digest} mode {mode:o}"), mode, modules))
}

/// Write the image and then its digest, atomically each, the old digest removed first: a
/// build killed between the two renames leaves no digest, so the next build rebuilds
/// instead of trusting a stale one.
fn write(specs: Vec<SegmentSpec>, r: &Request, digest: &str, mode: u32) -> Result<Vec<image::SegmentStats>> {
    let dpath = digest_path(&r.output);
    let out = AtomicFile::create(&r.output)?;
    let stats = image::write_image(out.file(), 0, specs, r.threads)?;
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
    Ok(stats)
}

/// The image's segments: the early (microcode) one first, uncompressed, then the main one,
/// then the modules' (kept in the cache by the digest of its inputs, when compressed).
fn specs(s: Segments, r: &Request, cache: Option<&ModuleCache>, modules_digest: &str) -> Vec<SegmentSpec> {
    let mut segs = Vec::new();
    if !s.early.is_empty() {
        segs.push(SegmentSpec {
            entries: s.early,
            compress: Spec::new(Format::None),
            data_align: None,
            checksum: false,
            kept: None,
        });
    }
    segs.push(SegmentSpec {
        entries: s.main,
        compress: r.compress,
        data_align: r.data_align,
        checksum: false,
        kept: None,
    });
    if !s.modules.is_empty() {
        let kept = cache.filter(|_| r.compress.format != Format::None).map(|c| c.segment(modules_digest));
        segs.push(SegmentSpec {
            entries: s.modules,
            compress: r.compress,
            data_align: r.data_align,
            checksum: false,
            kept,
        });
    }
    segs
}

/// The static /init built with leanrd (build.rs); empty when built without one.
pub(crate) const EMBEDDED_INIT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/leanrd-init"));

/// The embedded /init as a file in the build's scratch directory (the plan takes files).
fn embedded_init(scratch: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let p = scratch.join("leanrd-init");
    std::fs::write(&p, EMBEDDED_INIT).with_context(|| format!("{}: cannot write", p.display()))?;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("{}: cannot set its mode", p.display()))?;
    Ok(p)
}

pub(crate) fn run(a: BuildArgs) -> Result<ExitCode> {
    let start = Instant::now();
    if a.uki.uki && !a.settings.given("output") {
        anyhow::bail!("--uki needs -o FILE.efi (where the EFI executable goes)");
    }
    let sysroot = a.sysroot.clone().unwrap_or_else(|| PathBuf::from("/"));
    let cfg_path = a.config.clone().unwrap_or_else(|| sysroot.join("etc/leanrd/leanrd.toml"));
    let mut settings = Settings::layered(&a.settings.0, &cfg_path, a.config.is_some())?;
    // The command line's alone: the file does not choose the system it is read from.
    settings.kver = a.kver.clone();
    settings.sysroot = a.sysroot.clone();
    settings.host_root = a.host_root.clone();
    let scratch = output::scratch_dir("build")?;
    // The /init built into leanrd is for its own architecture; another's is looked for.
    if settings.init.is_none()
        && std::env::var_os("LEANRD_INIT").is_none()
        && !EMBEDDED_INIT.is_empty()
        && leanrd_gen::sysroot_is_native(&sysroot, settings.kver.as_deref())
    {
        settings.init = Some(embedded_init(scratch.path())?);
    }
    let r = Request::new(settings, scratch.path())?;
    let how = if r.universal { "universal" } else { "host-only" };
    progress(start, &format!("resolving for kernel {} ({how})", r.kver));
    let g = generate(&r)?;
    progress(start, &format!("{} entries planned, features {}", g.main.items.len(), g.features.join(" ")));
    for w in &g.warnings {
        eprintln!("leanrd: warning: {w}");
    }
    for n in &g.notes {
        eprintln!("leanrd: note: {n}");
    }
    // Never replace an image with one that cannot boot this machine (host-only), or that
    // lacks what its features promise (universal).
    let why = if r.universal {
        "the universal image lacks what it promises"
    } else {
        "the image would not boot this machine"
    };
    if let Some((proof, took)) = &g.proof {
        match proof {
            Ok(p) => progress(start, &format!("boot proof: {} checks in {:.1} ms", p.checks, took.as_secs_f64() * 1e3)),
            Err(missing) if a.force || a.print_manifest => {
                for m in missing {
                    eprintln!("leanrd: warning: {why}: {m}");
                }
            }
            Err(missing) => {
                for m in &missing[1..] {
                    eprintln!("leanrd: also: {m}");
                }
                anyhow::bail!("{why}: {}; {} left as it is (--force writes it anyway)", missing[0], r.output.display());
            }
        }
    }
    let segs = segments(&g)?;
    if a.print_manifest {
        print_manifest(segs, &r, &g)?;
        return Ok(ExitCode::SUCCESS);
    }
    let (digest, mode, modules_digest) = digest_and_mode(&segs, &r)?;
    if a.uki.uki {
        // A UKI depends on more than the initramfs (kernel, stub, command line): always made.
        let _lock = output::lock_dir(&r.output)?;
        progress(start, &format!("writing the UKI {} ({})", r.output.display(), r.compress));
        let early = !segs.early.is_empty();
        let specs = specs(segs, &r, g.module_cache.as_ref(), &modules_digest);
        let l = crate::build_uki::write(&a.uki, &r, specs, early, mode)?;
        let size = fs::metadata(&r.output)?.len();
        eprintln!(
            "leanrd: {} in {:.3} s: UKI, {size} bytes; sections {}; kernel {} B cloned, {} B copied",
            r.output.display(),
            start.elapsed().as_secs_f64(),
            l.sections.iter().map(|(n, o, len)| format!("{n} at {o} ({len} B)")).collect::<Vec<_>>().join(", "),
            l.kernel_cloned,
            l.kernel_copied
        );
        return Ok(ExitCode::SUCCESS);
    }
    // One build at a time writes into this directory: two builds of the same image with
    // different inputs would otherwise leave one's image beside the other's digest.
    let _lock = output::lock_dir(&r.output)?;
    let up_to_date = fs::read_to_string(digest_path(&r.output)).is_ok_and(|d| d.trim() == digest);
    if !a.force && r.output.exists() && up_to_date {
        eprintln!("leanrd: {} is up to date (inputs unchanged; --force rebuilds)", r.output.display());
        return Ok(ExitCode::SUCCESS);
    }
    progress(start, &format!("writing {} ({})", r.output.display(), r.compress));
    let stats = write(specs(segs, &r, g.module_cache.as_ref(), &modules_digest), &r, &digest, mode)?;
    let size = fs::metadata(&r.output)?.len();
    let entries: usize = stats.iter().map(|s| s.archive.entries).sum();
    let cloned: u64 = stats.iter().map(|s| s.archive.cloned).sum();
    let copied: u64 = stats.iter().map(|s| s.archive.copied).sum();
    let reused = if stats.iter().any(|s| s.reused) { "; modules' segment reused" } else { "" };
    let proof = match &g.proof {
        Some((Ok(p), took)) => format!("; boot proof: {} checks, {:.1} ms", p.checks, took.as_secs_f64() * 1e3),
        Some((Err(_), _)) => "; boot proof FAILED (--force)".into(),
        None => String::new(),
    };
    eprintln!(
        "leanrd: {} in {:.3} s: {entries} entries, {} modules, features {}; {size} bytes, {}; {cloned} B cloned, \
         {copied} B copied{reused}{proof}",
        r.output.display(),
        start.elapsed().as_secs_f64(),
        g.modules.len(),
        g.features.join(" "),
        r.compress
    );
    Ok(ExitCode::SUCCESS)
}
