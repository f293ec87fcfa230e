//! Output files that replace their destination only when complete, with a mode that never
//! exposes a secret, and that leave nothing behind when the process is killed.
//!
//! [`AtomicFile::create`] opens an unnamed file (`O_TMPFILE`) in the destination's directory,
//! so a build killed while writing leaves no file at all; where the file system has no
//! `O_TMPFILE` (vfat, some network file systems) a named `.NAME.leanrd-PID-N.tmp` is used.
//! [`AtomicFile::commit`] fsyncs, sets the final mode, names the file and renames it over the
//! destination. Temporaries of our own naming whose process is gone are removed by the next
//! run (`remove_stale`), both here and for the build's scratch directory.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use thiserror::Error;

/// An output that could not be written, with the file and the cause.
#[derive(Debug, Error)]
#[error("{path}: {what}")]
pub struct OutputError {
    /// The file (or directory) the operation was on.
    pub path: PathBuf,
    /// What failed, as a phrase (`cannot set the mode`).
    pub what: &'static str,
    /// The I/O error.
    #[source]
    pub source: std::io::Error,
}

fn err<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> OutputError + 'a {
    move |source| OutputError { path: path.to_path_buf(), what, source }
}

/// The mode a new image gets unless configured otherwise (`image_mode`): an initramfs can
/// hold keys, and nobody but root needs to read it.
pub const DEFAULT_IMAGE_MODE: u32 = 0o600;

/// The mode to give an output: `requested` if set (configuration), else the mode of the file
/// being replaced, else `new`. An output holding a secret is never readable or writable by
/// group or others, whatever was asked.
pub fn output_mode(dest: &Path, requested: Option<u32>, new: u32, secret: bool) -> u32 {
    let existing = fs::symlink_metadata(dest).ok().filter(|m| m.is_file()).map(|m| m.permissions().mode() & 0o7777);
    let mode = requested.or(existing).unwrap_or(new) & 0o7777;
    if secret { mode & 0o600 } else { mode }
}

/// The process umask (read from /proc, else by setting and restoring it).
pub fn umask() -> u32 {
    if let Ok(s) = fs::read_to_string("/proc/self/status")
        && let Some(v) = s.lines().find_map(|l| l.strip_prefix("Umask:"))
        && let Ok(m) = u32::from_str_radix(v.trim(), 8)
    {
        return m;
    }
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    rustix::process::umask(old);
    old.as_raw_mode()
}

/// A source that others may not read: a regular file without the other-read bit. Its
/// contents in an image make the image a secret too.
pub fn is_secret(mode: u32) -> bool {
    mode & 0o004 == 0
}

/// An output file that replaces its destination only when complete. Dropped uncommitted, it
/// leaves the destination untouched and removes what it made.
pub struct AtomicFile {
    dest: PathBuf,
    dir: PathBuf,
    /// The temporary's name when the file system has no `O_TMPFILE`.
    named: Option<PathBuf>,
    file: File,
    committed: bool,
}

/// `.NAME.leanrd-` : the prefix of our temporaries for an output called NAME.
fn tmp_prefix(base: &std::ffi::OsStr) -> OsString {
    let mut p = OsString::from(".");
    p.push(base);
    p.push(".leanrd-");
    p
}

static SEQ: AtomicUsize = AtomicUsize::new(0);

fn tmp_name(dir: &Path, base: &std::ffi::OsStr) -> PathBuf {
    let mut n = tmp_prefix(base);
    n.push(format!("{}-{}.tmp", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
    dir.join(n)
}

impl AtomicFile {
    /// Start replacing `dest`. The file is private (0600) until [`AtomicFile::commit`] gives
    /// it its final mode.
    pub fn create(dest: &Path) -> Result<AtomicFile, OutputError> {
        let dir = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let base = dest.file_name().ok_or_else(|| OutputError {
            path: dest.to_path_buf(),
            what: "not a file name",
            source: std::io::ErrorKind::InvalidInput.into(),
        })?;
        remove_stale(&dir, &tmp_prefix(base), b".tmp");
        let tmpfile = OpenOptions::new().read(true).write(true).mode(0o600).custom_flags(libc::O_TMPFILE).open(&dir);
        let (file, named) = match tmpfile {
            Ok(f) => (f, None),
            // No O_TMPFILE here: a named temporary, removed by the next run if we are killed.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)) => {
                let tmp = tmp_name(&dir, base);
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&tmp)
                    .map_err(err(&tmp, "cannot create temporary file"))?;
                (f, Some(tmp))
            }
            Err(e) => return Err(err(&dir, "cannot create a temporary file in this directory")(e)),
        };
        Ok(AtomicFile { dest: dest.to_path_buf(), dir, named, file, committed: false })
    }

    /// The file to write the output into (a temporary until [`AtomicFile::commit`]).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Set `mode`, put the file in place of the destination, and make both durable.
    ///
    /// The order keeps the previous file until the new one is whole, with one flush of the
    /// device instead of two: the data is written out and waited for (`sync_file_range`,
    /// no journal commit), then the file is named and renamed over the destination, then one
    /// `fsync` commits the journal (XFS, ext4, Btrfs) with everything before it. A rename
    /// reaches the disk only in a journal commit, and every commit flushes the device first,
    /// so the new name can never be durable before the data it names.
    pub fn commit(self, mode: u32) -> Result<(), OutputError> {
        self.put_in_place(mode, true)
    }

    /// Put the file in place without waiting for the disk: a failed or killed run still
    /// leaves the previous file whole (the rename comes after the last write), but when the
    /// new one reaches the disk, and in which order after a power loss, is left to the
    /// system's write-back, as with `cp` then `mv` (GNU cpio and 3cpio truncate the
    /// destination in place instead). For archives whose caller syncs if it needs to
    /// (`leanrd cpio -o FILE; sync FILE`); boot images and hooks use [`AtomicFile::commit`].
    pub fn commit_atomic(self, mode: u32) -> Result<(), OutputError> {
        self.put_in_place(mode, false)
    }

    fn put_in_place(mut self, mode: u32, durable: bool) -> Result<(), OutputError> {
        let dest = self.dest.clone();
        self.file.set_permissions(fs::Permissions::from_mode(mode)).map_err(err(&dest, "cannot set the mode"))?;
        let wait_all =
            libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        // SAFETY: a plain system call on an open descriptor.
        if durable && unsafe { libc::sync_file_range(self.file.as_raw_fd(), 0, 0, wait_all) } != 0 {
            // Not supported here: the whole fsync before the rename, as the safe order.
            self.file.sync_all().map_err(err(&dest, "fsync failed"))?;
        }
        let tmp = match self.named.take() {
            Some(t) => t,
            None => {
                let t = tmp_name(&self.dir, dest.file_name().expect("checked at create"));
                link_tmpfile(&self.file, &t).map_err(err(&t, "cannot name the temporary file"))?;
                t
            }
        };
        if let Err(e) = fs::rename(&tmp, &dest) {
            let _ = fs::remove_file(&tmp);
            return Err(err(&dest, "cannot rename the new file into place")(e));
        }
        self.committed = true;
        if durable {
            // The journal commit that makes data, name and rename durable together.
            self.file.sync_all().map_err(err(&dest, "fsync failed"))?;
        }
        Ok(())
    }
}

/// Give an `O_TMPFILE` file a name: `linkat(AT_EMPTY_PATH)` needs CAP_DAC_READ_SEARCH, the
/// /proc link does not.
fn link_tmpfile(file: &File, to: &Path) -> std::io::Result<()> {
    let fd = rustix::fs::CWD;
    let r = rustix::fs::linkat(file, "", fd, to, rustix::fs::AtFlags::EMPTY_PATH);
    match r {
        Ok(()) => Ok(()),
        Err(_) => {
            let proc = format!("/proc/self/fd/{}", file.as_raw_fd());
            rustix::fs::linkat(fd, proc.as_str(), fd, to, rustix::fs::AtFlags::SYMLINK_FOLLOW).map_err(Into::into)
        }
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.committed
            && let Some(t) = &self.named
        {
            let _ = fs::remove_file(t);
        }
    }
}

/// Hold an exclusive `flock` on the directory that will hold `dest` until the returned file
/// is dropped (released by the kernel if the process dies). Other leanrd runs that take it
/// wait; nothing is created.
pub fn lock_dir(dest: &Path) -> Result<File, OutputError> {
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let f = File::open(dir).map_err(err(dir, "cannot open the directory"))?;
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| err(dir, "cannot lock the directory")(e.into()))?;
    Ok(f)
}

/// Whether process `pid` is gone (`kill(pid, 0)` says ESRCH).
fn is_dead(pid: i32) -> bool {
    match rustix::process::Pid::from_raw(pid) {
        Some(p) => matches!(rustix::process::test_kill_process(p), Err(rustix::io::Errno::SRCH)),
        None => false,
    }
}

/// Remove what a killed leanrd left in `dir`: entries named `PREFIX<pid>-<anything>SUFFIX`
/// whose process no longer runs and which belong to us. Files and directories alike; errors
/// are ignored (another run may be removing the same).
pub(crate) fn remove_stale(dir: &Path, prefix: &std::ffi::OsStr, suffix: &[u8]) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    let me = rustix::process::geteuid().as_raw();
    let prefix = prefix.as_bytes();
    for de in rd.flatten() {
        let name = de.file_name();
        let n = name.as_bytes();
        let Some(rest) = n.strip_prefix(prefix) else { continue };
        if !rest.ends_with(suffix) {
            continue;
        }
        let digits: &[u8] = rest.split(|&b| b == b'-').next().unwrap_or_default();
        let Some(pid) = std::str::from_utf8(digits).ok().and_then(|d| d.parse::<i32>().ok()) else { continue };
        if pid as u32 == std::process::id() || !is_dead(pid) {
            continue;
        }
        let Ok(md) = de.path().symlink_metadata() else { continue };
        if md.uid() != me {
            continue;
        }
        let _ = if md.is_dir() { fs::remove_dir_all(de.path()) } else { fs::remove_file(de.path()) };
    }
}

/// A private scratch directory `leanrd-<what>-PID-XXXXXX` in the temporary directory, removed
/// on drop; what a killed run left there is removed first.
pub fn scratch_dir(what: &str) -> Result<tempfile::TempDir, OutputError> {
    let tmp = std::env::temp_dir();
    let prefix = format!("leanrd-{what}-");
    remove_stale(&tmp, std::ffi::OsStr::new(&prefix), b"");
    tempfile::Builder::new()
        .prefix(&format!("{prefix}{}-", std::process::id()))
        .tempdir()
        .map_err(err(&tmp, "cannot create a scratch directory"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_never_expose_a_secret() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("img");
        assert_eq!(output_mode(&p, None, DEFAULT_IMAGE_MODE, false), 0o600);
        assert_eq!(output_mode(&p, Some(0o644), DEFAULT_IMAGE_MODE, false), 0o644);
        assert_eq!(output_mode(&p, Some(0o644), DEFAULT_IMAGE_MODE, true), 0o600);
        fs::write(&p, b"x").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(output_mode(&p, None, DEFAULT_IMAGE_MODE, false), 0o640);
        assert_eq!(output_mode(&p, None, DEFAULT_IMAGE_MODE, true), 0o600);
        fs::set_permissions(&p, fs::Permissions::from_mode(0o400)).unwrap();
        assert_eq!(output_mode(&p, None, DEFAULT_IMAGE_MODE, true), 0o400);
    }

    #[test]
    fn commit_replaces_and_drop_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out");
        fs::write(&p, b"old").unwrap();
        {
            let f = AtomicFile::create(&p).unwrap();
            std::io::Write::write_all(&mut f.file(), b"half").unwrap();
        }
        assert_eq!(fs::read(&p).unwrap(), b"old");
        let f = AtomicFile::create(&p).unwrap();
        std::io::Write::write_all(&mut f.file(), b"new").unwrap();
        f.commit(0o640).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o7777, 0o640);
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn stale_temporaries_of_dead_processes_are_removed() {
        let d = tempfile::tempdir().unwrap();
        // A pid that cannot be running: above the kernel's pid_max limit (2^22).
        let dead = d.path().join(".img.leanrd-4194999-0.tmp");
        let alive = d.path().join(format!(".img.leanrd-{}-7.tmp", std::process::id()));
        let other = d.path().join(".other.leanrd-4194999-0.tmp");
        for f in [&dead, &alive, &other] {
            fs::write(f, b"x").unwrap();
        }
        let _f = AtomicFile::create(&d.path().join("img")).unwrap();
        assert!(!dead.exists());
        assert!(alive.exists() && other.exists());
    }
}
