//! What the target kernel's configuration says about loading an initramfs: which module
//! compression it decompresses itself, which image compressions it unpacks, whether it
//! enforces module signatures. Read once with the kernel ([`crate::modules::Kernel`]); a
//! kernel whose configuration cannot be found is an assumption stated in the build's notes,
//! never a silent guess.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use leanrd_compress::Format;
use leanrd_kmod::{COMPRESSIONS, ModuleCompression};

use crate::plan::host_path;

/// Where the configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A file on the sysroot (its host path).
    File(PathBuf),
    /// The running kernel's /proc/config.gz.
    Running,
    /// None was found: the defaults of [`KernelConfig::assumption`] hold.
    Unknown,
}

/// A kernel configuration (`CONFIG_X=y` lines; `# CONFIG_X is not set` is absent).
#[derive(Debug, Clone)]
pub struct KernelConfig {
    /// Where the configuration was read from (or that none was found).
    pub origin: Origin,
    values: BTreeMap<String, String>,
}

impl KernelConfig {
    /// The configuration of kernel `kver` whose modules are in `dir` (image path): the
    /// first of /boot/config-KVER (Debian, Fedora), DIR/config (Arch), DIR/build/.config (a
    /// kernel tree), and, for the running kernel on the running system, /proc/config.gz.
    pub fn find(sysroot: &Path, kver: &str, dir: &str) -> KernelConfig {
        for p in [format!("/boot/config-{kver}"), format!("{dir}/config"), format!("{dir}/build/.config")] {
            let hp = host_path(sysroot, &p);
            if let Ok(text) = fs::read_to_string(&hp) {
                return KernelConfig::parse(&text, Origin::File(hp));
            }
        }
        let running = crate::modules::running_kernel().is_ok_and(|r| r == kver);
        if running
            && sysroot == Path::new("/")
            && let Ok(gz) = fs::read("/proc/config.gz")
            && let Ok(plain) = leanrd_compress::decompress_vec(Format::Gzip, &gz)
        {
            return KernelConfig::parse(&String::from_utf8_lossy(&plain), Origin::Running);
        }
        KernelConfig { origin: Origin::Unknown, values: BTreeMap::new() }
    }

    /// A kernel whose configuration is not known.
    pub fn unknown() -> KernelConfig {
        KernelConfig { origin: Origin::Unknown, values: BTreeMap::new() }
    }

    /// Parse `.config` text.
    pub fn parse(text: &str, origin: Origin) -> KernelConfig {
        let values = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("CONFIG_")?.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
            .collect();
        KernelConfig { origin, values }
    }

    /// Whether `CONFIG_{sym}` is built in (`=y`). An unknown configuration has nothing.
    pub fn y(&self, sym: &str) -> bool {
        self.values.get(sym).is_some_and(|v| v == "y")
    }

    /// Whether a configuration was found (an unknown one answers no to every `y`).
    pub fn known(&self) -> bool {
        self.origin != Origin::Unknown
    }

    /// The one module compression this kernel decompresses in `finit_module`. In
    /// kernel/module/decompress.c (5.17 to today) exactly one of the gzip, xz and zstd
    /// decompressors is compiled, the one `CONFIG_MODULE_COMPRESS_*` chose, and only with
    /// `CONFIG_MODULE_DECOMPRESS=y`: a kernel that ships .ko.xz loads no .ko.zst.
    pub(crate) fn module_decompression(&self) -> Option<ModuleCompression> {
        if !self.y("MODULE_DECOMPRESS") {
            return None;
        }
        COMPRESSIONS.into_iter().find(|c| self.y(&module_compress_symbol(c)))
    }

    /// Whether the kernel unpacks an initramfs compressed with `f` (`CONFIG_RD_*`). An
    /// unknown configuration is taken to unpack every format (stated by [`assumption`]).
    ///
    /// [`assumption`]: KernelConfig::assumption
    pub fn unpacks(&self, f: Format) -> bool {
        match rd_symbol(f) {
            None => true,
            Some(sym) => !self.known() || self.y(&sym),
        }
    }

    /// Whether the kernel loads only signed modules (`CONFIG_MODULE_SIG_FORCE`; a kernel
    /// booted with `module.sig_enforce=1` or locked down by Secure Boot does too, which no
    /// configuration says: leanrd keeps every signature, so such boots load them as well).
    pub(crate) fn sig_force(&self) -> bool {
        self.y("MODULE_SIG_FORCE")
    }

    /// For an unknown configuration: what the build assumed, for its notes. None when known.
    pub fn assumption(&self, kver: &str) -> Option<String> {
        (!self.known()).then(|| {
            format!(
                "kernel {kver}: no configuration found (/boot/config-{kver}, the module directory's config or \
                 build/.config): assumed it decompresses no module (compressed modules are stored decompressed, \
                 which every kernel loads), unpacks the image's compression and does not force module signatures"
            )
        })
    }

    /// Where the configuration was read, for messages.
    pub fn shown(&self) -> String {
        match &self.origin {
            Origin::File(p) => p.display().to_string(),
            Origin::Running => "/proc/config.gz".into(),
            Origin::Unknown => "no configuration".into(),
        }
    }
}

/// `MODULE_COMPRESS_XZ`: the symbol that selects a module compression (without CONFIG_).
pub(crate) fn module_compress_symbol(c: &ModuleCompression) -> String {
    format!("MODULE_COMPRESS_{}", c.format.to_ascii_uppercase())
}

/// `RD_ZSTD`: the symbol that lets the kernel unpack an initramfs in `f` (None: uncompressed).
pub(crate) fn rd_symbol(f: Format) -> Option<String> {
    (f != Format::None).then(|| format!("RD_{}", f.name().to_ascii_uppercase()))
}

/// The image compression check, for `build` (refuses) and `verify` (reports).
pub fn check_image_compression(config: &KernelConfig, f: Format, kver: &str) -> Result<(), String> {
    if config.unpacks(f) {
        return Ok(());
    }
    Err(format!(
        "the image is compressed with {f} but kernel {kver} cannot unpack it (CONFIG_{} is not set in {})",
        rd_symbol(f).unwrap_or_default(),
        config.shown()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(text: &str) -> KernelConfig {
        KernelConfig::parse(text, Origin::File("/boot/config-k".into()))
    }

    #[test]
    fn one_module_format_is_decompressed_and_only_with_module_decompress() {
        let debian13 = conf("CONFIG_MODULE_COMPRESS_XZ=y\nCONFIG_MODULE_DECOMPRESS=y\nCONFIG_RD_ZSTD=y\n");
        assert_eq!(debian13.module_decompression().map(|c| c.suffix), Some(".xz"));
        let arch = conf("CONFIG_MODULE_COMPRESS_ZSTD=y\nCONFIG_MODULE_DECOMPRESS=y\n");
        assert_eq!(arch.module_decompression().map(|c| c.format), Some("zstd"));
        // Compressed by the build, not decompressible by the kernel (Ubuntu before 6.x).
        assert_eq!(conf("CONFIG_MODULE_COMPRESS_ZSTD=y\n").module_decompression(), None);
        // The old assumption, MODULE_DECOMPRESS alone: says no format.
        assert_eq!(conf("CONFIG_MODULE_DECOMPRESS=y\n").module_decompression(), None);
        assert_eq!(
            conf("# CONFIG_MODULE_DECOMPRESS is not set\nCONFIG_MODULE_COMPRESS_XZ=y\n").module_decompression(),
            None
        );
    }

    #[test]
    fn every_module_compression_is_a_format_the_generator_decompresses() {
        for c in COMPRESSIONS {
            let f = Format::from_name(c.format).unwrap_or_else(|| panic!("{} is no Format", c.format));
            let data = leanrd_compress::compress_vec(leanrd_compress::Spec::new(f), 1, b"\x7fELF module").unwrap();
            assert_eq!(leanrd_compress::decompress_vec(f, &data).unwrap(), b"\x7fELF module");
            assert_eq!(Format::detect(&data), Some(f));
        }
    }

    #[test]
    fn image_compressions_need_their_rd_symbol() {
        let c = conf("CONFIG_RD_GZIP=y\nCONFIG_RD_XZ=y\n# CONFIG_RD_ZSTD is not set\n");
        assert!(c.unpacks(Format::Gzip) && c.unpacks(Format::Xz) && c.unpacks(Format::None));
        let e = check_image_compression(&c, Format::Zstd, "6.12").unwrap_err();
        assert!(e.contains("CONFIG_RD_ZSTD is not set in /boot/config-k"), "{e}");
        assert_eq!(rd_symbol(Format::Lz4).as_deref(), Some("RD_LZ4"));
        assert_eq!(rd_symbol(Format::Bzip2).as_deref(), Some("RD_BZIP2"));
        let unknown = KernelConfig::unknown();
        assert!(unknown.unpacks(Format::Zstd) && unknown.module_decompression().is_none());
        assert!(unknown.assumption("6.12").unwrap().contains("assumed"));
        assert!(c.assumption("6.12").is_none());
    }

    #[test]
    fn found_where_distributions_put_it() {
        let t = tempfile::tempdir().unwrap();
        let dir = "/usr/lib/modules/6.12.1-arch1";
        fs::create_dir_all(host_path(t.path(), dir)).unwrap();
        fs::write(host_path(t.path(), &format!("{dir}/config")), "CONFIG_MODULE_SIG_FORCE=y\n").unwrap();
        let c = KernelConfig::find(t.path(), "6.12.1-arch1", dir);
        assert!(c.sig_force() && c.known(), "{:?}", c.origin);
        fs::create_dir_all(t.path().join("boot")).unwrap();
        fs::write(t.path().join("boot/config-6.12.1-arch1"), "CONFIG_RD_XZ=y\n").unwrap();
        let c = KernelConfig::find(t.path(), "6.12.1-arch1", dir);
        assert!(!c.sig_force(), "/boot/config-KVER comes first");
        assert!(!KernelConfig::find(t.path(), "other", "/lib/modules/other").known());
    }
}
