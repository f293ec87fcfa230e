//! Device trees in UKIs: the root node of a flattened device tree (`.dtb`, `.dtbauto`), and
//! the `.hwids` section that maps machines to device trees (systemd-stub 257 and later).
//!
//! systemd-stub picks a `.dtbauto` by its root `compatible`: the firmware's device tree's, or,
//! where the firmware gives none, the one `.hwids` names for this machine. A `.hwids` section
//! is a table of 28-byte devices (systemd's src/boot/chid.h `Device`, as ukify packs it: a
//! descriptor with the type in its top 4 bits and the size below, the CHID as an EFI GUID,
//! then the offsets of the name and of the compatible string), ended by a zeroed device, then
//! the strings, each ended by a NUL.
//!
//! Only the root node's properties are read here: no crate reads a flattened device tree
//! without the possibility of a panic on a malformed one (the `fdt` crate's `root()` and
//! `Root::compatible()` expect what a hostile file may lack), and the header and one node's
//! properties are a few dozen lines.

use crate::error::{Result, bail};

/// The magic at a flattened device tree's start.
const FDT_MAGIC: u32 = 0xd00d_feed;
const FDT_BEGIN_NODE: u32 = 1;
const FDT_END_NODE: u32 = 2;
const FDT_PROP: u32 = 3;
const FDT_NOP: u32 = 4;

/// The root node of a device tree: what the stub matches (`compatible`) and what the kernel
/// shows (`model`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Root {
    /// The root's `model`, when it has one.
    pub model: Option<String>,
    /// The root's `compatible` strings, most specific first.
    pub compatible: Vec<String>,
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at.checked_add(4)?).map(|x| u32::from_be_bytes([x[0], x[1], x[2], x[3]]))
}

/// The NUL-separated strings of a property's value.
fn strings(v: &[u8]) -> Vec<String> {
    v.split(|&c| c == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect()
}

/// A flattened device tree's root node, its header checked as the stub checks it (the magic,
/// and a total size within the data).
pub fn root(b: &[u8]) -> Result<Root> {
    if be32(b, 0) != Some(FDT_MAGIC) {
        bail!("no FDT magic (d00dfeed) at its start");
    }
    let total = be32(b, 4).unwrap_or(0) as usize;
    if !(40..=b.len()).contains(&total) {
        bail!("its header says {total} bytes, not between its header's 40 and the file's {}", b.len());
    }
    let b = &b[..total];
    let (Some(st), Some(strs), Some(strs_len), Some(st_len)) = (be32(b, 8), be32(b, 12), be32(b, 32), be32(b, 36))
    else {
        bail!("a header shorter than 40 bytes");
    };
    let (st, st_len, strs, strs_len) = (st as usize, st_len as usize, strs as usize, strs_len as usize);
    let Some(structure) = st.checked_add(st_len).and_then(|end| b.get(st..end)) else {
        bail!("its structure block ({st_len} bytes at {st}) is past its end");
    };
    let Some(names) = strs.checked_add(strs_len).and_then(|end| b.get(strs..end)) else {
        bail!("its strings block ({strs_len} bytes at {strs}) is past its end");
    };
    let mut at = 0usize;
    // Past NOPs, the root node: FDT_BEGIN_NODE and an empty name, padded to 4 bytes.
    while be32(structure, at) == Some(FDT_NOP) {
        at += 4;
    }
    if be32(structure, at) != Some(FDT_BEGIN_NODE) {
        bail!("its structure block does not start with a node");
    }
    let name_end = structure.get(at + 4..).and_then(|r| r.iter().position(|&c| c == 0));
    let Some(name_len) = name_end else { bail!("the root node's name has no end") };
    at += 4 + (name_len + 1).next_multiple_of(4);
    let mut r = Root::default();
    // The root's properties come before its first child (the specification's order).
    loop {
        match be32(structure, at) {
            Some(FDT_NOP) => at += 4,
            Some(FDT_PROP) => {
                let (Some(len), Some(off)) = (be32(structure, at + 4), be32(structure, at + 8)) else {
                    bail!("a property past the structure block's end");
                };
                let (len, off) = (len as usize, off as usize);
                let Some(value) = (at + 12).checked_add(len).and_then(|end| structure.get(at + 12..end)) else {
                    bail!("a property of {len} bytes past the structure block's end");
                };
                let name = names.get(off..).and_then(|n| n.iter().position(|&c| c == 0).map(|e| &n[..e]));
                let Some(name) = name else { bail!("a property name past the strings block's end") };
                match name {
                    b"model" => r.model = strings(value).into_iter().next(),
                    b"compatible" => r.compatible = strings(value),
                    _ => {}
                }
                at += 12 + len.next_multiple_of(4);
            }
            Some(FDT_BEGIN_NODE | FDT_END_NODE) => return Ok(r),
            Some(t) => bail!("token {t:#x} in the root node"),
            None => bail!("the root node has no end"),
        }
    }
}

/// DEVICE_TYPE_DEVICETREE: a device whose string is a device tree's `compatible`.
const DEVICE_TYPE_DEVICETREE: u32 = 1;
/// `sizeof(Device)`.
const DEVICE_SIZE: usize = 28;

/// One machine of a `.hwids` section: its name, the `compatible` of the device tree it gets,
/// and its CHIDs (as `fwupdtool hwids` prints them, in RFC 4122 byte order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HwidDevice {
    /// What the machine is called.
    pub name: String,
    /// The root `compatible` of the `.dtbauto` it gets.
    pub compatible: String,
    /// Its computer hardware IDs (CHIDs), each as 16 bytes in RFC 4122 order.
    pub chids: Vec<[u8; 16]>,
}

/// A GUID's bytes as EFI (and ukify's `bytes_le`) store them: the first three fields little
/// endian.
fn guid_le(u: &[u8; 16]) -> [u8; 16] {
    let mut g = *u;
    g[0..4].reverse();
    g[4..6].reverse();
    g[6..8].reverse();
    g
}

/// The `.hwids` section for `devices`, laid out as ukify lays it out: each device's CHIDs
/// sorted, one entry per CHID, then the end entry, then the strings sorted, once each.
pub fn hwids_section(devices: &[HwidDevice]) -> Vec<u8> {
    let mut strs: Vec<&str> = devices.iter().flat_map(|d| [d.name.as_str(), d.compatible.as_str()]).collect();
    strs.sort_unstable();
    strs.dedup();
    // Each device's CHIDs sorted and each once, before anything is counted: the strings start
    // after the entries.
    let chids: Vec<Vec<[u8; 16]>> = devices
        .iter()
        .map(|d| {
            let mut c = d.chids.clone();
            c.sort_unstable();
            c.dedup();
            c
        })
        .collect();
    let entries: usize = chids.iter().map(Vec::len).sum::<usize>() + 1;
    let base = entries * DEVICE_SIZE;
    let mut offsets = Vec::with_capacity(strs.len());
    let mut blob = Vec::new();
    for s in &strs {
        offsets.push((*s, (base + blob.len()) as u32));
        blob.extend_from_slice(s.as_bytes());
        blob.push(0);
    }
    let offset = |s: &str| offsets.iter().find(|(t, _)| *t == s).map_or(0, |(_, o)| *o);
    let mut out = Vec::with_capacity(base + blob.len());
    for (d, chids) in devices.iter().zip(&chids) {
        for c in chids {
            out.extend_from_slice(&((DEVICE_TYPE_DEVICETREE << 28) | DEVICE_SIZE as u32).to_le_bytes());
            out.extend_from_slice(&guid_le(c));
            out.extend_from_slice(&offset(&d.name).to_le_bytes());
            out.extend_from_slice(&offset(&d.compatible).to_le_bytes());
        }
    }
    out.resize(out.len() + DEVICE_SIZE, 0);
    out.extend_from_slice(&blob);
    out
}

/// One entry of a `.hwids` section as read back: the device type, the CHID (RFC 4122 order),
/// its name and its compatible string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HwidEntry {
    /// The device type (1: a device tree).
    pub kind: u32,
    /// The CHID, in RFC 4122 byte order.
    pub chid: [u8; 16],
    /// The machine's name.
    pub name: String,
    /// The compatible string (or, for other types, the firmware ID).
    pub compatible: String,
}

/// A `.hwids` section's entries, up to its end entry.
pub fn hwids_entries(b: &[u8]) -> Result<Vec<HwidEntry>> {
    let le32 = |at: usize| b.get(at..at + 4).map(|x| u32::from_le_bytes([x[0], x[1], x[2], x[3]]));
    // Offset 0 is systemd's "not present" (it would be the first descriptor).
    let string = |off: u32| -> Result<String> {
        if off == 0 {
            return Ok(String::new());
        }
        let Some(s) = b.get(off as usize..).and_then(|r| r.iter().position(|&c| c == 0).map(|e| &r[..e])) else {
            bail!("a string at {off}, past the section's end");
        };
        Ok(String::from_utf8_lossy(s).into_owned())
    };
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        let at = i * DEVICE_SIZE;
        let Some(descriptor) = le32(at) else { bail!("no end entry") };
        if descriptor == 0 {
            return Ok(out);
        }
        if descriptor & 0x0fff_ffff != DEVICE_SIZE as u32 {
            bail!("entry {i} says it is {} bytes, not {DEVICE_SIZE}", descriptor & 0x0fff_ffff);
        }
        let (Some(g), Some(name), Some(compat)) = (b.get(at + 4..at + 20), le32(at + 20), le32(at + 24)) else {
            bail!("entry {i} past the section's end");
        };
        let mut chid = [0u8; 16];
        chid.copy_from_slice(g);
        out.push(HwidEntry {
            kind: descriptor >> 28,
            chid: guid_le(&chid),
            name: string(name)?,
            compatible: string(compat)?,
        });
        i += 1;
    }
}

/// A CHID in its usual text form (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`).
pub fn chid_text(c: &[u8; 16]) -> String {
    let h: String = c.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// A CHID from its text form, with or without the braces `fwupdtool hwids` prints around it.
pub fn parse_chid(s: &str) -> Option<[u8; 16]> {
    let s = s.strip_prefix('{').and_then(|r| r.strip_suffix('}')).unwrap_or(s);
    let groups: Vec<&str> = s.split('-').collect();
    if groups.iter().map(|g| g.len()).collect::<Vec<_>>() != [8, 4, 4, 4, 12]
        || !groups.iter().all(|g| g.bytes().all(|c| c.is_ascii_hexdigit()))
    {
        return None;
    }
    let hex: String = groups.concat();
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    use leanrd_testkit::device_tree as tree;

    #[test]
    fn the_roots_model_and_compatible_are_read() {
        let b = tree(&[
            ("#address-cells", &[0, 0, 0, 2]),
            ("compatible", b"leanrd,board-2\0linux,dummy-virt\0"),
            ("model", b"leanrd board\0"),
        ]);
        let r = root(&b).unwrap();
        assert_eq!(r.model.as_deref(), Some("leanrd board"));
        assert_eq!(r.compatible, ["leanrd,board-2", "linux,dummy-virt"]);
        assert_eq!(root(&tree(&[])).unwrap(), Root::default());
        // Whatever a file holds is refused with a reason, never a panic.
        assert!(root(b"not a tree").is_err());
        for cut in 0..b.len() {
            let mut short = b[..cut].to_vec();
            if cut >= 8 {
                short[4..8].copy_from_slice(&(cut as u32).to_be_bytes());
            }
            let _ = root(&short);
        }
        let mut bad = b.clone();
        bad[68..72].copy_from_slice(&0xffff_fff0u32.to_be_bytes()); // the first property's length
        assert!(root(&bad).is_err());
    }

    /// The layout ukify's `parse_hwid_dir` writes, byte for byte, for one device with two
    /// CHIDs (given out of order) and one with one.
    #[test]
    fn hwids_are_packed_as_ukify_packs_them() {
        let a = parse_chid("2f6d4c3e-6e1b-5cf6-9a8b-1f2e3d4c5b6a").unwrap();
        let b = parse_chid("0a1b2c3d-4e5f-5061-8273-8495a6b7c8d9").unwrap();
        let c = parse_chid("11111111-2222-5333-8444-555555555555").unwrap();
        let devs = [
            // A CHID given twice (two files of one machine) is one entry.
            HwidDevice { name: "Board X".into(), compatible: "vendor,x".into(), chids: vec![a, b, a] },
            HwidDevice { name: "Board Y".into(), compatible: "vendor,y".into(), chids: vec![c] },
        ];
        let s = hwids_section(&devs);
        // 3 entries and the end entry: the strings at 112, sorted: "Board X", "Board Y", "vendor,x", "vendor,y".
        assert_eq!(&s[112..], b"Board X\0Board Y\0vendor,x\0vendor,y\0");
        assert_eq!(&s[0..4], &0x1000_001cu32.to_le_bytes());
        // The smaller CHID first, stored as EFI stores a GUID.
        assert_eq!(
            &s[4..20],
            &[0x3d, 0x2c, 0x1b, 0x0a, 0x5f, 0x4e, 0x61, 0x50, 0x82, 0x73, 0x84, 0x95, 0xa6, 0xb7, 0xc8, 0xd9]
        );
        assert_eq!(&s[20..28], &[112, 0, 0, 0, 128, 0, 0, 0]);
        assert_eq!(&s[84..112], &[0; 28]);
        let back = hwids_entries(&s).unwrap();
        let shown: Vec<(String, &str, &str)> =
            back.iter().map(|e| (chid_text(&e.chid), e.name.as_str(), e.compatible.as_str())).collect();
        assert_eq!(
            shown,
            [
                ("0a1b2c3d-4e5f-5061-8273-8495a6b7c8d9".to_string(), "Board X", "vendor,x"),
                ("2f6d4c3e-6e1b-5cf6-9a8b-1f2e3d4c5b6a".to_string(), "Board X", "vendor,x"),
                ("11111111-2222-5333-8444-555555555555".to_string(), "Board Y", "vendor,y"),
            ]
        );
        assert!(back.iter().all(|e| e.kind == 1));
        for cut in 0..s.len() {
            let _ = hwids_entries(&s[..cut]);
        }
        assert!(hwids_entries(&s[..84]).is_err(), "cut before its end entry");
        // An absent name (offset 0) reads as none, not as the descriptor's bytes.
        let mut nameless = s.clone();
        nameless[20..24].copy_from_slice(&[0; 4]);
        assert_eq!(hwids_entries(&nameless).unwrap()[0].name, "");
        assert_eq!(parse_chid("2f6d4c3e6e1b5cf69a8b1f2e3d4c5b6a"), None);
        assert_eq!(parse_chid("2f6d4c3e-6e1b-5cf6-9a8b-1f2e3d4c5b6g"), None);
        assert_eq!(parse_chid("2f6d4c3e-6e1b-5cf6-9a8b-1f2e3d4c5b+a"), None, "from_str_radix's sign");
        assert_eq!(parse_chid("{2f6d4c3e-6e1b-5cf6-9a8b-1f2e3d4c5b6a}"), Some(a), "fwupdtool's braces");
    }
}
