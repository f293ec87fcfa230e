//! ZFS roots (`root=ZFS=POOL/DATASET`, `zfs:AUTO`, `bootfs=`, `zfs=`): the pool's members
//! waited for by their labels (every top-level vdev seen), the pool imported with zpool from
//! those members (`-N`: nothing mounted by it), an encrypted dataset's key loaded at the LUKS prompt
//! (`zfs load-key`), and the root dataset and the datasets under it mounted where their
//! `mountpoint` says. The pool stays imported for the root, whose zfs-import units find it so.
//!
//! The label reader is hand-written: ZFS keeps a vdev's identity in an XDR-encoded nvlist at
//! 16 KiB into each of its labels, and no crate reads that; blkid reads the same few names.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use leanrd_contract::{Capability, RootKind, ZfsRoot};
use rustix::fd::AsFd;
use rustix::mount::MountFlags;

use crate::Init;
use crate::devices::Dev;
use crate::root::{NEWROOT, RootSource};
use crate::sys::{self, read_at};
use crate::wait::Waiter;

/// The type blkid gives a ZFS pool's member.
pub const MEMBER: &str = "zfs_member";

/// Where a label's nvlist is (label 0 at the device's start), and how long it may be.
const NVLIST_AT: u64 = 16 * 1024;
const NVLIST_LEN: usize = 112 * 1024;
/// The second label, 256 KiB in (the first may be damaged).
const LABEL1_AT: u64 = 256 * 1024;

/// What a member's label says of it and its pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// The pool's name.
    pub pool: String,
    /// The pool's GUID (blkid's UUID of a member, in decimal).
    pub pool_guid: u64,
    /// How many top-level vdevs the pool has.
    pub children: u64,
    /// Which of them this member is in.
    pub top: u64,
    /// The pool's state when the label was written: 0 active (imported), 1 exported, 2 destroyed.
    pub state: u64,
    /// The host that had it imported last, as the label names it.
    pub hostname: Option<String>,
    /// Its hostid.
    pub hostid: Option<u64>,
}

/// The nvlist's header: XDR encoding, then version 0 and NV_UNIQUE_NAME (any endianness byte).
fn header_ok(b: &[u8]) -> bool {
    b.len() >= 12 && b[0] == 1 && b[2..4] == [0, 0] && b[4..8] == [0, 0, 0, 0] && b[8..12] == [0, 0, 0, 1]
}

/// The label of a member, from label 0, else label 1; None: not a member (or a spare or
/// cache device, whose labels name no pool).
pub fn read_label<Fd: AsFd>(fd: Fd) -> Option<Label> {
    let f = fd.as_fd();
    [0, LABEL1_AT].into_iter().find_map(|at| {
        let head = read_at(f, at + NVLIST_AT, 12)?;
        if !header_ok(&head) {
            return None;
        }
        parse_label(&read_at(f, at + NVLIST_AT, NVLIST_LEN)?)
    })
}

/// One value of an nvlist that the label's reader needs.
enum Value<'a> {
    U64(u64),
    Str(&'a str),
    /// A nested nvlist: its pairs start here.
    List(usize),
    Other,
}

/// An XDR cursor over a label's nvlist (all integers big-endian, strings padded to 4 bytes).
struct Xdr<'a> {
    b: &'a [u8],
}

impl<'a> Xdr<'a> {
    fn u32(&self, at: usize) -> Option<u32> {
        let s = self.b.get(at..at.checked_add(4)?)?;
        Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn u64(&self, at: usize) -> Option<u64> {
        Some((u64::from(self.u32(at)?) << 32) | u64::from(self.u32(at + 4)?))
    }

    /// A string at `at`, and where what follows it starts.
    fn str(&self, at: usize) -> Option<(&'a str, usize)> {
        let len = self.u32(at)? as usize;
        let start = at + 4;
        let s = self.b.get(start..start.checked_add(len)?)?;
        Some((core::str::from_utf8(s).ok()?, start + len.checked_add(3)? / 4 * 4))
    }

    /// The pairs of the nvlist whose pairs start at `at` (after its version and flags), each
    /// name with its value. Bounded by the buffer: every pair takes at least 8 bytes.
    fn pairs(&self, mut at: usize) -> Vec<(&'a str, Value<'a>)> {
        let mut out = Vec::new();
        while let (Some(enc), Some(_dec)) = (self.u32(at), self.u32(at + 4)) {
            let enc = enc as usize;
            // The end: two zero sizes. A size that cannot hold a pair ends the reading too.
            if enc < 16 || at.checked_add(enc).is_none_or(|e| e > self.b.len()) {
                break;
            }
            let Some((name, after)) = self.str(at + 8) else { break };
            let (Some(ty), Some(nelem)) = (self.u32(after), self.u32(after + 4)) else { break };
            let v = after + 8;
            let value = match (ty, nelem) {
                // DATA_TYPE_UINT64
                (8, 1) => self.u64(v).map_or(Value::Other, Value::U64),
                // DATA_TYPE_STRING
                (9, 1) => self.str(v).map_or(Value::Other, |(s, _)| Value::Str(s)),
                // DATA_TYPE_NVLIST: its version and flags, then its pairs.
                (19, 1) => Value::List(v + 8),
                _ => Value::Other,
            };
            out.push((name, value));
            at += enc;
        }
        out
    }
}

/// The label in `b`, the nvlist as stored (its 4-byte header first).
pub fn parse_label(b: &[u8]) -> Option<Label> {
    if !header_ok(b) {
        return None;
    }
    let x = Xdr { b };
    let (mut pool, mut pool_guid, mut children, mut state, mut top) = (None, None, None, None, None);
    let (mut hostname, mut hostid) = (None, None);
    for (name, v) in x.pairs(12) {
        match (name, v) {
            ("name", Value::Str(s)) => pool = Some(s.to_string()),
            ("pool_guid", Value::U64(n)) => pool_guid = Some(n),
            ("vdev_children", Value::U64(n)) => children = Some(n),
            ("state", Value::U64(n)) => state = Some(n),
            ("hostname", Value::Str(s)) => hostname = Some(s.to_string()),
            ("hostid", Value::U64(n)) => hostid = Some(n),
            ("vdev_tree", Value::List(at)) => {
                top = x.pairs(at).into_iter().find_map(|(n, v)| match (n, v) {
                    ("id", Value::U64(id)) => Some(id),
                    _ => None,
                })
            }
            _ => {}
        }
    }
    let pool = pool.filter(|p| !p.contains('/') && leanrd_contract::zfs_name(p).is_ok())?;
    Some(Label {
        pool,
        pool_guid: pool_guid?,
        // Labels before vdev_children (ZFS before 2010): one top-level vdev is all it can say.
        children: children.unwrap_or(1).clamp(1, 4096),
        top: top.unwrap_or(0),
        state: state.unwrap_or(0),
        hostname,
        hostid,
    })
}

/// A pool as its members' labels show it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pool {
    /// Its GUID: two pools of one name are two pools.
    pub guid: u64,
    /// How many top-level vdevs it has.
    pub children: u64,
    /// The top-level vdevs a member of which was seen.
    pub tops: BTreeSet<u64>,
    /// The members seen (device names).
    pub devices: Vec<String>,
    /// The host that had it imported last (when its label says it was imported, not exported).
    pub in_use_by: Option<String>,
}

impl Pool {
    /// Every top-level vdev has a member here: `zpool import` can open it (a mirror or raidz
    /// missing a member imports degraded, which zpool decides).
    pub fn complete(&self) -> bool {
        self.tops.len() as u64 >= self.children
    }
}

/// Waits for the members of the root's pool (AUTO: of any pool).
pub struct PoolWaiter {
    /// The pool wanted; None: any (the first complete one with a bootfs).
    pub pool: Option<String>,
    /// The pools seen, by name then GUID.
    pub seen: BTreeMap<(String, u64), Pool>,
    /// Members whose labels were read (their devices, not read again).
    read: BTreeSet<String>,
}

impl PoolWaiter {
    fn new(pool: Option<String>) -> PoolWaiter {
        PoolWaiter { pool, seen: BTreeMap::new(), read: BTreeSet::new() }
    }

    /// Take in a member's label.
    pub fn add(&mut self, dev: &str, l: &Label) {
        // A destroyed pool is not imported (zpool import -D does that, deliberately).
        if l.state == 2 {
            return;
        }
        let p = self.seen.entry((l.pool.clone(), l.pool_guid)).or_default();
        p.guid = l.pool_guid;
        p.children = p.children.max(l.children);
        p.tops.insert(l.top);
        if !p.devices.iter().any(|d| d == dev) {
            p.devices.push(dev.to_string());
        }
        if l.state == 0 {
            p.in_use_by = Some(match (&l.hostname, l.hostid) {
                (Some(h), Some(id)) => format!("{h} (hostid {id:08x})"),
                (Some(h), None) => h.clone(),
                (None, Some(id)) => format!("hostid {id:08x}"),
                (None, None) => "an unnamed host".into(),
            });
        }
    }

    /// The pools to import, complete, wanted ones first.
    pub fn ready(&self) -> Vec<(&String, &Pool)> {
        self.seen
            .iter()
            .filter(|((n, _), p)| p.complete() && self.pool.as_ref().is_none_or(|w| w == n))
            .map(|((n, _), p)| (n, p))
            .collect()
    }
}

impl Waiter for PoolWaiter {
    fn describe(&self) -> String {
        let what = match &self.pool {
            Some(p) => format!("the ZFS pool {p}"),
            None => "a ZFS pool with a bootfs (zfs:AUTO)".to_string(),
        };
        let seen: Vec<String> = self
            .seen
            .iter()
            .filter(|((n, _), _)| self.pool.as_ref().is_none_or(|w| w == n))
            .map(|((n, g), p)| {
                format!(
                    "{n} ({g}): {} of its {} top-level vdevs seen, on {}",
                    p.tops.len(),
                    p.children,
                    p.devices.join(", ")
                )
            })
            .collect();
        if seen.is_empty() {
            let others: Vec<&str> = self.seen.keys().map(|(n, _)| n.as_str()).collect();
            let others = if others.is_empty() { String::new() } else { format!("; pools seen: {}", others.join(", ")) };
            format!("{what} (no member of it seen: no device with its ZFS label{others})")
        } else {
            format!("{what} ({})", seen.join("; "))
        }
    }

    fn wants(&self) -> Option<&leanrd_contract::DeviceRef> {
        None
    }

    fn offer(&mut self, devs: &[Dev], _devno_of: &dyn Fn(&str) -> Option<(u32, u32)>) -> bool {
        for d in devs.iter().filter(|d| d.probe.fstype.as_deref() == Some(MEMBER)) {
            if !self.read.insert(d.name.clone()) {
                continue;
            }
            if let Some(l) = sys::open(&format!("/dev/{}", d.name)).ok().and_then(|f| read_label(&f)) {
                self.add(&d.name, &l);
            }
        }
        !self.ready().is_empty()
    }
}

/// The root's source: the pool waited for, imported, the dataset mounted.
pub struct ZfsSource {
    want: ZfsRoot,
    waiter: PoolWaiter,
}

impl ZfsSource {
    /// The source for `want` (`rpool=` narrows AUTO to one pool).
    pub fn new(init: &Init, want: ZfsRoot) -> ZfsSource {
        let pool = want.pool().map(str::to_string).or(init.cmd.zfs.pool.clone());
        ZfsSource { want, waiter: PoolWaiter::new(pool) }
    }
}

impl RootSource for ZfsSource {
    fn kind(&self) -> RootKind {
        RootKind::Zfs
    }

    fn waiter(&mut self) -> &mut dyn Waiter {
        &mut self.waiter
    }

    fn mount(&mut self, init: &mut Init) -> Result<(), String> {
        if !crate::stack::prepare(init, Capability::Zfs) {
            return Err("the root is a ZFS dataset, and this image was built without the zfs feature".into());
        }
        let mut problems = Vec::new();
        let ready: Vec<(String, Pool)> = self.waiter.ready().into_iter().map(|(n, p)| (n.clone(), p.clone())).collect();
        for (name, pool) in &ready {
            let dataset = match import(init, name, pool) {
                Ok(()) => match &self.want.dataset {
                    Some(d) => d.clone(),
                    None => match bootfs(name) {
                        Some(d) => d,
                        None => {
                            problems.push(format!("pool {name}: no bootfs property names a root dataset"));
                            continue;
                        }
                    },
                },
                Err(e) => {
                    problems.push(e);
                    continue;
                }
            };
            return mount_dataset(init, &dataset);
        }
        Err(if problems.is_empty() { "no ZFS pool to import".into() } else { problems.join("; ") })
    }
}

/// Import `name` (by its GUID: two pools may share a name) from the members seen, without
/// mounting anything, unless it is imported already.
fn import(init: &mut Init, name: &str, pool: &Pool) -> Result<(), String> {
    // An imported pool has its kstat directory: no program run to ask.
    if sys::is_dir(&format!("/proc/spl/kstat/zfs/{name}")) {
        return Ok(());
    }
    let guid = pool.guid.to_string();
    // Its members by name: zpool reads those labels, not every node in /dev.
    let devs: Vec<String> = pool.devices.iter().map(|d| format!("/dev/{d}")).collect();
    let mut args = alloc::vec!["import", "-N"];
    for d in &devs {
        args.extend(["-d", d.as_str()]);
    }
    if init.cmd.zfs.force {
        args.push("-f");
    }
    args.extend([guid.as_str(), name]);
    let (st, said) = crate::process::run_capture("zpool", &args, 4096).map_err(|e| format!("{e} [zpool import]"))?;
    sys::reap();
    let said = String::from_utf8_lossy(&said);
    if let Err(how) = crate::process::describe_status(st) {
        let said = said.split_whitespace().collect::<Vec<_>>().join(" ");
        let hint = match &pool.in_use_by {
            Some(h) if !init.cmd.zfs.force && said.contains("another system") => {
                format!(" The pool was last imported by {h} and not exported: `zfsforce=1` imports it anyway.")
            }
            _ => String::new(),
        };
        return Err(format!(
            "zpool import of pool {name} ({guid}, on {}) failed ({how}): {said}{hint}",
            pool.devices.join(", ")
        ));
    }
    init.log.step(&format!("zfs: pool {name} imported (on {})", pool.devices.join(", ")));
    Ok(())
}

/// The pool's bootfs property; None: unset.
fn bootfs(pool: &str) -> Option<String> {
    let (st, out) = crate::process::run_output("zpool", &["get", "-H", "-o", "value", "bootfs", pool], 1024).ok()?;
    let v = String::from_utf8_lossy(&out).trim().to_string();
    (crate::process::exit_code(st) == Some(0) && !v.is_empty() && v != "-").then_some(v)
}

/// A dataset to mount, as `zfs list` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fs {
    name: String,
    mountpoint: String,
    canmount: String,
    encryptionroot: String,
    keystatus: String,
}

/// `zfs list -H -o name,mountpoint,canmount,encryptionroot,keystatus` lines.
fn parse_list(text: &str) -> Vec<Fs> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let [name, mountpoint, canmount, encryptionroot, keystatus] = f[..] else { return None };
            Some(Fs {
                name: name.into(),
                mountpoint: mountpoint.into(),
                canmount: canmount.into(),
                encryptionroot: encryptionroot.into(),
                keystatus: keystatus.into(),
            })
        })
        .collect()
}

/// Where a dataset under the root goes, from its mountpoint and the root's; None: not mounted
/// here (none, legacy, canmount off or noauto, or outside the root's tree).
fn target(fs: &Fs, root_mp: &str) -> Option<String> {
    if fs.canmount != "on" || !fs.mountpoint.starts_with('/') {
        return None;
    }
    let rel = if root_mp == "/" {
        fs.mountpoint.as_str()
    } else {
        fs.mountpoint.strip_prefix(root_mp).filter(|r| r.starts_with('/'))?
    };
    // No `..`: a mountpoint is a path in the root, never out of it.
    (!rel.split('/').any(|c| c == "..")).then(|| format!("{NEWROOT}{rel}"))
}

fn list(dataset: &str) -> Result<Vec<Fs>, String> {
    let args =
        ["list", "-H", "-o", "name,mountpoint,canmount,encryptionroot,keystatus", "-t", "filesystem", "-r", dataset];
    let (st, out) = crate::process::run_output("zfs", &args, 256 * 1024).map_err(|e| format!("{e} [zfs list]"))?;
    crate::process::describe_status(st)
        .map_err(|how| format!("zfs list {dataset} failed ({how}): no such dataset?"))?;
    Ok(parse_list(&String::from_utf8_lossy(&out)))
}

/// Load the keys the root's datasets need, then mount the root and the datasets under it.
fn mount_dataset(init: &mut Init, dataset: &str) -> Result<(), String> {
    let all = list(dataset)?;
    let Some(root) = all.iter().find(|f| f.name == dataset).cloned() else {
        return Err(format!("the ZFS dataset {dataset} is not in its pool (zfs list shows none of that name)"));
    };
    let roots: BTreeSet<String> = all
        .iter()
        .filter(|f| f.encryptionroot != "-" && f.keystatus == "unavailable")
        .map(|f| f.encryptionroot.clone())
        .collect();
    // Listed again only when a key was loaded: the key status changed.
    let all = if roots.is_empty() {
        all
    } else {
        for enc in &roots {
            load_key(init, enc, *enc == root.encryptionroot)?;
        }
        list(dataset)?
    };
    let legacy = root.mountpoint == "legacy";
    let mut opts = String::from(if legacy { "" } else { "zfsutil" });
    if let Some(f) = init.cmd.mounts.rootflags.clone().or(init.conf.mounts.rootflags.clone()) {
        if !opts.is_empty() {
            opts.push(',');
        }
        opts.push_str(&f);
    }
    // Read-write, as zfs-initramfs mounts it: the dataset's readonly property rules, and the
    // root's systemd has no fstab line to remount it by.
    sys::mount(dataset, NEWROOT, "zfs", MountFlags::empty(), Some(&opts))
        .map_err(|e| format!("cannot mount the ZFS dataset {dataset} on {NEWROOT}: {}", sys::strerror(e)))?;
    init.log.step(&format!("{}{dataset} (zfs)", leanrd_contract::steplog::ROOT_FOUND));
    init.log.step(&format!("mounted {dataset} (zfs, rw, {opts}) on {NEWROOT}"));
    let root_mp = root.mountpoint.clone();
    for fs in all.iter().filter(|f| f.name != dataset) {
        let Some(at) = target(fs, &root_mp) else { continue };
        if fs.keystatus == "unavailable" {
            init.notes.push(format!("zfs: {} not mounted: its key is not loaded", fs.name));
            continue;
        }
        sys::mkdir_p(&at);
        match sys::mount(&fs.name, &at, "zfs", MountFlags::empty(), Some("zfsutil")) {
            Ok(()) => init.log.step(&format!("mounted {} (zfs) on {at}", fs.name)),
            Err(e) => init.notes.push(format!("zfs: cannot mount {} on {at}: {}", fs.name, sys::strerror(e))),
        }
    }
    Ok(())
}

/// Load the key of encryption root `enc`: a passphrase (keylocation=prompt) at the prompt,
/// else from where its keylocation says. Err only for the root's own key.
fn load_key(init: &mut Init, enc: &str, for_root: bool) -> Result<(), String> {
    let (_, loc) = crate::process::run_output("zfs", &["get", "-H", "-o", "value", "keylocation", enc], 4096)
        .map_err(|e| format!("{e} [zfs get keylocation]"))?;
    let loc = String::from_utf8_lossy(&loc).trim().to_string();
    let outcome = if loc == "prompt" {
        let options = leanrd_contract::CryptOptions::default();
        let what = crate::luks::Asking { name: enc, dev: "ZFS", options: &options };
        let mut attempt = |p: &crate::prompt::Secret| {
            // A Secret, wiped when dropped as the answer is; sized once, so no copy is left
            // behind by a reallocation.
            let mut v = Vec::with_capacity(p.0.len() + 1);
            v.extend_from_slice(&p.0);
            v.push(b'\n');
            let input = crate::prompt::Secret(v);
            let st = crate::process::run_input("zfs", &["load-key", "-L", "prompt", enc], &input.0)
                .map_err(|e| format!("{e} [zfs load-key]"))?;
            Ok(crate::process::exit_code(st) == Some(0))
        };
        match crate::luks::ask_passphrase(init, &what, None, &mut attempt) {
            Some(how) => Ok(how),
            None => Err(format!("the key of the ZFS dataset {enc} was not loaded (no right passphrase)")),
        }
    } else {
        match crate::process::run("zfs", &["load-key", enc]) {
            Ok(()) => Ok(format!("its keylocation {loc}")),
            Err(e) => Err(format!("the key of the ZFS dataset {enc} ({loc}) could not be loaded: {e}")),
        }
    };
    match outcome {
        Ok(how) => {
            init.log.step(&format!("zfs: the key of {enc} loaded with {how}"));
            Ok(())
        }
        Err(e) if for_root => Err(e),
        Err(e) => {
            init.notes.push(e);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An XDR nvlist pair (name, type, one value).
    fn pair(name: &str, ty: u32, value: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend((name.len() as u32).to_be_bytes());
        body.extend(name.as_bytes());
        while !body.len().is_multiple_of(4) {
            body.push(0);
        }
        body.extend(ty.to_be_bytes());
        body.extend(1u32.to_be_bytes());
        body.extend(value);
        let mut p = Vec::new();
        p.extend(((body.len() + 8) as u32).to_be_bytes());
        p.extend(((body.len() + 8) as u32).to_be_bytes());
        p.extend(body);
        p
    }
    fn u64v(n: u64) -> Vec<u8> {
        n.to_be_bytes().to_vec()
    }
    fn strv(s: &str) -> Vec<u8> {
        let mut v = (s.len() as u32).to_be_bytes().to_vec();
        v.extend(s.as_bytes());
        while !v.len().is_multiple_of(4) {
            v.push(0);
        }
        v
    }
    fn list(pairs: &[Vec<u8>]) -> Vec<u8> {
        let mut v = alloc::vec![0, 0, 0, 0, 0, 0, 0, 1];
        for p in pairs {
            v.extend(p);
        }
        v.extend([0; 8]);
        v
    }

    /// A label as `zpool create` writes it (the names blkid and /init read, and others).
    pub(crate) fn label(pool: &str, guid: u64, children: u64, top: u64, state: u64) -> Vec<u8> {
        let tree = list(&[pair("type", 9, &strv("disk")), pair("id", 8, &u64v(top)), pair("guid", 8, &u64v(7))]);
        let mut b = alloc::vec![1, 1, 0, 0];
        b.extend(list(&[
            pair("version", 8, &u64v(5000)),
            pair("name", 9, &strv(pool)),
            pair("state", 8, &u64v(state)),
            pair("txg", 8, &u64v(4)),
            pair("pool_guid", 8, &u64v(guid)),
            pair("hostid", 8, &u64v(0x00bab10c)),
            pair("hostname", 9, &strv("server")),
            pair("top_guid", 8, &u64v(9)),
            pair("vdev_children", 8, &u64v(children)),
            pair("vdev_tree", 19, &tree),
            pair("features_for_read", 19, &list(&[])),
        ]));
        b
    }

    #[test]
    fn a_label_gives_the_pool_and_its_top_level_vdev() {
        let l = parse_label(&label("rpool", 1234, 2, 1, 1)).unwrap();
        assert_eq!(
            l,
            Label {
                pool: "rpool".into(),
                pool_guid: 1234,
                children: 2,
                top: 1,
                state: 1,
                hostname: Some("server".into()),
                hostid: Some(0x00bab10c)
            }
        );
        // Truncated anywhere, or garbled: no label, and no panic.
        let b = label("rpool", 1234, 2, 1, 1);
        for n in 0..b.len() {
            let _ = parse_label(&b[..n]);
            let mut c = b.clone();
            c[n] ^= 0xff;
            let _ = parse_label(&c);
        }
        assert_eq!(parse_label(&b[..40]), None);
        // A pool name ZFS would not take is not a member's.
        assert_eq!(parse_label(&label("a/b", 1, 1, 0, 0)), None);
    }

    #[test]
    fn the_waiter_wants_every_top_level_vdev_and_names_what_it_saw() {
        let mut w = PoolWaiter::new(Some("tank".into()));
        let l = |top| parse_label(&label("tank", 42, 2, top, 1)).unwrap();
        w.add("vdb1", &l(0));
        assert!(w.ready().is_empty());
        assert!(w.describe().contains("tank (42): 1 of its 2 top-level vdevs seen, on vdb1"), "{}", w.describe());
        w.add("vdc1", &l(1));
        assert_eq!(w.ready().len(), 1);
        // Another pool of the same name is another pool; one destroyed is not imported.
        w.add("vdd1", &parse_label(&label("tank", 43, 1, 0, 2)).unwrap());
        assert_eq!(w.seen.len(), 1);
        let mut any = PoolWaiter::new(None);
        assert!(any.describe().contains("no member of it seen"));
        any.add("sda1", &parse_label(&label("other", 1, 1, 0, 0)).unwrap());
        assert_eq!(any.ready().len(), 1);
        assert_eq!(any.seen.values().next().unwrap().in_use_by.as_deref(), Some("server (hostid 00bab10c)"));
    }

    #[test]
    fn datasets_mount_under_the_root_where_their_mountpoint_says() {
        let l = parse_list(
            "rpool/ROOT/debian\t/\ton\trpool/ROOT\tavailable\n\
             rpool/ROOT/debian/var\t/var\ton\trpool/ROOT\tavailable\n\
             rpool/ROOT/debian/tmp\t/tmp\tnoauto\t-\t-\n\
             rpool/ROOT/debian/x\tnone\ton\t-\t-\n\
             rpool/ROOT/debian/y\t/../etc\ton\t-\t-\nbad line\n",
        );
        assert_eq!(l.len(), 5);
        let t: Vec<Option<String>> = l.iter().map(|f| target(f, "/")).collect();
        assert_eq!(t[1].as_deref(), Some("/newroot/var"));
        assert_eq!((t[2].as_deref(), t[3].as_deref(), t[4].as_deref()), (None, None, None));
        let f = Fs { mountpoint: "/srv/root/home".into(), ..l[1].clone() };
        assert_eq!(target(&f, "/srv/root").as_deref(), Some("/newroot/home"));
        assert_eq!(target(&Fs { mountpoint: "/srv/rootx".into(), ..f }, "/srv/root"), None);
    }
}
