//! dm-multipath: a LUN seen through two HBAs or two iSCSI portals is one disk per path (sda,
//! sdb) with one WWID. /init puts the paths of each WWID multipath-tools would map into one
//! `multipath` map before the root is looked for, named and built as multipath names and
//! builds it, so that the root's multipathd adopts the map as it is (same name, same DM UUID,
//! every path), and maps its partitions as Debian's kpartx rule does (`kpartx -a -p -part`):
//! `NAME-partN`, DM UUID `partN-mpath-WWID`. The paths and their partitions are then hidden from
//! the search for the root, which finds it on the map.
//!
//! With the DM ioctls ([`crate::dm`]), not multipath-tools' programs, measured: this module and
//! the ioctls it added make /init 34,464 bytes larger (767,520 to 801,984 at 1d9fa0c), where
//! multipathd, multipath and kpartx are Debian 12's multipath-tools and kpartx (1,320 KB
//! installed) with libdevmapper, liburcu, libjson-c, libaio and libedit (1,222 KB more), and
//! find paths and their WWIDs through udev, which leanrd's image has not; a daemon left running
//! across switch_root is what dracut #1821 (multipathd killed too early) and #2175 (a hang) are
//! about. The table is a line built from sysfs, and the root's multipathd takes the map over
//! with its path checkers.
//!
//! The WWID is multipath-tools' own (its default `uid_attribute` ID_SERIAL, which udev's
//! scsi_id and sg3-utils' rules make from VPD page 0x83 the same way, and its fallback without
//! udev, `parse_vpd_pg83`): the best designator of the LUN, its type digit first (`3` NAA, `2`
//! EUI-64, `1` T10 vendor id, `8` SCSI name string), from sysfs `device/vpd_pg83`.
//!
//! A path that fails during the boot: dm-multipath fails it and sends its I/O down the next
//! path group; the boot goes on while one path works. A map whose every path failed is named in
//! the diagnosis ([`problems`]).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use leanrd_contract::Capability;
use leanrd_contract::multipath::{
    FindMultipaths, MULTIPATH_BINDINGS, MULTIPATH_CONF, MULTIPATH_CONF_DIR, MULTIPATH_WWIDS, MultipathConf, map_name,
    parse_bindings, parse_wwids,
};

use crate::Init;
use crate::devices::Dev;
use crate::stack::note;
use crate::sys::{self, strerror};

/// The DM UUID of a map is this and its WWID.
pub const UUID_PREFIX: &str = "mpath-";

/// Whether a text designator (up to its first NUL) is printable ASCII, spaces only where
/// `spaces` (a T10 vendor id's): a device that sends other bytes gets no WWID from it, rather
/// than a map name and DM UUID with control characters or invalid UTF-8 in them.
fn text(v: &[u8], spaces: bool) -> bool {
    v.iter().take_while(|&&c| c != 0).all(|&c| c.is_ascii_graphic() || (spaces && c == b' '))
}

/// The WWID multipath-tools gives a SCSI LUN from its VPD page 0x83 (`b`, as sysfs
/// `vpd_pg83` holds it): libmultipath's parse_vpd_pg83, designators of the LUN only, the
/// best by its priorities (NAA IEEE Registered Extended 8, Registered 7, Extended 6, EUI-64 4,
/// SCSI name 3, T10 vendor id 2, NAA locally assigned 1). None: no usable designator.
pub fn wwid_from_vpd83(b: &[u8]) -> Option<String> {
    if b.len() < 4 || b[1] != 0x83 {
        return None;
    }
    let end = (4 + u16::from_be_bytes([b[2], b[3]]) as usize).min(b.len());
    let mut at = 4;
    let mut best: Option<(u8, usize)> = None;
    while at + 4 <= end {
        let d = &b[at..end];
        let len = d[3] as usize;
        if 4 + len > d.len() {
            break;
        }
        let v = &d[4..4 + len];
        let prio = if d[1] & 0x30 != 0 {
            None
        } else {
            match d[1] & 0xf {
                0x3 => match (v.first().map(|x| x >> 4), len) {
                    (Some(6), 16) => Some(8),
                    (Some(5), 8) => Some(7),
                    (Some(2), 8) => Some(6),
                    (Some(3), 8) => Some(1),
                    _ => None,
                },
                0x2 if matches!(len, 8 | 12 | 16) => Some(4),
                0x8 if len >= 4 && [&b"eui."[..], b"naa.", b"iqn."].contains(&&v[..4]) && text(v, false) => Some(3),
                0x1 if len >= 8 && text(v, true) => Some(2),
                _ => None,
            }
        };
        if let Some(p) = prio
            && best.is_none_or(|(q, _)| p > q)
        {
            best = Some((p, at));
        }
        at += 4 + len;
    }
    let (_, at) = best?;
    let d = &b[at..];
    let v = &d[4..4 + d[3] as usize];
    let mut out = String::new();
    match d[1] & 0xf {
        t @ (0x2 | 0x3) => {
            out.push(char::from(b'0' + t));
            for x in v {
                out.push_str(&format!("{x:02x}"));
            }
        }
        0x8 => {
            let kind = match &v[..4] {
                b"eui." => '2',
                b"naa." => '3',
                _ => '8',
            };
            out.push(kind);
            let s = &v[4..];
            let s = &s[..s.iter().position(|&c| c == 0).unwrap_or(s.len())];
            let s = String::from_utf8_lossy(s);
            out.push_str(&if kind == '8' { s.into_owned() } else { s.to_ascii_lowercase() });
        }
        _ => {
            // T10 vendor id: each run of spaces one '_', none at the end.
            out.push('1');
            let s = String::from_utf8_lossy(&v[..v.iter().position(|&c| c == 0).unwrap_or(v.len())]).into_owned();
            let words: Vec<&str> = s.split(' ').filter(|w| !w.is_empty()).collect();
            let mut t = words.join("_");
            if s.starts_with(' ') {
                t.insert(0, '_');
            }
            out.push_str(&t);
        }
    }
    Some(out)
}

/// The WWID of SCSI disk `name`, from its VPD page 0x83, else from the kernel's own pick of
/// it (`device/wwid`: `naa.`, `eui.`, `t10.`), spelled as multipath spells it.
fn wwid_of(name: &str) -> Option<String> {
    let dev = format!("/sys/class/block/{name}/device");
    if let Ok(b) = sys::read(&format!("{dev}/vpd_pg83"))
        && let Some(w) = wwid_from_vpd83(&b)
    {
        return Some(w);
    }
    let w = sys::read_string(&format!("{dev}/wwid"))?;
    let w = w.trim();
    let (kind, rest) = w.split_once('.')?;
    let t = match kind {
        "naa" => format!("3{}", rest.to_ascii_lowercase()),
        "eui" => format!("2{}", rest.to_ascii_lowercase()),
        "t10" => format!("1{}", rest.split(' ').filter(|w| !w.is_empty()).collect::<Vec<_>>().join("_")),
        _ => return None,
    };
    (t.len() > 1).then_some(t)
}

/// A device-mapper device already there.
struct Map {
    /// dm-N.
    kname: String,
    /// Its name (/dev/mapper/NAME).
    name: String,
    /// Its DM UUID.
    uuid: String,
    /// The devices under it.
    slaves: Vec<String>,
    /// Something is built on it (a partition map).
    held: bool,
}

fn maps() -> Vec<Map> {
    let Ok(names) = sys::list_dir("/sys/class/block") else { return Vec::new() };
    let list = |p: &str| sys::list_dir(p).map(|v| v.into_iter().map(|e| e.0).collect::<Vec<_>>()).unwrap_or_default();
    names
        .into_iter()
        .filter(|(n, _)| n.starts_with("dm-"))
        .filter_map(|(kname, _)| {
            let s = format!("/sys/class/block/{kname}");
            let uuid = sys::read_string(&format!("{s}/dm/uuid"))?.trim().to_string();
            let name = sys::read_string(&format!("{s}/dm/name"))?.trim().to_string();
            let slaves = list(&format!("{s}/slaves"));
            let held = !list(&format!("{s}/holders")).is_empty();
            Some(Map { kname, name, uuid, slaves, held })
        })
        .collect()
}

/// The host's configuration, as the image has it: multipath.conf, then conf.d's `*.conf` in
/// name order; the bindings; the wwids. A file that does not parse is noted and its settings
/// left at multipath-tools' defaults.
fn config(init: &mut Init) -> (MultipathConf, Vec<(String, String)>, Vec<String>) {
    let mut conf = MultipathConf::default();
    let mut files: Vec<String> = Vec::new();
    if sys::exists(MULTIPATH_CONF) {
        files.push(MULTIPATH_CONF.into());
    }
    let mut extra: Vec<String> = sys::list_dir(MULTIPATH_CONF_DIR)
        .map(|v| v.into_iter().map(|e| e.0).filter(|n| n.ends_with(".conf")).collect())
        .unwrap_or_default();
    extra.sort();
    files.extend(extra.into_iter().map(|n| format!("{MULTIPATH_CONF_DIR}/{n}")));
    for f in files {
        let Some(text) = sys::read_string(&f) else { continue };
        let mut next = conf.clone();
        match next.read(&text, &f) {
            Ok(()) => conf = next,
            Err(e) => note(init, format!("multipath: {e} (the file is ignored)")),
        }
    }
    let bindings = sys::read_string(MULTIPATH_BINDINGS).map(|t| parse_bindings(&t)).unwrap_or_default();
    let wwids = sys::read_string(MULTIPATH_WWIDS).map(|t| parse_wwids(&t)).unwrap_or_default();
    (conf, bindings, wwids)
}

/// The `multipath` target's parameters for `paths` (major, minor), as multipath-tools loads
/// them: features, no hardware handler (the kernel keeps the one attached to the paths), then
/// one path group per path (failover, multipath-tools' default policy) or one for all
/// (multibus), each with the host's selector and one argument per path (repeat count 1).
pub fn table(conf: &MultipathConf, paths: &[(u32, u32)]) -> String {
    let group = |ps: &[(u32, u32)]| {
        let mut g = format!("{} {} 1", conf.path_selector, ps.len());
        for (a, b) in ps {
            g.push_str(&format!(" {a}:{b} 1"));
        }
        g
    };
    let features = conf.features();
    if conf.multibus {
        format!("{features} 0 1 1 {}", group(paths))
    } else {
        let groups: Vec<String> = paths.iter().map(|p| group(&[*p])).collect();
        format!("{features} 0 {} 1 {}", paths.len(), groups.join(" "))
    }
}

/// Whether find_multipaths makes a map of `wwid`, seen on `paths` paths.
fn wanted(conf: &MultipathConf, wwids: &[String], wwid: &str, paths: usize) -> bool {
    let known = wwids.iter().any(|w| w == wwid);
    match conf.find_multipaths {
        FindMultipaths::Greedy => true,
        FindMultipaths::Yes => known || paths >= 2,
        FindMultipaths::Strict => known,
    }
}

/// Make or complete the maps the host's configuration asks for from the SCSI disks among
/// `devs`, and their partitions' maps. True when a device-mapper device was made or changed
/// (the devices are then scanned again).
pub fn assemble(init: &mut Init, devs: &[Dev]) -> bool {
    if init.cmd.no_multipath || init.conf.layer(Capability::Multipath).is_none() {
        return false;
    }
    let existing = maps();
    let in_map = |n: &str| existing.iter().any(|m| m.uuid.starts_with(UUID_PREFIX) && m.slaves.iter().any(|s| s == n));
    // Whole SCSI disks nothing else holds (a disk LVM or md took is not a path).
    let mut paths: Vec<(String, &Dev, u64)> = Vec::new();
    for d in devs.iter().filter(|d| d.partno == 0 && d.dm_name.is_none() && !d.name.starts_with("dm-")) {
        let sysd = format!("/sys/class/block/{}", d.name);
        if !sys::exists(&format!("{sysd}/device/scsi_disk")) && !sys::exists(&format!("{sysd}/device/vpd_pg83")) {
            continue;
        }
        let held = sys::list_dir(&format!("{sysd}/holders")).is_ok_and(|h| !h.is_empty());
        if held && !in_map(&d.name) {
            continue;
        }
        let Some(wwid) = wwid_of(&d.name) else { continue };
        let sectors = sys::read_string(&format!("{sysd}/size")).and_then(|s| s.trim().parse().ok()).unwrap_or(0);
        if sectors > 0 {
            paths.push((wwid, d, sectors));
        }
    }
    if paths.is_empty() {
        return false;
    }
    let (conf, bindings, wwids) = config(init);
    let mut wwid_list: Vec<&str> = paths.iter().map(|p| p.0.as_str()).collect();
    wwid_list.sort_unstable();
    wwid_list.dedup();
    let mut changed = false;
    let mut loaded = false;
    for wwid in wwid_list {
        let group: Vec<&(String, &Dev, u64)> = paths.iter().filter(|p| p.0 == wwid).collect();
        if !wanted(&conf, &wwids, wwid, group.len()) {
            continue;
        }
        if !loaded {
            crate::stack::prepare(init, Capability::Multipath);
            loaded = true;
        }
        let uuid = format!("{UUID_PREFIX}{wwid}");
        let sectors = group[0].2;
        // A path of another size is not one of this LUN's (multipath refuses it too).
        let (same, other): (Vec<&(String, &Dev, u64)>, Vec<_>) = group.into_iter().partition(|p| p.2 == sectors);
        for p in other {
            note(
                init,
                format!(
                    "multipath: {} has the WWID {wwid} but {} sectors, not {sectors}: left out of the map",
                    p.1.name, p.2
                ),
            );
        }
        let map = existing.iter().find(|m| m.uuid == uuid);
        let devnos: Vec<(u32, u32)> = match map {
            None => same.iter().map(|p| p.1.devno).collect(),
            Some(m) => {
                let new: Vec<&&(String, &Dev, u64)> = same.iter().filter(|p| !m.slaves.contains(&p.1.name)).collect();
                if new.is_empty() {
                    changed |= partitions(init, m);
                    continue;
                }
                // Every path it has (one that went away stays: the kernel fails it) and the new.
                let mut v: Vec<(u32, u32)> = m
                    .slaves
                    .iter()
                    .filter_map(|s| sys::read_string(&format!("/sys/class/block/{s}/dev")))
                    .map(|s| crate::devices::parse_devno(&s))
                    .collect();
                v.extend(new.iter().map(|p| p.1.devno));
                v
            }
        };
        let params = table(&conf, &devnos);
        let names: Vec<&str> = same.iter().map(|p| p.1.name.as_str()).collect();
        match map {
            Some(m) => match crate::dm::reload(&m.name, "multipath", sectors, &params) {
                Ok(()) => {
                    init.log.step(&format!("multipath {}: paths now {params}", m.name));
                    changed = true;
                }
                Err(e) => note(
                    init,
                    format!("multipath: adding {} to {}: {}: {}", names.join(" "), m.name, e.step, strerror(e.errno)),
                ),
            },
            None => {
                let taken = |n: &str| existing.iter().any(|m| m.name == n);
                let name = map_name(&conf, &bindings, wwid, &taken);
                match crate::dm::create(&name, &uuid, 0, "multipath", sectors, &params) {
                    Ok(devno) => {
                        init.log.step(&format!("multipath {name} ({wwid}) on {}: {params}", names.join(" ")));
                        mapper_node(&name, devno);
                        changed = true;
                        if let Some(m) = maps().into_iter().find(|m| m.uuid == uuid) {
                            partitions(init, &m);
                        }
                    }
                    Err(e) => note(
                        init,
                        format!(
                            "multipath: the map {name} of {} (WWID {wwid}): {}: {}",
                            names.join(" "),
                            e.step,
                            strerror(e.errno)
                        ),
                    ),
                }
            }
        }
    }
    changed
}

/// /dev/mapper/NAME for a map made here (lvm and cryptsetup make theirs), so that the root is
/// mounted, and /proc/mounts shows it, by that name.
fn mapper_node(name: &str, devno: (u32, u32)) {
    sys::mkdir_p("/dev/mapper");
    let _ = rustix::fs::mknodat(
        rustix::fs::CWD,
        format!("/dev/mapper/{name}").as_str(),
        rustix::fs::FileType::BlockDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        rustix::fs::makedev(devno.0, devno.1),
    );
}

/// The partitions of map `m` as kpartx maps them (`kpartx -a -p -part`, Debian's rule): a
/// linear map `NAME-partN` of each, DM UUID `partN-mpath-WWID`; the kernel does not partition a
/// device-mapper device itself. Nothing is done for a map something already holds. True when
/// one was made.
fn partitions(init: &mut Init, m: &Map) -> bool {
    if m.held {
        return false;
    }
    let Ok(f) = sys::open(&format!("/dev/{}", m.kname)) else { return false };
    let Some(devno) = sys::read_string(&format!("/sys/class/block/{}/dev", m.kname)) else { return false };
    let (major, minor) = crate::devices::parse_devno(&devno);
    let mut made = false;
    for p in crate::probe::partitions(&f).into_iter().filter(|p| !p.extended && p.sectors > 0) {
        let name = format!("{}-part{}", m.name, p.number);
        let uuid = format!("part{}-{}", p.number, m.uuid);
        let params = format!("{major}:{minor} {}", p.start);
        match crate::dm::create(&name, &uuid, 0, "linear", p.sectors, &params) {
            Ok(d) => {
                init.log.step(&format!("multipath: {name} ({} sectors at {})", p.sectors, p.start));
                mapper_node(&name, d);
                made = true;
            }
            Err(e) => note(init, format!("multipath: the partition map {name}: {}: {}", e.step, strerror(e.errno))),
        }
    }
    made
}

/// Leave the paths of the maps, and their partitions, out of the devices the root is looked
/// for on: the root is on the map (the same file system is seen through every path).
pub fn hide_paths(devs: &mut Vec<Dev>) {
    let taken: Vec<String> =
        maps().into_iter().filter(|m| m.uuid.starts_with(UUID_PREFIX)).flat_map(|m| m.slaves).collect();
    if taken.is_empty() {
        return;
    }
    devs.retain(|d| !taken.contains(&d.name) && !d.disk.as_ref().is_some_and(|k| taken.contains(k)));
}

/// The paths of a `multipath` status line and whether each is active (`MAJ:MIN A|F COUNT`).
pub fn path_states(status: &str) -> Vec<(String, bool)> {
    let w: Vec<&str> = status.split_whitespace().collect();
    let devno = |s: &str| s.split_once(':').is_some_and(|(a, b)| a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok());
    w.windows(2)
        .filter(|x| devno(x[0]) && (x[1] == "A" || x[1] == "F"))
        .map(|x| (x[0].to_string(), x[1] == "A"))
        .collect()
}

/// For the diagnosis: each map with no working path, its paths and what the kernel says of them.
pub fn problems() -> Vec<String> {
    let mut v = Vec::new();
    for m in maps().into_iter().filter(|m| m.uuid.starts_with(UUID_PREFIX)) {
        let Ok(st) = crate::dm::status(&m.name) else { continue };
        let Some((_, line)) = st.into_iter().find(|(k, _)| k == "multipath") else { continue };
        let states = path_states(&line);
        if states.iter().any(|(_, a)| *a) {
            continue;
        }
        let wwid = &m.uuid[UUID_PREFIX.len()..];
        let named: Vec<String> = states
            .iter()
            .map(|(d, _)| {
                let k = sys::readlink(&format!("/sys/dev/block/{d}"))
                    .and_then(|l| l.rsplit('/').next().map(str::to_string))
                    .unwrap_or_else(|| d.clone());
                format!("{k} failed")
            })
            .collect();
        let paths = if named.is_empty() { String::from("it has no path") } else { named.join(", ") };
        v.push(format!(
            "multipath map {} (WWID {wwid}) has no working path ({paths}): every path returned I/O errors, so \
             nothing on it can be read; check the cabling, the SAN zoning or the storage array, or boot with \
             rd.multipath=0 to read a path directly",
            m.name
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// VPD page 0x83 as QEMU's scsi-hd answers with `serial=` and `wwn=`: a vendor-specific
    /// ASCII designator, then the NAA one.
    fn qemu_page(wwn: u64) -> Vec<u8> {
        let mut d = vec![0x02, 0x00, 0x00, 0x06];
        d.extend(b"leanrd");
        d.extend([0x01, 0x03, 0x00, 0x08]);
        d.extend(wwn.to_be_bytes());
        let mut b = vec![0x00, 0x83];
        b.extend((d.len() as u16).to_be_bytes());
        b.extend(d);
        b
    }
    use alloc::vec;

    #[test]
    fn wwids_are_multipaths() {
        assert_eq!(wwid_from_vpd83(&qemu_page(0x5000c50015ea71ac)).as_deref(), Some("35000c50015ea71ac"));
        // NAA Registered Extended (16 bytes) wins over EUI-64 and T10; a target port's (association
        // 1) is not the LUN's.
        let mut d = vec![0x01, 0x13, 0x00, 0x08];
        d.extend(0x5111111111111111u64.to_be_bytes());
        d.extend([0x01, 0x02, 0x00, 0x08]);
        d.extend(0x0011223344556677u64.to_be_bytes());
        d.extend([0x02, 0x01, 0x00, 0x0c]);
        d.extend(b"ATA  X  Y   ");
        d.extend([0x01, 0x03, 0x00, 0x10]);
        d.extend([0x60, 0x0a, 0x0b, 0x80, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3]);
        let page = |d: &[u8]| [&[0x00, 0x83][..], &(d.len() as u16).to_be_bytes(), d].concat();
        assert_eq!(wwid_from_vpd83(&page(&d)).as_deref(), Some("3600a0b80000000010000000200000003"));
        assert_eq!(wwid_from_vpd83(&page(&d[..36])).as_deref(), Some("20011223344556677"));
        assert_eq!(wwid_from_vpd83(&page(&d[..12 + 12 + 16])).as_deref(), Some("20011223344556677"));
        assert_eq!(wwid_from_vpd83(&page(&d[24..40])).as_deref(), Some("1ATA_X_Y"));
        assert_eq!(wwid_from_vpd83(&page(&d[..12])), None);
        let mut s = vec![0x03, 0x08, 0x00, 0x14];
        s.extend(b"naa.600A0B80\0\0\0\0\0\0\0\0");
        assert_eq!(wwid_from_vpd83(&page(&s)).as_deref(), Some("3600a0b80"));
        // A text designator with bytes that are not printable ASCII gives no WWID (fuzzed: a T10
        // vendor id of 0xff bytes); the next designator does.
        let mut t = vec![0x02, 0x01, 0x00, 0x08];
        t.extend([0xff; 8]);
        assert_eq!(wwid_from_vpd83(&page(&t)), None);
        t.extend([0x01, 0x02, 0x00, 0x08]);
        t.extend(0x0011223344556677u64.to_be_bytes());
        assert_eq!(wwid_from_vpd83(&page(&t)).as_deref(), Some("20011223344556677"));
        let mut n = vec![0x03, 0x08, 0x00, 0x07];
        n.extend(b"iqn.a\x01b");
        assert_eq!(wwid_from_vpd83(&page(&n)), None);
        n[9] = b'x';
        assert_eq!(wwid_from_vpd83(&page(&n)).as_deref(), Some("8axb"));
        for hostile in
            [&[][..], &[0, 0x83, 0xff, 0xff], &[0, 0x83, 0, 4, 1, 3, 0, 200], &[0, 0x83, 0, 5, 1, 3, 0, 0, 0]]
        {
            let _ = wwid_from_vpd83(hostile);
        }
    }

    #[test]
    fn tables_are_multipaths() {
        let mut c = MultipathConf::default();
        assert_eq!(table(&c, &[(8, 0), (8, 16)]), "0 0 2 1 service-time 0 1 1 8:0 1 service-time 0 1 1 8:16 1");
        c.multibus = true;
        c.no_path_retry = leanrd_contract::multipath::NoPathRetry::Queue;
        assert_eq!(table(&c, &[(8, 0), (8, 16)]), "1 queue_if_no_path 0 1 1 service-time 0 2 1 8:0 1 8:16 1");
        let mut y = MultipathConf::default();
        assert!(!wanted(&y, &[], "36", 2) && wanted(&y, &["36".into()], "36", 1));
        y.find_multipaths = FindMultipaths::Yes;
        assert!(wanted(&y, &[], "36", 2) && !wanted(&y, &[], "36", 1));
    }

    #[test]
    fn path_states_are_read_from_the_status_line() {
        let st = "2 0 0 0 2 1 A 0 1 2 8:0 F 1 0 1 E 0 1 2 8:16 A 0 0 1";
        assert_eq!(path_states(st), [("8:0".to_string(), false), ("8:16".to_string(), true)]);
        assert!(path_states("").is_empty() && path_states("1:2").is_empty());
    }
}
