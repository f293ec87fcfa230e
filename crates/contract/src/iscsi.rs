//! iSCSI targets: the transport that brings a root's block device in over the network.
//! dracut's spelling (`netroot=iscsi:...`, `root=iscsi:...`) is read here once, for /init's
//! command line and for the image's configuration, which records the targets a host-only
//! build found under its root.
//!
//! `iscsi:[USER:PASSWORD[:IN_USER:IN_PASSWORD]@][SERVER]:[PROTOCOL]:[PORT][:[IFACE]:[NETDEV]]:[LUN]:TARGETNAME`
//! (SERVER may be `[IPv6]`; PROTOCOL is ignored, as by dracut: it is always TCP).

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

/// The iSCSI port a target listens on unless told otherwise.
pub const ISCSI_PORT: u16 = 3260;

/// CHAP credentials: the initiator's, and the target's for mutual authentication. Given on
/// the command line only: an image never records them (it may be readable by others).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Chap {
    /// The user name the initiator logs in with.
    pub user: String,
    /// The initiator's password.
    pub password: String,
    /// The user name the target answers with, for mutual authentication; None: the target is not
    /// authenticated.
    pub in_user: Option<String>,
    /// The target's password, for mutual authentication (with `in_user`).
    pub in_password: Option<String>,
}

/// Never printed: a log or a diagnosis must not show a password.
impl fmt::Debug for Chap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Chap({}, mutual: {})", self.user, self.in_user.is_some())
    }
}

/// One iSCSI target to log in to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IscsiTarget {
    /// A host name, an IPv4 address, or an IPv6 address in brackets.
    pub server: String,
    /// None: [`ISCSI_PORT`].
    pub port: Option<u16>,
    /// The target's name (`iqn.`, `eui.` or `naa.`).
    pub name: String,
    /// The LUN holding the root, when `root=iscsi:` makes the LUN itself the root. None: 0.
    pub lun: Option<u32>,
    /// The target portal group tag (`rd.iscsi.target.group=`). None: 1.
    pub group: Option<u32>,
    /// The network interface to reach it through (dracut's NETDEV).
    pub netdev: Option<String>,
    /// The CHAP credentials to log in with (command line only); None: no authentication.
    pub chap: Option<Chap>,
}

/// Why an `iscsi:` spec could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("\"{spec}\" is not an iSCSI target: {why}")]
pub struct IscsiError {
    /// The spec, with any credentials cut off.
    pub spec: String,
    /// What is wrong with it.
    pub why: &'static str,
}

fn number<T: core::str::FromStr>(s: &str, spec: &str, why: &'static str) -> Result<Option<T>, IscsiError> {
    if s.is_empty() {
        return Ok(None);
    }
    s.parse().map(Some).map_err(|_| IscsiError { spec: spec.to_string(), why })
}

impl IscsiTarget {
    /// The port to connect to.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(ISCSI_PORT)
    }

    /// Read dracut's `iscsi:...` (the `iscsi:` prefix included).
    pub fn parse(spec: &str) -> Result<IscsiTarget, IscsiError> {
        // The credentials end at the last '@' (a target name has none); an error quotes
        // what follows them.
        let (auth, rest) = match spec.strip_prefix("iscsi:").map(|r| (r.rfind('@'), r)) {
            // `iscsi:@...`: no credentials (dracut's examples write it so).
            Some((Some(0), r)) => (None, &r[1..]),
            Some((Some(at), r)) => (Some(&r[..at]), &r[at + 1..]),
            Some((None, r)) => (None, r),
            None => return Err(IscsiError { spec: spec.to_string(), why: "it does not start with iscsi:" }),
        };
        let shown = alloc::format!("iscsi:{rest}");
        let err = |why| IscsiError { spec: shown.clone(), why };
        let chap = match auth {
            None => None,
            Some(a) => {
                let f: Vec<&str> = a.split(':').collect();
                match f.as_slice() {
                    [u, p] if !u.is_empty() => {
                        Some(Chap { user: u.to_string(), password: p.to_string(), ..Default::default() })
                    }
                    [u, p, iu, ip] if !u.is_empty() && !iu.is_empty() => Some(Chap {
                        user: u.to_string(),
                        password: p.to_string(),
                        in_user: Some(iu.to_string()),
                        in_password: Some(ip.to_string()),
                    }),
                    _ => return Err(err("the credentials are not USER:PASSWORD[:IN_USER:IN_PASSWORD]")),
                }
            }
        };
        let (server, rest) = if let Some(r) = rest.strip_prefix('[') {
            let (v6, after) = r.split_once(']').ok_or(err("an IPv6 server without its closing ]"))?;
            if v6.is_empty() || !v6.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
                return Err(err("the bracketed server is not an IPv6 address"));
            }
            (alloc::format!("[{v6}]"), after.strip_prefix(':').ok_or(err("no ':' after the server"))?)
        } else {
            let (s, r) = rest.split_once(':').ok_or(err("no ':' after the server"))?;
            (s.to_string(), r)
        };
        // The target name: from its type's prefix (it holds ':' itself), else the fields
        // after PROTOCOL:PORT:LUN.
        // In dracut's order: an `iqn.` name first (an IQN may hold ":naa." itself).
        let named = ["iqn.", "eui.", "naa."].iter().find_map(|p| rest.rfind(&alloc::format!(":{p}")));
        let (fields, name): (Vec<&str>, String) = match named {
            Some(i) => (rest[..i].split(':').collect(), rest[i + 1..].to_string()),
            None => {
                // PROTOCOL:PORT[:IFACE:NETDEV]:LUN:NAME, the name the rest (it may hold ':').
                let f: Vec<&str> = rest.split(':').collect();
                let n = if f.len() >= 6 { 5 } else { 3 };
                if f.len() < 4 {
                    return Err(err("not SERVER:PROTOCOL:PORT:LUN:TARGETNAME"));
                }
                (f[..n].to_vec(), f[n..].join(":"))
            }
        };
        let (port, netdev, lun) = match fields.as_slice() {
            [_proto, port, lun] => (*port, None, *lun),
            [_proto, port, _iface, netdev, lun] => (*port, Some(*netdev), *lun),
            _ => return Err(err("not SERVER:PROTOCOL:PORT[:IFACE:NETDEV]:LUN:TARGETNAME")),
        };
        if name.is_empty() {
            return Err(err("no target name"));
        }
        if server.is_empty() {
            return Err(err("no server"));
        }
        let bad = |s: &str| s.bytes().any(|b| b <= b' ' || b == 0x7f);
        if bad(&name) || bad(&server) || netdev.is_some_and(bad) {
            return Err(err("a space or control character"));
        }
        Ok(IscsiTarget {
            server,
            port: number(port, &shown, "the port is not a number from 0 to 65535")?,
            name,
            lun: number(lun, &shown, "the LUN is not a number")?,
            group: None,
            netdev: netdev.filter(|n| !n.is_empty()).map(str::to_string),
            chap,
        })
    }
}

/// The spelling [`IscsiTarget::parse`] reads back, credentials included (the image's
/// configuration never holds any) and the portal group left out (it has no place in it).
impl fmt::Display for IscsiTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("iscsi:")?;
        if let Some(c) = &self.chap {
            write!(f, "{}:{}", c.user, c.password)?;
            if let (Some(u), Some(p)) = (&c.in_user, &c.in_password) {
                write!(f, ":{u}:{p}")?;
            }
            f.write_str("@")?;
        }
        write!(f, "{}::", self.server)?;
        if let Some(p) = self.port {
            write!(f, "{p}")?;
        }
        // IFACE (empty) and NETDEV when there is a netdev, and when the name has a ':' that is
        // not after an iqn./eui./naa. name: read with five fields, the rest is the name.
        let named = ["iqn.", "eui.", "naa."].iter().any(|p| self.name.starts_with(p));
        if self.netdev.is_some() || (!named && self.name.contains(':')) {
            write!(f, "::{}", self.netdev.as_deref().unwrap_or(""))?;
        }
        f.write_str(":")?;
        if let Some(l) = self.lun {
            write!(f, "{l}")?;
        }
        write!(f, ":{}", self.name)
    }
}

/// The kernel command line with its iSCSI secrets replaced by `***` (`rd.iscsi.password=`,
/// `rd.iscsi.in.password=`, the credentials of `root=`/`netroot=iscsi:USER:PASS@...`): what the
/// step log and a diagnosis show of it.
pub fn redact_secrets(cmdline: &str) -> String {
    let mut out = String::with_capacity(cmdline.len());
    let mut rest = cmdline;
    loop {
        // White space as it is; then one word as /init's parser takes it (`cmdline::words`):
        // up to white space outside double quotes (a tab separates words too).
        let start = rest.find(|c: char| !c.is_whitespace()).unwrap_or(rest.len());
        out += &rest[..start];
        rest = &rest[start..];
        if rest.is_empty() {
            return out;
        }
        let mut quoted = false;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                quoted ^= c == '"';
                c.is_whitespace() && !quoted
            })
            .map_or(rest.len(), |(i, _)| i);
        let (w, after) = rest.split_at(end);
        redact_word(w, &mut out);
        rest = after;
    }
}

/// One word, redacted if it holds a secret: judged, as the parser reads it, without its quotes.
fn redact_word(w: &str, out: &mut String) {
    let value: String = w.chars().filter(|&c| c != '"').collect();
    let key = value.split_once('=').map(|(k, _)| k);
    match key {
        Some(k @ ("rd.iscsi.password" | "rd.iscsi.in.password")) => {
            *out += k;
            *out += "=***";
        }
        Some("root" | "netroot") if value.contains("iscsi:") && value.contains('@') => {
            let (head, rest) = value.split_once("iscsi:").unwrap_or((&value, ""));
            let after = rest.rfind('@').map_or("", |at| &rest[at..]);
            *out += head;
            *out += "iscsi:***";
            *out += after;
        }
        _ => *out += w,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(server: &str, port: Option<u16>, lun: Option<u32>, name: &str) -> IscsiTarget {
        IscsiTarget { server: server.into(), port, lun, name: name.into(), ..Default::default() }
    }

    #[test]
    fn every_spelling() {
        let p = |s| IscsiTarget::parse(s).unwrap();
        let iqn = "iqn.2009-06.dracut:target0";
        assert_eq!(p("iscsi:192.168.50.1::::iqn.2009-06.dracut:target0"), t("192.168.50.1", None, None, iqn));
        assert_eq!(p("iscsi:10.0.0.1:6:3261:1:iqn.2009-06.dracut:target0"), t("10.0.0.1", Some(3261), Some(1), iqn));
        assert_eq!(
            p("iscsi:[fd00::1]:::2:eui.02004567A425678D"),
            t("[fd00::1]", None, Some(2), "eui.02004567A425678D")
        );
        assert_eq!(p("iscsi:srv.example:::0:plainname"), t("srv.example", None, Some(0), "plainname"));
        let x = p("iscsi:u:p@10.0.0.1::3260:default:eth1:0:iqn.a:b");
        assert_eq!(x.netdev.as_deref(), Some("eth1"));
        assert_eq!(x.chap, Some(Chap { user: "u".into(), password: "p".into(), ..Default::default() }));
        let x = p("iscsi:u:p@ss:iu:ip@h::::iqn.x");
        assert_eq!(x.chap.as_ref().map(|c| c.password.as_str()), Some("p@ss"));
        assert_eq!(x.chap.as_ref().and_then(|c| c.in_password.as_deref()), Some("ip"));
    }

    #[test]
    fn the_spelling_reads_back() {
        for s in [
            "iscsi:10.0.0.1::::iqn.2009-06.dracut:target0",
            "iscsi:10.0.0.1::3261:1:iqn.2009-06.dracut:target0",
            "iscsi:[fd00::1]::::eui.02004567A425678D",
            "iscsi:u:p@h::::eth1:2:iqn.x:y",
            "iscsi:u:p:iu:ip@h::::iqn.x",
        ] {
            let x = IscsiTarget::parse(s).unwrap();
            assert_eq!(IscsiTarget::parse(&x.to_string()).unwrap(), x, "{s}");
        }
    }

    /// A name with colons (not an iqn./eui./naa. one) was spelled with three fields, which
    /// the parser read as five: a LUN that is no number (found by fuzz/ `cmdline`).
    #[test]
    fn a_name_with_colons_is_spelled_so_that_it_reads_back() {
        for s in [
            "iscsi:u:p@ss:iu:ip@h:::1::::x:ro:1:y",
            "iscsi:h::1:x::0:a:b:c",
            "iscsi:h:::0:a:b",
            "iscsi:h::::eth0:0:plain:name",
        ] {
            let x = IscsiTarget::parse(s).unwrap();
            let again = x.to_string();
            assert_eq!(IscsiTarget::parse(&again).as_ref(), Ok(&x), "{s} -> {again}");
        }
        assert_eq!(IscsiTarget::parse("iscsi:h:::::::a:b").unwrap().name, ":a:b");
    }

    /// Words as /init's parser splits them: a tab separates words, and quotes hold white
    /// space; a password behind a tab, or quoted with a space in it, was shown (found by fuzz/
    /// `cmdline`).
    #[test]
    fn secrets_are_redacted_in_words_as_the_parser_splits_them() {
        assert_eq!(redact_secrets("quiet\troot=iscsi:u:secret@h::::iqn.x"), "quiet\troot=iscsi:***@h::::iqn.x");
        assert_eq!(
            redact_secrets("rd.iscsi.password=\"my secret\" \"rd.iscsi.in.password=a b\" ro"),
            "rd.iscsi.password=*** rd.iscsi.in.password=*** ro"
        );
        assert_eq!(redact_secrets("netroot=\"iscsi:u:p w@h::::iqn.x\"\n"), "netroot=iscsi:***@h::::iqn.x\n");
        assert_eq!(redact_secrets("  a  \"b c\" "), "  a  \"b c\" ");
    }

    #[test]
    fn bad_targets_say_why_without_the_password() {
        let e = |s: &str| IscsiTarget::parse(s).unwrap_err().to_string();
        assert_eq!(e("iscsi:h:::x:iqn.a"), "\"iscsi:h:::x:iqn.a\" is not an iSCSI target: the LUN is not a number");
        assert!(!e("iscsi:u:secret@h::99999:0:iqn.a").contains("secret"));
        assert!(e("iscsi:u:secret@h::99999:0:iqn.a").ends_with("the port is not a number from 0 to 65535"));
        assert!(e("iscsi:h::::").ends_with("no target name"));
        assert!(e("iscsi:::::iqn.a").ends_with("no server"));
        assert!(e("iscsi:h").ends_with("no ':' after the server"));
        assert!(e("iscsi:h:1:2").ends_with("not SERVER:PROTOCOL:PORT:LUN:TARGETNAME"));
        assert_eq!(IscsiTarget::parse("iscsi:@h::::iqn.x").unwrap().chap, None);
        let x = IscsiTarget::parse("iscsi:h::::eth0:0:plain:name").unwrap();
        assert_eq!((x.netdev.as_deref(), x.lun, x.name.as_str()), (Some("eth0"), Some(0), "plain:name"));
        assert_eq!(IscsiTarget::parse("iscsi:h::::iqn.x:naa.y").unwrap().name, "iqn.x:naa.y");
        assert!(e("iscsi:h:a:b:c:d:e:f:iqn.x").ends_with("not SERVER:PROTOCOL:PORT[:IFACE:NETDEV]:LUN:TARGETNAME"));
        assert_eq!(
            redact_secrets(
                "quiet netroot=iscsi:u:p@ss@h::::iqn.x rd.iscsi.password=pw rd.iscsi.in.password=x root=/dev/sda"
            ),
            "quiet netroot=iscsi:***@h::::iqn.x rd.iscsi.password=*** rd.iscsi.in.password=*** root=/dev/sda"
        );
        assert!(e("iscsi:h::::iqn.a b").ends_with("a space or control character"));
        assert!(e("nfs:h:/x").ends_with("it does not start with iscsi:"));
        assert!(e("iscsi:[zz]::::iqn.a").ends_with("the bracketed server is not an IPv6 address"));
    }
}
