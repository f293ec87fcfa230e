//! The exitrd: what /init leaves in /run/initramfs at the switch to the root, for the way
//! down. systemd-shutdown pivots into that directory (the old root at /oldroot) and runs
//! `/shutdown VERB` there (systemd's docs/INITRD_INTERFACE.md): that program is /init itself,
//! and [`Exitrd`] is its record of what the boot built, bottom-up, which the teardown works
//! top-down. Its text form is the configuration's: a version line, then one `kind value...`
//! line per piece, values as `%`-escaped words.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::config::DecodeError;
use crate::escape::{unword, word};

/// The directory systemd pivots into.
pub const DIR: &str = "/run/initramfs";
/// The program systemd runs there (a copy of /init).
pub const PROGRAM: &str = "/run/initramfs/shutdown";
/// The record, as the boot writes it.
pub const RECORD: &str = "/run/initramfs/exitrd.conf";
/// The record as the teardown reads it, once / is [`DIR`].
pub const RECORD_INSIDE: &str = "/exitrd.conf";
/// The step log the teardown appends to, once / is [`DIR`] (the boot's
/// [`crate::steplog::SAVED`]).
pub const LOG_INSIDE: &str = "/leanrd.log";
/// Where systemd leaves the old root.
pub const OLDROOT: &str = "/oldroot";

/// The first line; a record in another form is refused, not guessed at.
const MAGIC: &str = "leanrd-exitrd 1";

/// One thing the boot built that the way down takes apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// An md array (`md0`): stopped once clean.
    Md(String),
    /// A device-mapper device of LVM (its dm name, `vg0-root`): removed.
    Lvm(String),
    /// An open dm-crypt mapping (its dm name): removed, the kernel wiping its key.
    Crypt(String),
    /// Any other device-mapper device the boot made (its dm name): removed.
    Dm(String),
    /// A loop device (`loop0`, a live image): detached.
    Loop(String),
    /// An NVMe over Fabrics controller (`nvme0`): disconnected.
    Nvmf(String),
    /// An iSCSI session (`session1`, with its target's name): logged out.
    Iscsi(String, String),
    /// A network file system mounted at the root (its source): unmounted within the bound.
    Nfs(String),
    /// An optical drive holding the live medium (`sr0`), asked to eject it (`rd.live.eject`).
    Eject(String),
}

impl Piece {
    /// The line's first word.
    pub fn kind(&self) -> &'static str {
        match self {
            Piece::Md(_) => "md",
            Piece::Lvm(_) => "lvm",
            Piece::Crypt(_) => "crypt",
            Piece::Dm(_) => "dm",
            Piece::Loop(_) => "loop",
            Piece::Nvmf(_) => "nvmf",
            Piece::Iscsi(..) => "iscsi",
            Piece::Nfs(_) => "nfs",
            Piece::Eject(_) => "eject",
        }
    }

    /// Its values, in the record's order.
    pub fn values(&self) -> Vec<&str> {
        match self {
            Piece::Md(n)
            | Piece::Lvm(n)
            | Piece::Crypt(n)
            | Piece::Dm(n)
            | Piece::Loop(n)
            | Piece::Nvmf(n)
            | Piece::Nfs(n)
            | Piece::Eject(n) => alloc::vec![n.as_str()],
            Piece::Iscsi(s, t) => alloc::vec![s.as_str(), t.as_str()],
        }
    }

    fn from_values(kind: &str, mut v: Vec<String>) -> Result<Piece, String> {
        let n = v.len();
        let want = if kind == "iscsi" { 2 } else { 1 };
        if n != want {
            return Err(format!("{kind} takes {want} value{}, not {n}", if want == 1 { "" } else { "s" }));
        }
        let a = v.remove(0);
        Ok(match kind {
            "md" => Piece::Md(a),
            "lvm" => Piece::Lvm(a),
            "crypt" => Piece::Crypt(a),
            "dm" => Piece::Dm(a),
            "loop" => Piece::Loop(a),
            "nvmf" => Piece::Nvmf(a),
            "iscsi" => Piece::Iscsi(a, v.remove(0)),
            "nfs" => Piece::Nfs(a),
            "eject" => Piece::Eject(a),
            k => return Err(format!("unknown piece \"{k}\"")),
        })
    }
}

/// The record: what the boot built, bottom-up (a piece after everything it sits on), and the
/// bound on each unmount.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exitrd {
    /// What the boot built, each piece after those under it.
    pub pieces: Vec<Piece>,
    /// Seconds each unmount has before it is given up and detached (0: no bound); None: the
    /// teardown's default.
    pub umount_timeout: Option<u64>,
}

impl Exitrd {
    /// The text form.
    pub fn encode(&self) -> String {
        let mut s = format!("{MAGIC}\n");
        if let Some(t) = self.umount_timeout {
            s += &format!("umount_timeout {t}\n");
        }
        for p in &self.pieces {
            s += p.kind();
            for v in p.values() {
                s.push(' ');
                s += &word(v);
            }
            s.push('\n');
        }
        s
    }

    /// Read the text [`Exitrd::encode`] wrote.
    pub fn decode(text: &str) -> Result<Exitrd, DecodeError> {
        let mut lines = text.lines().enumerate();
        match lines.next() {
            Some((_, l)) if l == MAGIC => {}
            Some((_, l)) => return Err(DecodeError { line: 1, why: format!("\"{l}\" is not \"{MAGIC}\"") }),
            None => return Err(DecodeError { line: 1, why: "empty".into() }),
        }
        let mut e = Exitrd::default();
        for (i, l) in lines {
            let err = |why: String| DecodeError { line: i + 1, why };
            if l.is_empty() {
                continue;
            }
            let mut words = l.split(' ');
            let kind = words.next().unwrap_or("");
            let values: Vec<String> = words
                .map(|w| unword(w).ok_or_else(|| err(format!("bad escape in \"{w}\""))))
                .collect::<Result<_, _>>()?;
            if kind == "umount_timeout" {
                let [v] = <[String; 1]>::try_from(values).map_err(|_| err("umount_timeout takes one value".into()))?;
                e.umount_timeout = Some(v.parse().map_err(|_| err(format!("\"{v}\" is not a number")))?);
                continue;
            }
            e.pieces.push(Piece::from_values(kind, values).map_err(err)?);
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    #[test]
    fn the_record_round_trips_in_order() {
        let e = Exitrd {
            pieces: vec![
                Piece::Md("md0".into()),
                Piece::Lvm("vg0-root".into()),
                Piece::Crypt("root crypt".into()),
                Piece::Iscsi("session1".into(), "iqn.2024-01.test:t".into()),
                Piece::Nfs("10.0.2.2:/srv/root".into()),
                Piece::Eject("sr0".into()),
            ],
            umount_timeout: Some(7),
        };
        let text = e.encode();
        assert!(text.contains("crypt root%20crypt\n"), "{text}");
        assert_eq!(Exitrd::decode(&text).unwrap(), e);
        assert_eq!(Exitrd::decode("leanrd-exitrd 1\n").unwrap(), Exitrd::default());
    }

    #[test]
    fn a_bad_record_names_its_line() {
        let bad = |t: &str| Exitrd::decode(t).unwrap_err().to_string();
        assert_eq!(bad(""), "line 1: empty");
        assert!(bad("leanrd-init-config 1\n").starts_with("line 1:"));
        assert_eq!(bad("leanrd-exitrd 1\nmd md0\nraid x\n"), "line 3: unknown piece \"raid\"");
        assert_eq!(bad("leanrd-exitrd 1\nmd\n"), "line 2: md takes 1 value, not 0");
        assert_eq!(bad("leanrd-exitrd 1\niscsi s\n"), "line 2: iscsi takes 2 values, not 1");
        assert_eq!(bad("leanrd-exitrd 1\numount_timeout x\n"), "line 2: \"x\" is not a number");
        assert!(bad("leanrd-exitrd 1\ncrypt a%zz\n").starts_with("line 2: bad escape"));
    }
}
