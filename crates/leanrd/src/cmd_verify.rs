//! `leanrd verify`: the boot proof (leanrd_gen::proof) for any image, leanrd's or another
//! generator's, against this machine: will it find and mount the root?

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use leanrd_archive::names::{canonical, symlink_target};
use leanrd_archive::read::{ReadEntry, Visitor, read_image_file};
use leanrd_gen::Kernel;
use leanrd_gen::proof::{self, MemImage, Node};
use leanrd_newc::FileKind;
use serde_json::json;

const VERIFY_EXAMPLES: &str = "\
Examples:
  sudo leanrd verify                               the running kernel's image, for this machine
  sudo leanrd verify /boot/initrd.img-6.12.57      any generator's image
  sudo leanrd verify --json IMG                    the verdict as JSON";

#[derive(Args)]
#[command(after_long_help = VERIFY_EXAMPLES)]
pub(crate) struct VerifyArgs {
    /// The image (default: SYSROOT/boot/initrd.img-KVER of the running kernel).
    image: Option<PathBuf>,
    /// The kernel the image is for (default: its configuration's, else its one module
    /// directory, else the running kernel).
    #[arg(long, value_name = "KVER")]
    kernel: Option<String>,
    /// The system whose kernel tables say which drivers are modules (default /).
    #[arg(long, value_name = "DIR")]
    sysroot: Option<PathBuf>,
    /// Where proc/ and sys/ are read for the machine's facts (default /).
    #[arg(long, value_name = "DIR", hide = true)]
    host_root: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

/// Every entry of an image, the kernel's way: a later entry replaces an earlier one of the
/// same path; hard-link members share the data of the member that carries it.
#[derive(Default)]
struct Collect {
    image: MemImage,
    /// (ino, dev) of hard-linked members → the paths that have no data yet.
    links: BTreeMap<(u32, u32, u32), Vec<String>>,
    data: BTreeMap<(u32, u32, u32), Vec<u8>>,
    /// Each segment's compression, in order.
    formats: Vec<leanrd_compress::Format>,
}

impl Visitor for Collect {
    fn segment(&mut self, s: &leanrd_archive::read::Segment) -> leanrd_archive::Result<()> {
        self.formats.push(s.format);
        Ok(())
    }
    fn entry(&mut self, e: &ReadEntry, data: &mut dyn Read) -> leanrd_archive::Result<()> {
        let h = &e.header;
        let name = String::from_utf8_lossy(&canonical(&e.name)).into_owned();
        let path = if name == "." || name.is_empty() { "/".to_string() } else { format!("/{name}") };
        let mut bytes = Vec::new();
        let node = match h.kind() {
            Some(FileKind::Dir) => Node::Dir,
            Some(FileKind::Symlink) => {
                data.take(leanrd_newc::PATH_MAX as u64 + 1).read_to_end(&mut bytes)?;
                Node::Symlink(String::from_utf8_lossy(symlink_target(&bytes)).into_owned())
            }
            Some(FileKind::Regular) => Node::File,
            _ => Node::Other,
        };
        let mut content = None;
        if node == Node::File {
            // The kernel links members by (ino, dev): per segment, as it forgets them at each
            // trailer.
            let key = (e.segment as u32, h.ino, (h.dev_major << 12) ^ h.dev_minor);
            if h.filesize > 0 {
                if MemImage::wants_data(&path) {
                    data.read_to_end(&mut bytes)?;
                    content = Some(bytes);
                } else {
                    content = Some(Vec::new());
                }
                if h.nlink > 1 {
                    if let Some(c) = &content {
                        self.data.insert(key, c.clone());
                    }
                    for p in self.links.remove(&key).unwrap_or_default() {
                        if let Some((_, d)) = self.image.nodes.get_mut(&p) {
                            *d = content.clone();
                        }
                    }
                }
            } else if h.nlink > 1 {
                content = self.data.get(&key).cloned();
                if content.is_none() {
                    self.links.entry(key).or_default().push(path.clone());
                }
            } else {
                content = Some(Vec::new());
            }
        }
        self.image.nodes.insert(path, (node, content));
        Ok(())
    }
}

fn running_kernel() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_string())
}

pub(crate) fn run(a: VerifyArgs) -> Result<ExitCode> {
    let sysroot = a.sysroot.clone().unwrap_or_else(|| PathBuf::from("/"));
    let host_root = a.host_root.clone().unwrap_or_else(|| PathBuf::from("/"));
    let path = match &a.image {
        Some(p) => p.clone(),
        None => {
            let k = a.kernel.clone().or_else(running_kernel).context("which kernel? (--kernel)")?;
            sysroot.join(format!("boot/initrd.img-{k}"))
        }
    };
    let f = File::open(&path).with_context(|| format!("{}: cannot open", path.display()))?;
    let mut c = Collect::default();
    read_image_file(f, &mut c).with_context(|| format!("{}: cannot read", path.display()))?;
    let (image, formats) = (c.image, c.formats);
    let kver = a
        .kernel
        .clone()
        .or_else(|| proof::image_kver(&image))
        .or_else(running_kernel)
        .context("cannot tell which kernel the image is for (--kernel)")?;
    let facts = leanrd_gen::host::detect_all(&host_root, &sysroot).context("this machine's facts")?;
    let kernel = Kernel::load(&sysroot, &kver).ok();
    let mut result = proof::prove(&image, &facts, kernel.as_ref(), &kver);
    // The kernel must unpack every segment's compression (CONFIG_RD_*).
    if let Some(k) = &kernel {
        for f in formats {
            if let Err(e) = leanrd_gen::check_image_compression(&k.config, f, &kver) {
                proof::also_missing(&mut result, e);
            }
        }
    }
    let shown = path.display().to_string();
    if a.json {
        let (boots, missing, checks) = match &result {
            Ok(p) => (true, Vec::new(), p.checks),
            Err(m) => (false, m.clone(), 0),
        };
        let root = json!({ "source": facts.root.source, "fstype": facts.root.fstype });
        let v = json!({
            "image": shown, "kernel": kver, "boots": boots, "missing": missing, "checks": checks,
            "root": root, "kernel_tables": kernel.is_some(),
        });
        outln!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        match &result {
            Ok(p) => outln!(
                "{shown}: boots this machine (kernel {kver}; root {} {}): {} checks",
                facts.root.source,
                facts.root.fstype,
                p.checks
            ),
            Err(m) => {
                outln!("{shown}: would NOT boot this machine (kernel {kver}): {}", m[0]);
                for x in &m[1..] {
                    outln!("  also: {x}");
                }
            }
        }
        if kernel.is_none() {
            eprintln!(
                "leanrd: note: no module tables for kernel {kver} under {}: every bound driver was taken as a module",
                sysroot.display()
            );
        }
    }
    Ok(if result.is_ok() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
