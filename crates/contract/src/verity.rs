//! dm-verity as systemd sets it up: the Discoverable Partitions Specification's type UUIDs,
//! the root hash's two halves that name the data and verity partitions, veritytab's options,
//! the verity superblock veritysetup writes, the `verity` target's table, and the
//! `*-verity-sig` partition's JSON. Shared by /init (which sets the devices up) and the
//! generator (which detects them on the host and proves the image can set them up).
//!
//! Hand-written: the superblock is 512 bytes at fixed offsets (cryptsetup's `struct verity_sb`,
//! lib/verity/verity.c) and the table one line (the kernel's
//! Documentation/admin-guide/device-mapper/verity.rst); no crate reads either without
//! libcryptsetup.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use base64ct::{Base64, Encoding};

/// What a DPS partition is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartRole {
    /// The root file system.
    Root,
    /// The root's dm-verity hash data.
    RootVerity,
    /// The root's signed root hash (JSON).
    RootVeritySig,
    /// /usr.
    Usr,
    /// /usr's dm-verity hash data.
    UsrVerity,
    /// /usr's signed root hash (JSON).
    UsrVeritySig,
}

/// The DPS type UUIDs this architecture's partitions carry (docs/DISCOVERABLE_PARTITIONS.md in
/// systemd): x86-64 and arm64, the architectures leanrd builds /init for.
pub const DPS_TYPES: [(&str, &str, PartRole); 12] = [
    ("x86_64", "4f68bce3-e8cd-4db1-96e7-fbcaf984b709", PartRole::Root),
    ("x86_64", "2c7357ed-ebd2-46d9-aec1-23d437ec2bf5", PartRole::RootVerity),
    ("x86_64", "41092b05-9fc8-4523-994f-2def0408b176", PartRole::RootVeritySig),
    ("x86_64", "8484680c-9521-48c6-9c11-b0720656f69e", PartRole::Usr),
    ("x86_64", "77ff5f63-e7b6-4633-acf4-1565b864c0e6", PartRole::UsrVerity),
    ("x86_64", "e7bb33fb-06cf-4e81-8273-e543b413e2e2", PartRole::UsrVeritySig),
    ("aarch64", "b921b045-1df0-41c3-af44-4c6f280d3fae", PartRole::Root),
    ("aarch64", "df3300ce-d69f-4c92-978c-9bfb0f38d820", PartRole::RootVerity),
    ("aarch64", "6db69de6-29f4-4758-a7a5-962190f00ce3", PartRole::RootVeritySig),
    ("aarch64", "b0e01050-ee5f-4390-949a-9101b17104e9", PartRole::Usr),
    ("aarch64", "6e11a4e7-fbca-4ded-b9e9-e1a512bb664e", PartRole::UsrVerity),
    ("aarch64", "c23ce4ff-44bd-4b00-b2d4-b41b3419e02a", PartRole::UsrVeritySig),
];

/// The role of a partition type UUID on `arch` (`x86_64`, `aarch64`); None: not one of DPS's.
pub fn part_role(arch: &str, type_uuid: &str) -> Option<PartRole> {
    DPS_TYPES.iter().find(|(a, t, _)| *a == arch && t.eq_ignore_ascii_case(type_uuid)).map(|(_, _, r)| *r)
}

/// The type UUID of `role` on `arch`.
pub fn part_type(arch: &str, role: PartRole) -> Option<&'static str> {
    DPS_TYPES.iter().find(|(a, _, r)| *a == arch && *r == role).map(|(_, t, _)| *t)
}

/// GPT partition attribute bits DPS gives a meaning (its "Partition Flags").
pub mod flags {
    /// Bit 59: grow the file system to the partition's size.
    pub const GROWFS: u64 = 1 << 59;
    /// Bit 60: mount read-only.
    pub const READ_ONLY: u64 = 1 << 60;
    /// Bit 63: not discovered at all.
    pub const NO_AUTO: u64 = 1 << 63;
}

/// A root hash: hex, of an even number of digits, at least 32 (128 bits; sha256 gives 64).
pub fn parse_root_hash(s: &str) -> Result<Vec<u8>, String> {
    let s = s.trim();
    if s.len() < 32 || !s.len().is_multiple_of(2) || s.len() > 128 {
        return Err(format!("\"{s}\" is not a root hash (hex, 32 to 128 digits)"));
    }
    hex(s).ok_or_else(|| format!("\"{s}\" is not a root hash (hex digits only)"))
}

/// Bytes from hex digits; None when any is not one.
pub fn hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let b = s.as_bytes();
    let d = |c: u8| (c as char).to_digit(16).map(|v| v as u8);
    (0..b.len() / 2).map(|i| Some(d(b[2 * i])? << 4 | d(b[2 * i + 1])?)).collect()
}

/// Bytes as lower-case hex.
pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// 16 bytes as a UUID's text (in order, as systemd's `sd_id128` prints them).
fn uuid_text(b: &[u8]) -> String {
    let h = to_hex(&b[..16]);
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// The PARTUUIDs DPS gives the data and the verity partition of a root hash: its first 128
/// bits and its last 128 bits.
pub fn hash_halves(root_hash: &[u8]) -> Option<(String, String)> {
    (root_hash.len() >= 32).then(|| (uuid_text(&root_hash[..16]), uuid_text(&root_hash[root_hash.len() - 16..])))
}

/// What the kernel does when a block does not match its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnCorruption {
    /// Log it and return the data anyway.
    Ignore,
    /// Restart the machine.
    Restart,
    /// Panic.
    Panic,
}

/// veritytab's options (systemd-veritysetup's, as `systemd.verity_root_options=` takes them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerityOptions {
    /// `superblock=`: the hash device starts (at `hash_offset`) with veritysetup's superblock,
    /// which gives what the options below leave out. Default: true.
    pub superblock: bool,
    /// `format=`: the hash format (0: Chrome OS's, 1: normal). Default: the superblock's, else 1.
    pub format: Option<u32>,
    /// `data-block-size=` (bytes).
    pub data_block_size: Option<u32>,
    /// `hash-block-size=` (bytes).
    pub hash_block_size: Option<u32>,
    /// `data-blocks=`: how many data blocks are covered.
    pub data_blocks: Option<u64>,
    /// `hash-offset=`: where the hash area (its superblock) starts on the hash device, in bytes.
    pub hash_offset: u64,
    /// `salt=`: the salt in hex (`-` or empty: none).
    pub salt: Option<Vec<u8>>,
    /// `hash=`: the hash algorithm (sha256, ...).
    pub hash: Option<String>,
    /// `ignore-corruption`, `restart-on-corruption`, `panic-on-corruption`.
    pub on_corruption: Option<OnCorruption>,
    /// `ignore-zero-blocks`.
    pub ignore_zero_blocks: bool,
    /// `check-at-most-once`.
    pub check_at_most_once: bool,
    /// `fec-device=`: the device holding forward error correction data.
    pub fec_device: Option<String>,
    /// `fec-offset=`: where it starts there, in bytes.
    pub fec_offset: u64,
    /// `fec-roots=`: Reed-Solomon roots. Default: 2.
    pub fec_roots: u32,
    /// `root-hash-signature=`: `base64:...` (the PKCS#7 signature itself); a path is refused:
    /// the initramfs has no such file.
    pub signature: Option<Vec<u8>>,
}

impl Default for VerityOptions {
    fn default() -> VerityOptions {
        VerityOptions {
            superblock: true,
            format: None,
            data_block_size: None,
            hash_block_size: None,
            data_blocks: None,
            hash_offset: 0,
            salt: None,
            hash: None,
            on_corruption: None,
            ignore_zero_blocks: false,
            check_at_most_once: false,
            fec_device: None,
            fec_offset: 0,
            fec_roots: 2,
            signature: None,
        }
    }
}

/// A block size cryptsetup and the kernel take: a power of two from 512 bytes to 512 KiB.
fn block_size(v: &str) -> Result<u32, String> {
    let n: u32 = v.parse().map_err(|_| format!("\"{v}\" is not a number of bytes"))?;
    if !(512..=512 * 1024).contains(&n) || !n.is_power_of_two() {
        return Err(format!("{n} is not a block size (a power of two, 512 to 524288)"));
    }
    Ok(n)
}

impl VerityOptions {
    /// A comma list of veritytab options. Options systemd reads at another time
    /// (`x-initrd.attach`, `_netdev`, `nofail`...) are skipped; any other unknown one is an error.
    pub fn parse(s: &str) -> Result<VerityOptions, String> {
        let mut o = VerityOptions::default();
        for w in s.split(',').filter(|w| !w.is_empty()) {
            let (k, v) = match w.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (w, None),
            };
            let number = |v: &str| v.parse::<u64>().map_err(|_| format!("{k}={v}: not a number"));
            match (k, v) {
                ("superblock", _) => {
                    o.superblock = match v {
                        None | Some("1" | "yes" | "true" | "on") => true,
                        Some("0" | "no" | "false" | "off") => false,
                        Some(v) => return Err(format!("superblock={v}: not true or false")),
                    }
                }
                ("format", Some(v)) => {
                    o.format = Some(match v {
                        "0" => 0,
                        "1" => 1,
                        _ => return Err(format!("format={v}: not 0 or 1")),
                    })
                }
                ("data-block-size", Some(v)) => o.data_block_size = Some(block_size(v)?),
                ("hash-block-size", Some(v)) => o.hash_block_size = Some(block_size(v)?),
                ("data-blocks", Some(v)) => o.data_blocks = Some(number(v)?),
                ("hash-offset", Some(v)) => {
                    let n = number(v)?;
                    if !n.is_multiple_of(512) {
                        return Err(format!("hash-offset={n}: not a multiple of 512"));
                    }
                    o.hash_offset = n;
                }
                ("salt", Some(v)) => {
                    o.salt = Some(match v {
                        "" | "-" => Vec::new(),
                        v => hex(v).filter(|s| s.len() <= 256).ok_or_else(|| format!("salt={v}: not hex"))?,
                    })
                }
                ("hash", Some(v)) => {
                    if v.is_empty() || v.len() >= 32 || !v.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-') {
                        return Err(format!("hash={v}: not a hash algorithm's name"));
                    }
                    o.hash = Some(v.into())
                }
                ("uuid", Some(_)) => {}
                ("ignore-corruption", None) => o.on_corruption = Some(OnCorruption::Ignore),
                ("restart-on-corruption", None) => o.on_corruption = Some(OnCorruption::Restart),
                ("panic-on-corruption", None) => o.on_corruption = Some(OnCorruption::Panic),
                ("ignore-zero-blocks", None) => o.ignore_zero_blocks = true,
                ("check-at-most-once", None) => o.check_at_most_once = true,
                ("fec-device", Some(v)) if !v.is_empty() && !v.contains(char::is_whitespace) => {
                    o.fec_device = Some(v.into())
                }
                ("fec-offset", Some(v)) => o.fec_offset = number(v)?,
                ("fec-roots", Some(v)) => {
                    let n = number(v)?;
                    if !(2..=24).contains(&n) {
                        return Err(format!("fec-roots={n}: not 2 to 24"));
                    }
                    o.fec_roots = n as u32;
                }
                ("root-hash-signature", Some(v)) => match v.strip_prefix("base64:") {
                    Some(b) => {
                        o.signature = Some(Base64::decode_vec(b).map_err(|_| "root-hash-signature=: not base64")?)
                    }
                    None => return Err(format!("root-hash-signature={v}: only base64:... is read in the initramfs")),
                },
                ("x-initrd.attach" | "_netdev" | "nofail" | "noauto" | "x-systemd.device-timeout", _) => {}
                (k, _) if k.starts_with("x-") => {}
                _ => return Err(format!("\"{w}\" is not a verity option")),
            }
        }
        Ok(o)
    }
}

/// veritysetup's superblock: 512 bytes at the hash area's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// The hash format (0: Chrome OS's, 1: normal).
    pub hash_type: u32,
    /// The hash algorithm's name.
    pub algorithm: String,
    /// Data block size, bytes.
    pub data_block_size: u32,
    /// Hash block size, bytes.
    pub hash_block_size: u32,
    /// How many data blocks the hash tree covers.
    pub data_blocks: u64,
    /// The salt.
    pub salt: Vec<u8>,
}

/// The superblock's size.
pub const SUPERBLOCK_SIZE: usize = 512;

impl Superblock {
    /// The superblock in `b` (512 bytes read at the hash offset); Err says what is wrong.
    pub fn parse(b: &[u8]) -> Result<Superblock, String> {
        if b.len() < SUPERBLOCK_SIZE || &b[0..8] != b"verity\0\0" {
            return Err("no verity superblock (no \"verity\" signature)".into());
        }
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let version = u32_at(8);
        if version != 1 {
            return Err(format!("verity superblock version {version}, not 1"));
        }
        let hash_type = u32_at(12);
        if hash_type > 1 {
            return Err(format!("verity hash type {hash_type}, not 0 or 1"));
        }
        let alg = &b[32..64];
        let alg = &alg[..alg.iter().position(|&c| c == 0).unwrap_or(32)];
        let algorithm = String::from_utf8_lossy(alg).into_owned();
        if algorithm.is_empty() || !algorithm.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-') {
            return Err("the verity superblock names no hash algorithm".into());
        }
        let (data_block_size, hash_block_size) = (u32_at(64), u32_at(68));
        for n in [data_block_size, hash_block_size] {
            block_size(&n.to_string()).map_err(|e| format!("the verity superblock: {e}"))?;
        }
        let data_blocks = u64::from_le_bytes(core::array::from_fn(|i| b[72 + i]));
        let salt_size = u16::from_le_bytes([b[80], b[81]]) as usize;
        if salt_size > 256 {
            return Err(format!("the verity superblock's salt of {salt_size} bytes (at most 256)"));
        }
        Ok(Superblock {
            hash_type,
            algorithm,
            data_block_size,
            hash_block_size,
            data_blocks,
            salt: b[88..88 + salt_size].to_vec(),
        })
    }
}

/// Everything the `verity` target's table needs, the superblock's and the options' together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    /// The hash format.
    pub format: u32,
    /// The hash algorithm.
    pub algorithm: String,
    /// Data block size, bytes.
    pub data_block_size: u32,
    /// Hash block size, bytes.
    pub hash_block_size: u32,
    /// How many data blocks.
    pub data_blocks: u64,
    /// The first hash block, in hash blocks from the hash device's start (past the superblock).
    pub hash_start: u64,
    /// The salt.
    pub salt: Vec<u8>,
}

impl Geometry {
    /// The options' values over the superblock's (None: `superblock=false`, when the options
    /// must give them all but the salt and format). Err names what is missing.
    pub fn new(o: &VerityOptions, sb: Option<&Superblock>) -> Result<Geometry, String> {
        let missing = |what: &str| format!("superblock=false, and the options give no {what}");
        let data_block_size = o.data_block_size.or(sb.map(|s| s.data_block_size)).unwrap_or(4096);
        let hash_block_size = o.hash_block_size.or(sb.map(|s| s.hash_block_size)).unwrap_or(4096);
        let data_blocks = o.data_blocks.or(sb.map(|s| s.data_blocks)).ok_or_else(|| missing("data-blocks="))?;
        if data_blocks == 0 {
            return Err("no data blocks to verify".into());
        }
        let algorithm = o.hash.clone().or(sb.map(|s| s.algorithm.clone())).unwrap_or_else(|| "sha256".into());
        // cryptsetup's VERITY_hash_offset_block: past the superblock, rounded up to a hash block.
        let hash_start = if sb.is_some() {
            o.hash_offset.saturating_add(SUPERBLOCK_SIZE as u64).div_ceil(hash_block_size as u64)
        } else {
            o.hash_offset / hash_block_size as u64
        };
        Ok(Geometry {
            format: o.format.or(sb.map(|s| s.hash_type)).unwrap_or(1),
            algorithm,
            data_block_size,
            hash_block_size,
            data_blocks,
            hash_start,
            salt: o.salt.clone().or(sb.map(|s| s.salt.clone())).unwrap_or_default(),
        })
    }

    /// The mapped device's length in 512-byte sectors; None: it overflows.
    pub fn sectors(&self) -> Option<u64> {
        self.data_blocks.checked_mul(self.data_block_size as u64 / 512)
    }

    /// The digest size the algorithm gives, when leanrd knows it (the kernel checks the rest).
    pub fn digest_size(&self) -> Option<usize> {
        match self.algorithm.as_str() {
            "sha1" => Some(20),
            "sha256" | "sha3-256" | "blake2s-256" => Some(32),
            "sha384" => Some(48),
            "sha512" | "sha3-512" | "blake2b-512" => Some(64),
            _ => None,
        }
    }
}

/// The FEC part of a table: the device (`MAJ:MIN`), where it starts (bytes) and how many data
/// blocks it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fec {
    /// The FEC device, `MAJ:MIN`.
    pub device: String,
    /// Where its data starts, in bytes.
    pub offset: u64,
    /// How many blocks (of the data block size) it covers: the data and the hash area.
    pub blocks: u64,
    /// Reed-Solomon roots.
    pub roots: u32,
}

/// The `verity` target's parameters, as veritysetup loads them: `VERSION DATA HASH DBS HBS
/// BLOCKS HASH_START ALG DIGEST SALT [N OPTS...]` (devices as `MAJ:MIN`).
pub fn table(
    g: &Geometry,
    data: &str,
    hash: &str,
    root_hash: &[u8],
    o: &VerityOptions,
    fec: Option<&Fec>,
    sig_key: Option<&str>,
) -> String {
    let salt = if g.salt.is_empty() { "-".to_string() } else { to_hex(&g.salt) };
    let mut opts: Vec<String> = Vec::new();
    match o.on_corruption {
        Some(OnCorruption::Ignore) => opts.push("ignore_corruption".into()),
        Some(OnCorruption::Restart) => opts.push("restart_on_corruption".into()),
        Some(OnCorruption::Panic) => opts.push("panic_on_corruption".into()),
        None => {}
    }
    if o.ignore_zero_blocks {
        opts.push("ignore_zero_blocks".into());
    }
    if o.check_at_most_once {
        opts.push("check_at_most_once".into());
    }
    if let Some(f) = fec {
        opts.push(format!(
            "use_fec_from_device {} fec_start {} fec_blocks {} fec_roots {}",
            f.device,
            f.offset / g.data_block_size as u64,
            f.blocks,
            f.roots
        ));
    }
    if let Some(k) = sig_key {
        opts.push(format!("root_hash_sig_key_desc {k}"));
    }
    let count: usize = opts.iter().map(|o| o.split(' ').count()).sum();
    let tail = if opts.is_empty() { String::new() } else { format!(" {count} {}", opts.join(" ")) };
    format!(
        "{} {data} {hash} {} {} {} {} {} {} {salt}{tail}",
        g.format,
        g.data_block_size,
        g.hash_block_size,
        g.data_blocks,
        g.hash_start,
        g.algorithm,
        to_hex(root_hash)
    )
}

/// A `*-verity-sig` partition's content: the root hash and its PKCS#7 signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VeritySig {
    /// `rootHash`.
    pub root_hash: Vec<u8>,
    /// `certificateFingerprint`: the signing certificate's SHA-256, hex (as given).
    pub fingerprint: Option<String>,
    /// `signature`: DER PKCS#7, from base64.
    pub signature: Vec<u8>,
}

impl VeritySig {
    /// The JSON object at the partition's start (NUL-padded to the partition's end).
    pub fn parse(b: &[u8]) -> Result<VeritySig, String> {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        let v: serde_json::Value = serde_json::from_slice(&b[..end]).map_err(|e| format!("not JSON ({e})"))?;
        let o = v.as_object().ok_or("not a JSON object")?;
        let text = |k: &str| o.get(k).and_then(|v| v.as_str());
        let root_hash = parse_root_hash(text("rootHash").ok_or("no \"rootHash\"")?)?;
        let signature = Base64::decode_vec(text("signature").ok_or("no \"signature\"")?)
            .map_err(|_| "\"signature\" is not base64")?;
        if signature.is_empty() {
            return Err("an empty \"signature\"".into());
        }
        Ok(VeritySig { root_hash, fingerprint: text("certificateFingerprint").map(Into::into), signature })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "0123456789abcdef0123456789abcdeffedcba9876543210fedcba9876543210";

    #[test]
    fn the_root_hash_halves_name_the_partitions() {
        let h = parse_root_hash(HASH).unwrap();
        let (data, verity) = hash_halves(&h).unwrap();
        assert_eq!(data, "01234567-89ab-cdef-0123-456789abcdef");
        assert_eq!(verity, "fedcba98-7654-3210-fedc-ba9876543210");
        for bad in
            ["", "0123", "xyz0123456789abcdef0123456789abcd", &"ab".repeat(65), "0123456789abcdef0123456789abcde"]
        {
            assert!(parse_root_hash(bad).is_err(), "{bad}");
        }
        assert_eq!(part_role("x86_64", "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"), Some(PartRole::Root));
        assert_eq!(part_role("aarch64", "4f68bce3-e8cd-4db1-96e7-fbcaf984b709"), None);
        assert_eq!(part_type("aarch64", PartRole::UsrVerity), Some("6e11a4e7-fbca-4ded-b9e9-e1a512bb664e"));
    }

    #[test]
    fn options_are_read_as_veritytab_says() {
        let o = VerityOptions::parse(
            "superblock=false,data-block-size=4096,hash-block-size=1024,data-blocks=10,hash-offset=8192,\
             salt=00ff,hash=sha512,panic-on-corruption,check-at-most-once,fec-device=PARTUUID=1,fec-roots=3,\
             x-initrd.attach",
        )
        .unwrap();
        assert!(!o.superblock && o.check_at_most_once);
        assert_eq!((o.data_block_size, o.hash_block_size, o.data_blocks), (Some(4096), Some(1024), Some(10)));
        assert_eq!((o.hash_offset, o.salt.as_deref(), o.hash.as_deref()), (8192, Some(&[0, 255][..]), Some("sha512")));
        assert_eq!(
            (o.on_corruption, o.fec_device.as_deref(), o.fec_roots),
            (Some(OnCorruption::Panic), Some("PARTUUID=1"), 3)
        );
        assert_eq!(VerityOptions::parse("").unwrap(), VerityOptions::default());
        assert_eq!(VerityOptions::parse("salt=-").unwrap().salt, Some(Vec::new()));
        let sig = VerityOptions::parse("root-hash-signature=base64:AAEC").unwrap();
        assert_eq!(sig.signature, Some(alloc::vec![0, 1, 2]));
        // Hostile or wrong values are errors that say which, never a panic.
        for bad in [
            "data-block-size=1000",
            "data-block-size=0",
            "hash-block-size=99999999999999999999",
            "hash-offset=100",
            "salt=0",
            "salt=zz",
            "hash=a b",
            "hash=",
            "format=2",
            "fec-roots=1",
            "frobnicate",
            "superblock=maybe",
            "root-hash-signature=/etc/sig",
            "root-hash-signature=base64:!!",
            "data-blocks=-1",
            "data-block-size",
            "\u{0}=\u{ff}",
        ] {
            assert!(VerityOptions::parse(bad).is_err(), "{bad}");
        }
    }

    fn superblock(alg: &str, dbs: u32, hbs: u32, blocks: u64, salt: &[u8]) -> Vec<u8> {
        let mut b = alloc::vec![0u8; 512];
        b[0..8].copy_from_slice(b"verity\0\0");
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        b[12..16].copy_from_slice(&1u32.to_le_bytes());
        b[32..32 + alg.len()].copy_from_slice(alg.as_bytes());
        b[64..68].copy_from_slice(&dbs.to_le_bytes());
        b[68..72].copy_from_slice(&hbs.to_le_bytes());
        b[72..80].copy_from_slice(&blocks.to_le_bytes());
        b[80..82].copy_from_slice(&(salt.len() as u16).to_le_bytes());
        b[88..88 + salt.len()].copy_from_slice(salt);
        b
    }

    #[test]
    fn the_superblock_and_options_make_veritysetups_table() {
        let sb = Superblock::parse(&superblock("sha256", 4096, 4096, 2560, &[0xab, 0xcd])).unwrap();
        assert_eq!(sb.algorithm, "sha256");
        let o = VerityOptions::default();
        let g = Geometry::new(&o, Some(&sb)).unwrap();
        assert_eq!((g.hash_start, g.sectors()), (1, Some(2560 * 8)));
        let h = parse_root_hash(HASH).unwrap();
        assert_eq!(
            table(&g, "254:1", "254:2", &h, &o, None, None),
            format!("1 254:1 254:2 4096 4096 2560 1 sha256 {HASH} abcd")
        );
        // As veritysetup's: the hash offset past the superblock, rounded up; the options counted
        // word by word.
        let o = VerityOptions::parse("hash-offset=1048576,restart-on-corruption,check-at-most-once").unwrap();
        let g = Geometry::new(&o, Some(&sb)).unwrap();
        assert_eq!(g.hash_start, 257);
        let fec = Fec { device: "8:3".into(), offset: 8192, blocks: 2600, roots: 2 };
        assert_eq!(
            table(&g, "8:1", "8:2", &h, &o, Some(&fec), Some("leanrd:verity:root")),
            format!(
                "1 8:1 8:2 4096 4096 2560 257 sha256 {HASH} abcd 12 restart_on_corruption check_at_most_once \
                 use_fec_from_device 8:3 fec_start 2 fec_blocks 2600 fec_roots 2 root_hash_sig_key_desc \
                 leanrd:verity:root"
            )
        );
        // Without a superblock, the options give it all.
        let o = VerityOptions::parse("superblock=false,data-blocks=100,hash-offset=409600,salt=-").unwrap();
        let g = Geometry::new(&o, None).unwrap();
        assert_eq!((g.hash_start, g.salt.len(), g.algorithm.as_str(), g.format), (100, 0, "sha256", 1));
        assert!(table(&g, "8:1", "8:1", &h, &o, None, None).ends_with(" -"));
        assert!(
            Geometry::new(&VerityOptions::parse("superblock=false").unwrap(), None)
                .unwrap_err()
                .contains("data-blocks")
        );
        // What is not a superblock is said to be none; a damaged one says what is wrong.
        assert!(Superblock::parse(&[0u8; 512]).unwrap_err().contains("no verity superblock"));
        assert!(Superblock::parse(b"verity\0\0").is_err());
        assert!(Superblock::parse(&superblock("sha256", 4000, 4096, 1, &[])).is_err());
        assert!(Superblock::parse(&superblock("", 4096, 4096, 1, &[])).is_err());
        let mut big_salt = superblock("sha256", 4096, 4096, 1, &[]);
        big_salt[80..82].copy_from_slice(&300u16.to_le_bytes());
        assert!(Superblock::parse(&big_salt).is_err());
    }

    #[test]
    fn a_signature_partition_gives_its_hash_and_signature() {
        let j = format!(r#"{{"rootHash":"{HASH}","certificateFingerprint":"aa","signature":"MIIB"}}"#);
        let mut b = j.into_bytes();
        b.resize(4096, 0);
        let s = VeritySig::parse(&b).unwrap();
        assert_eq!((to_hex(&s.root_hash), s.fingerprint.as_deref(), s.signature.len()), (HASH.into(), Some("aa"), 3));
        for bad in [
            &b""[..],
            b"[]",
            b"{}",
            br#"{"rootHash":"00","signature":"MIIB"}"#,
            br#"{"rootHash":"0123456789abcdef0123456789abcdef","signature":"!"}"#,
            br#"{"rootHash":"0123456789abcdef0123456789abcdef","signature":""}"#,
            b"{\"rootHash\":",
        ] {
            assert!(VeritySig::parse(bad).is_err());
        }
    }
}
