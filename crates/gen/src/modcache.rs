//! A persistent cache of decompressed modules. Debian 13 ships every module as `.ko.xz`,
//! and decompressing the ~500 modules of a universal image is most of its build: xz decodes
//! at tens of MB/s. A module file does not change while its inode, size, mtime and ctime stay
//! the same, so its decompressed content and its facts (vermagic, signature, firmware) are
//! kept under that key and a later build takes them from here: the image's entry points at
//! the cached file (nothing is copied), and `--module-compression keep` reads no module at all.
//! The image's module files are also one compressed segment of their own (the kernel unpacks
//! concatenated archives), and that compressed segment is kept here too, named by the digest
//! of all it is made from: a build whose modules did not change compresses only the rest.
//!
//! Where: `$LEANRD_CACHE_DIR` (empty: no cache), else /var/cache/leanrd for root, else
//! `$XDG_CACHE_HOME/leanrd` or `~/.cache/leanrd`; entries under `modules/KVER/`. The cache is
//! used only when it is the user's own and writable by nobody else (what is in it goes into
//! images that the kernel executes). Entries are written to a temporary file and renamed; an
//! entry whose data file does not have the length its facts give (a crash before writeback)
//! is made again. Entries not used for [`UNUSED_DAYS`] are removed, at most once a day.
//!
//! Hand-written: the key is a file's identity, not its content (hashing the content would
//! cost the read the cache exists to avoid), which general-purpose caching crates do not do.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use leanrd_compress::Format;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::modules::ModuleFile;

/// Entries unused this long are removed.
pub(crate) const UNUSED_DAYS: u64 = 30;

/// Compressed module segments kept per kernel release (a host-only and a universal image,
/// each under both module strategies).
pub(crate) const KEPT_SEGMENTS: usize = 4;

/// The layout of entries; a change makes every older entry a miss.
const VERSION: &str = "leanrd-modcache-1";

const DAY: Duration = Duration::from_secs(24 * 3600);

/// The decompressed modules of one kernel release.
#[derive(Debug, Clone)]
pub struct ModuleCache {
    dir: PathBuf,
}

/// What is kept of a module beside its decompressed content.
#[derive(Serialize, Deserialize)]
struct Facts {
    /// The decompressed length (the data file must have it).
    len: u64,
    elf: bool,
    vermagic: Option<String>,
    signed: bool,
    firmware: Vec<String>,
}

/// A module found in the cache: its decompressed file and its facts (as decompressed).
pub struct Hit {
    /// The cached decompressed module file, to put in the image.
    pub data: PathBuf,
    /// What the decompressed module says of itself (vermagic, signature, firmware).
    pub file: ModuleFile,
}

/// The cache's base directory by the rules above; None when there is none.
pub(crate) fn base_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("LEANRD_CACHE_DIR") {
        return (!d.is_empty()).then(|| PathBuf::from(d));
    }
    if rustix::process::geteuid().is_root() {
        return Some(PathBuf::from("/var/cache/leanrd"));
    }
    match std::env::var_os("XDG_CACHE_HOME").filter(|d| Path::new(d).is_absolute()) {
        Some(d) => Some(PathBuf::from(d).join("leanrd")),
        None => std::env::var_os("HOME")
            .filter(|d| Path::new(d).is_absolute())
            .map(|h| PathBuf::from(h).join(".cache/leanrd")),
    }
}

/// A kernel release as a directory name (a release with a `/` or a leading dot is hashed).
fn release_dir(kver: &str) -> String {
    let plain = !kver.is_empty()
        && !kver.starts_with('.')
        && kver.bytes().all(|b| b.is_ascii_alphanumeric() || b"._+-~".contains(&b));
    if plain { kver.to_string() } else { format!("release-{}", &hex(&Sha256::digest(kver.as_bytes()))[..16]) }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `dir` may hold what goes into images: ours, writable by nobody else.
fn trusted(dir: &Path) -> Result<(), String> {
    let md = fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let euid = rustix::process::geteuid().as_raw();
    if !md.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    if md.uid() != euid {
        return Err(format!("{} belongs to uid {}, not to this user ({euid})", dir.display(), md.uid()));
    }
    if md.mode() & 0o022 != 0 {
        return Err(format!("{} is writable by others (mode {:04o})", dir.display(), md.mode() & 0o7777));
    }
    Ok(())
}

impl ModuleCache {
    /// The cache for kernel `kver` under `base` (made if missing). Err: why it is not used
    /// (the build goes on without it and says so).
    pub fn open(base: &Path, kver: &str) -> Result<ModuleCache, String> {
        let dir = base.join("modules").join(release_dir(kver));
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("{}: cannot create: {e}", dir.display()))?;
        for d in [base, &base.join("modules"), &dir] {
            trusted(d)?;
        }
        let cache = ModuleCache { dir };
        cache.sweep(base);
        Ok(cache)
    }

    /// The key of a module file by its identity, and the format it is decompressed from.
    fn key(src: &Path, md: &fs::Metadata, format: Format) -> String {
        let id = format!(
            "{VERSION}\n{}\n{format}\n{} {} {} {}.{} {}.{}\n",
            src.display(),
            md.dev(),
            md.ino(),
            md.len(),
            md.mtime(),
            md.mtime_nsec(),
            md.ctime(),
            md.ctime_nsec()
        );
        hex(&Sha256::digest(id.as_bytes()))
    }

    fn paths(&self, key: &str) -> (PathBuf, PathBuf) {
        (self.dir.join(format!("{key}.ko")), self.dir.join(format!("{key}.json")))
    }

    /// The module at `src` (stat `md`, compressed as `format`) if it is cached.
    pub fn get(&self, src: &Path, md: &fs::Metadata, format: Format) -> Option<Hit> {
        let (data, facts_path) = self.paths(&Self::key(src, md, format));
        let mut f = fs::File::open(&facts_path).ok()?;
        let fmd = f.metadata().ok()?;
        let mut text = Vec::new();
        f.read_to_end(&mut text).ok()?;
        let facts: Facts = serde_json::from_slice(&text).ok()?;
        if fs::metadata(&data).ok()?.len() != facts.len {
            return None;
        }
        // Used now: the sweep keeps it (written at most once a day per entry).
        if fmd.modified().ok().and_then(|m| m.elapsed().ok()).is_none_or(|age| age > DAY) {
            let _ = fs::File::options().write(true).open(&facts_path).and_then(|f| f.set_modified(SystemTime::now()));
        }
        let file = ModuleFile {
            compression: None,
            elf: facts.elf,
            vermagic: facts.vermagic,
            signed: facts.signed,
            corrupt: None,
            firmware: facts.firmware,
        };
        Some(Hit { data, file })
    }

    /// Keep the decompressed `plain` of the module at `src` with its facts; the cached data
    /// file, or None when it could not be written (the caller stages it instead).
    pub fn put(
        &self,
        src: &Path,
        md: &fs::Metadata,
        format: Format,
        plain: &[u8],
        file: &ModuleFile,
    ) -> Option<PathBuf> {
        let (data, facts_path) = self.paths(&Self::key(src, md, format));
        let facts = Facts {
            len: plain.len() as u64,
            elf: file.elf,
            vermagic: file.vermagic.clone(),
            signed: file.signed,
            firmware: file.firmware.clone(),
        };
        let write = |path: &Path, bytes: &[u8]| -> std::io::Result<()> {
            let mut t = tempfile::NamedTempFile::new_in(&self.dir)?;
            t.write_all(bytes)?;
            t.as_file().set_permissions(fs::Permissions::from_mode(0o644))?;
            t.persist(path).map_err(|e| e.error)?;
            Ok(())
        };
        // The data first: facts never name a file that is not there.
        write(&data, plain).ok()?;
        write(&facts_path, &serde_json::to_vec(&facts).ok()?).ok()?;
        Some(data)
    }

    /// Where the compressed segment of module files whose inputs have the digest `key` is
    /// kept (the image writer copies it in when it is there, and keeps it when it is not).
    /// The `KEPT_SEGMENTS` of this release used last stay; older ones go.
    pub fn segment(&self, key: &str) -> PathBuf {
        let path = self.dir.join(format!("segment-{key}"));
        if path.exists() {
            let _ = fs::File::options().write(true).open(&path).and_then(|f| f.set_modified(SystemTime::now()));
        }
        let mut kept: Vec<(SystemTime, PathBuf)> = fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("segment-") && e.path() != path)
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        kept.sort_by_key(|k| std::cmp::Reverse(k.0));
        for (_, old) in kept.iter().skip(KEPT_SEGMENTS - 1) {
            let _ = fs::remove_file(old);
        }
        path
    }

    /// Remove entries (and release directories) unused for [`UNUSED_DAYS`], at most once a
    /// day; best effort (an entry another build is taking survives: its facts were touched).
    fn sweep(&self, base: &Path) {
        let mark = base.join("modules/.swept");
        let recent = fs::metadata(&mark).and_then(|m| m.modified()).ok().and_then(|m| m.elapsed().ok());
        if recent.is_some_and(|age| age < DAY) {
            return;
        }
        let _ = fs::write(&mark, b"");
        let old = DAY * UNUSED_DAYS as u32;
        let Ok(releases) = fs::read_dir(base.join("modules")) else { return };
        for rel in releases.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
            let Ok(entries) = fs::read_dir(rel.path()) else { continue };
            for e in entries.flatten() {
                let p = e.path();
                let stale = e.metadata().ok().and_then(|m| m.modified().ok()).and_then(|m| m.elapsed().ok());
                if p.extension().is_some_and(|x| x == "json") && stale.is_some_and(|age| age > old) {
                    let _ = fs::remove_file(&p);
                    let _ = fs::remove_file(p.with_extension("ko"));
                } else if p.extension().is_some_and(|x| x == "ko") && !p.with_extension("json").exists() {
                    // Data whose facts were never written (a build killed between the two).
                    if stale.is_some_and(|age| age > DAY) {
                        let _ = fs::remove_file(&p);
                    }
                } else {
                    // Leftovers of a killed build after a day; segments unused for as long
                    // as entries.
                    let name = e.file_name().to_string_lossy().into_owned();
                    let limit = if name.starts_with(".tmp") {
                        Some(DAY)
                    } else if name.starts_with("segment-") {
                        Some(old)
                    } else {
                        None
                    };
                    if limit.is_some_and(|l| stale.is_some_and(|age| age > l)) {
                        let _ = fs::remove_file(&p);
                    }
                }
            }
            // Removed only when empty, and never the one this build is about to fill.
            if rel.path() != self.dir {
                let _ = fs::remove_dir(rel.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> ModuleFile {
        ModuleFile {
            compression: None,
            elf: true,
            vermagic: Some("6.12.0".into()),
            signed: true,
            corrupt: None,
            firmware: vec!["a.bin".into()],
        }
    }

    #[test]
    fn a_module_is_found_again_by_its_identity_and_missed_once_it_changes() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().join("cache");
        let src = t.path().join("m.ko.xz");
        fs::write(&src, b"compressed").unwrap();
        let c = ModuleCache::open(&base, "6.12.0").unwrap();
        let md = fs::metadata(&src).unwrap();
        assert!(c.get(&src, &md, Format::Xz).is_none());
        let data = c.put(&src, &md, Format::Xz, b"\x7fELF plain", &facts()).unwrap();
        assert_eq!(fs::read(&data).unwrap(), b"\x7fELF plain");
        let hit = c.get(&src, &md, Format::Xz).unwrap();
        assert_eq!((hit.data, hit.file), (data.clone(), facts()));
        // Another format of the same file is another entry.
        assert!(c.get(&src, &md, Format::Zstd).is_none());
        // Rewritten (new content, same length): ctime moves, the entry no longer matches.
        std::thread::sleep(Duration::from_millis(20));
        fs::write(&src, b"Compressed").unwrap();
        assert!(c.get(&src, &fs::metadata(&src).unwrap(), Format::Xz).is_none());
        // A data file cut short (a crash before writeback) is a miss.
        let md = fs::metadata(&src).unwrap();
        let data = c.put(&src, &md, Format::Xz, b"\x7fELF plain", &facts()).unwrap();
        fs::write(&data, b"").unwrap();
        assert!(c.get(&src, &md, Format::Xz).is_none());
        assert_eq!(fs::metadata(&base).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn a_cache_others_may_write_is_not_used() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().join("cache");
        fs::create_dir(&base).unwrap();
        fs::set_permissions(&base, fs::Permissions::from_mode(0o777)).unwrap();
        let e = ModuleCache::open(&base, "6.12.0").unwrap_err();
        assert!(e.contains("writable by others (mode 0777)"), "{e}");
    }

    #[test]
    fn the_segments_used_last_are_kept() {
        let t = tempfile::tempdir().unwrap();
        let c = ModuleCache::open(&t.path().join("cache"), "k").unwrap();
        let made: Vec<PathBuf> = (0..KEPT_SEGMENTS)
            .map(|i| {
                let p = c.segment(&format!("key{i}"));
                fs::write(&p, b"segment").unwrap();
                let when = SystemTime::now() - Duration::from_secs(100 - i as u64);
                fs::File::options().write(true).open(&p).unwrap().set_modified(when).unwrap();
                p
            })
            .collect();
        assert!(made.iter().all(|p| p.exists()));
        // The oldest, used again, becomes the newest; a new one then pushes out the one
        // used least recently.
        assert_eq!(c.segment("key0"), made[0]);
        let new = c.segment("new");
        fs::write(&new, b"segment").unwrap();
        let left: Vec<bool> = made.iter().map(|p| p.exists()).collect();
        assert!(left[0] && !left[1] && left[2..].iter().all(|e| *e), "{left:?}");
    }

    #[test]
    fn odd_releases_are_hashed_into_one_directory_name() {
        assert_eq!(release_dir("6.12.117+deb13-amd64"), "6.12.117+deb13-amd64");
        for odd in ["../x", "a/b", ".", "", ".hidden"] {
            let d = release_dir(odd);
            assert!(d.starts_with("release-") && !d.contains('/'), "{odd:?} -> {d}");
        }
    }

    #[test]
    fn entries_unused_for_a_month_are_swept_once_a_day() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().join("cache");
        let c = ModuleCache::open(&base, "k").unwrap();
        let src = t.path().join("m.ko.xz");
        fs::write(&src, b"x").unwrap();
        let md = fs::metadata(&src).unwrap();
        let data = c.put(&src, &md, Format::Xz, b"\x7fELF", &facts()).unwrap();
        let json = data.with_extension("json");
        let long_ago = SystemTime::now() - DAY * (UNUSED_DAYS as u32 + 1);
        fs::File::options().write(true).open(&json).unwrap().set_modified(long_ago).unwrap();
        // Swept today already: kept.
        ModuleCache::open(&base, "k").unwrap();
        assert!(data.exists());
        fs::File::options().write(true).open(base.join("modules/.swept")).unwrap().set_modified(long_ago).unwrap();
        ModuleCache::open(&base, "k").unwrap();
        assert!(!data.exists() && !json.exists());
    }
}
