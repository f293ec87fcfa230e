//! A root on a Network Block Device: dracut's `root=nbd:SERVER:PORT[:FSTYPE[:ROOTFLAGS[:NBDOPTS]]]`
//! (the root is the device itself) and `netroot=nbd:...` (the device is connected, and `root=`
//! finds the root on it: a LUKS container, an LVM volume group...).
//!
//! As dracut-ng's modules.d/74nbd reads it (parse-nbdroot.sh, nbdroot.sh): SERVER is a host
//! name, an IPv4 address or an IPv6 address in brackets; PORT is a port number, or else the
//! name of an export on the default port (dracut passes it to `nbd-client -name`); NBDOPTS is
//! a comma list of nbd-client's options, of which `bs=` and `timeout=` mean something here.
//! parse-nbdroot.sh's comment also names `PORT/EXPORTNAME`: read as both.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

/// The NBD port IANA assigned (nbd-client's and nbd-server's default).
pub const NBD_PORT: u16 = 10809;

/// An NBD export to connect to, and how to mount the root on it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NbdTarget {
    /// A host name, an IPv4 address, or an IPv6 address in brackets.
    pub server: String,
    /// The port ([`NBD_PORT`] unless given).
    pub port: u16,
    /// The export's name; None: the server's default export (the empty name).
    pub export: Option<String>,
    /// The root's file system type (FSTYPE); None: as probed.
    pub fstype: Option<String>,
    /// The root's mount options (ROOTFLAGS); None: `rootflags=`.
    pub rootflags: Option<String>,
    /// `bs=`: the device's block size in bytes (512 to 4096, a power of two); None: the
    /// kernel's default (1024).
    pub block_size: Option<u32>,
    /// `timeout=`: seconds a request may take before the kernel fails it; None: the kernel's.
    pub timeout: Option<u32>,
    /// NBDOPTS this client does not act on (nbd-client's `persist`, `swap`, ...): reported.
    pub ignored: Vec<String>,
}

/// Why an `nbd:` value could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("\"{spec}\" is not an NBD root: {why}")]
pub struct NbdError {
    /// The text that was given.
    pub spec: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// A field that is one word: no space, control character or ':' (the separator).
fn word(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| !c.is_control() && c != ' ' && c != ':')
}

impl NbdTarget {
    /// `nbd:SERVER:PORT[:FSTYPE[:ROOTFLAGS[:NBDOPTS]]]`, as dracut reads it (see the module).
    pub fn parse(spec: &str) -> Result<NbdTarget, NbdError> {
        let err = |why| NbdError { spec: spec.to_string(), why };
        let rest = spec.strip_prefix("nbd:").ok_or(err("it does not start with nbd:"))?;
        let (server, rest) = if let Some(v6) = rest.strip_prefix('[') {
            let (a, r) = v6.split_once(']').ok_or(err("an unclosed '[' around the server"))?;
            if a.is_empty() || !a.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
                return Err(err("the bracketed server is not an IPv6 address"));
            }
            let r = r.strip_prefix(':').ok_or(err("no port after the server"))?;
            (alloc::format!("[{a}]"), r)
        } else {
            let (s, r) = rest.split_once(':').ok_or(err("no port after the server"))?;
            (s.to_string(), r)
        };
        if !server.starts_with('[') && (!word(&server) || server.contains('/')) {
            return Err(err("no server, or a space, '/' or control character in it"));
        }
        let f: Vec<&str> = rest.splitn(4, ':').collect();
        let field = |i: usize| f.get(i).copied().filter(|v| !v.is_empty());
        let mut t = NbdTarget { server, port: NBD_PORT, ..NbdTarget::default() };
        let port = field(0).ok_or(err("no port or export name"))?;
        let (port, export) = match port.split_once('/') {
            Some((p, e)) => (Some(p), Some(e)),
            None if port.bytes().all(|b| b.is_ascii_digit()) => (Some(port), None),
            None => (None, Some(port)),
        };
        if let Some(p) = port {
            t.port = p.parse().ok().filter(|&p| p > 0).ok_or(err("the port is not a number from 1 to 65535"))?;
        }
        if let Some(e) = export {
            // The protocol's limit is 4096 bytes; a name is text.
            if !word(e) || e.len() > 4096 {
                return Err(err("the export name is empty, too long, or has a space or control character"));
            }
            t.export = Some(e.to_string());
        }
        if let Some(fs) = field(1) {
            if !fs.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b',') {
                return Err(err("the file system type is not a name"));
            }
            t.fstype = Some(fs.to_string());
        }
        if let Some(fl) = field(2) {
            if !word(fl) {
                return Err(err("a space or control character in the mount options"));
            }
            t.rootflags = Some(fl.to_string());
        }
        if let Some(opts) = field(3) {
            if opts.chars().any(|c| c.is_control() || c == ' ') {
                return Err(err("a space or control character in the NBD options"));
            }
            for o in opts.split(',').filter(|o| !o.is_empty()) {
                let num = |v: &str| v.parse::<u32>().ok();
                match o.split_once('=') {
                    Some(("bs", v)) => {
                        let bs = num(v).filter(|b| (512..=4096).contains(b) && b.is_power_of_two());
                        t.block_size = Some(bs.ok_or(err("bs= is not a power of two from 512 to 4096"))?);
                    }
                    Some(("timeout", v)) => {
                        t.timeout = Some(num(v).filter(|&s| s > 0).ok_or(err("timeout= is not a number of seconds"))?)
                    }
                    _ => t.ignored.push(o.to_string()),
                }
            }
        }
        Ok(t)
    }

    /// The server as a connection takes it: an IPv6 address without its brackets.
    pub fn host(&self) -> &str {
        self.server.strip_prefix('[').and_then(|s| s.strip_suffix(']')).unwrap_or(&self.server)
    }
}

/// The spelling [`NbdTarget::parse`] reads back.
impl fmt::Display for NbdTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "nbd:{}:", self.server)?;
        match &self.export {
            // dracut's spelling: a name where the port goes, on the default port.
            Some(e) if self.port == NBD_PORT && !e.contains('/') && !e.bytes().all(|b| b.is_ascii_digit()) => {
                write!(f, "{e}")?
            }
            Some(e) => write!(f, "{}/{e}", self.port)?,
            None => write!(f, "{}", self.port)?,
        }
        let mut opts: Vec<String> = Vec::new();
        if let Some(b) = self.block_size {
            opts.push(alloc::format!("bs={b}"));
        }
        if let Some(s) = self.timeout {
            opts.push(alloc::format!("timeout={s}"));
        }
        opts.extend(self.ignored.iter().cloned());
        let fields = [self.fstype.clone(), self.rootflags.clone(), (!opts.is_empty()).then(|| opts.join(","))];
        let last = fields.iter().rposition(Option::is_some);
        for (i, v) in fields.iter().enumerate() {
            if last.is_some_and(|l| i <= l) {
                write!(f, ":{}", v.as_deref().unwrap_or(""))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> NbdTarget {
        NbdTarget::parse(s).unwrap()
    }

    #[test]
    fn dracut_spellings() {
        let t = p("nbd:192.168.50.1:10809");
        assert_eq!((t.server.as_str(), t.port, t.export.as_deref()), ("192.168.50.1", NBD_PORT, None));
        // dracut's TEST-72-NBD: a name where the port goes is an export on the default port.
        let t = p("nbd:192.168.50.1:raw:ext4:errors=panic");
        assert_eq!((t.port, t.export.as_deref()), (NBD_PORT, Some("raw")));
        assert_eq!((t.fstype.as_deref(), t.rootflags.as_deref()), (Some("ext4"), Some("errors=panic")));
        let t = p("nbd:192.168.50.1:raw::errors=panic");
        assert_eq!((t.fstype, t.rootflags.as_deref()), (None, Some("errors=panic")));
        let t = p("nbd:[fd00::1]:10810/root:xfs:ro,noatime:bs=4096,timeout=30,persist");
        assert_eq!((t.server.as_str(), t.host(), t.port), ("[fd00::1]", "fd00::1", 10810));
        assert_eq!((t.export.as_deref(), t.block_size, t.timeout), (Some("root"), Some(4096), Some(30)));
        assert_eq!(t.ignored, ["persist"]);
        assert_eq!(t.rootflags.as_deref(), Some("ro,noatime"));
        for s in [
            "nbd:h:1",
            "nbd:h:raw",
            "nbd:h:10809/123",
            "nbd:h:10809/a/b",
            "nbd:[::1]:2/x:ext4",
            "nbd:h:3:::bs=512",
            "nbd:h:4::ro",
            "nbd:10.0.0.1:10809:ext4:ro:timeout=5,swap",
        ] {
            let t = p(s);
            assert_eq!(NbdTarget::parse(&t.to_string()), Ok(t.clone()), "{s} -> {t}");
        }
    }

    #[test]
    fn hostile_values_are_refused() {
        let e = |s: &str| NbdTarget::parse(s).unwrap_err().why;
        assert_eq!(e("iscsi:h:1"), "it does not start with nbd:");
        assert_eq!(e("nbd:"), "no port after the server");
        assert_eq!(e("nbd:h"), "no port after the server");
        assert_eq!(e("nbd::10809"), "no server, or a space, '/' or control character in it");
        assert_eq!(e("nbd:h:"), "no port or export name");
        assert_eq!(e("nbd:h:99999"), "the port is not a number from 1 to 65535");
        assert_eq!(e("nbd:h:0"), "the port is not a number from 1 to 65535");
        assert_eq!(e("nbd:h:x/y"), "the port is not a number from 1 to 65535");
        assert_eq!(e("nbd:h:1/"), "the export name is empty, too long, or has a space or control character");
        assert_eq!(e("nbd:h:a\u{1b}b"), "the export name is empty, too long, or has a space or control character");
        assert_eq!(e("nbd:[zz]:1"), "the bracketed server is not an IPv6 address");
        assert_eq!(e("nbd:[::1"), "an unclosed '[' around the server");
        assert_eq!(e("nbd:[::1]1"), "no port after the server");
        assert_eq!(e("nbd:h:1:ext4;rm"), "the file system type is not a name");
        assert_eq!(e("nbd:h:1::a\nb"), "a space or control character in the mount options");
        assert_eq!(e("nbd:h:1:::bs=1000"), "bs= is not a power of two from 512 to 4096");
        assert_eq!(e("nbd:h:1:::bs=99999999999"), "bs= is not a power of two from 512 to 4096");
        assert_eq!(e("nbd:h:1:::timeout=0"), "timeout= is not a number of seconds");
        assert_eq!(e("nbd:h:1:::a b"), "a space or control character in the NBD options");
        let long = alloc::format!("nbd:h:{}", "x".repeat(4097));
        assert!(NbdTarget::parse(&long).is_err());
    }
}
