//! The boot contract: what leanrd's generator tells its /init, as one typed [`InitConfig`]
//! written by [`InitConfig::encode`] and read by [`InitConfig::decode`] — the same code on
//! both sides, so the two cannot drift apart (booster's `InitConfig` is the model).
//!
//! `no_std` with `alloc`: /init links no libc and no std.
//!
//! ```
//! use leanrd_contract::{Capability, DeviceRef, InitConfig, Layer, Root};
//!
//! let mut c = InitConfig::default();
//! c.kver = Some("6.1.0-28-amd64".into());
//! c.mounts.root = Some(Root::Block(DeviceRef::parse("UUID=0a1b-2c3d").unwrap()));
//! c.load = vec!["virtio_blk".into(), "fs-ext4".into()];
//! c.layers.push(Layer { capability: Capability::Luks, modules: vec!["dm_crypt".into()] });
//! let text = c.encode();
//! assert_eq!(InitConfig::decode(&text).unwrap(), c);
//! ```

#![deny(missing_docs)]
#![no_std]

extern crate alloc;

pub mod clevis;
mod config;
mod crypttab;
mod device;
mod escape;
pub mod exitrd;
pub mod font;
mod fstab;
mod integritytab;
mod iscsi;
pub mod luks2;
pub mod multipath;
mod nbd;
mod nvmf;
mod root;
pub mod steplog;
pub mod verity;

pub use config::{Capability, Crypt, DecodeError, FIELDS, Field, InitConfig, KEYMAP_DIR, Layer, Mounts};
pub use crypttab::{
    CryptEntry, CryptKey, CryptOptions, CrypttabProblem, MEASURE_BANKS, PCR_SYSTEM_IDENTITY, crypttab_entries,
};
pub use device::{DeviceRef, DeviceRefError, unescape_udev};
pub use font::{FONT_DIR, Psf};
pub use fstab::{FstabEntry, NOT_BLOCK_FSTYPES, fstab_entries, fstab_entry, unescape_octal};
pub use integritytab::{INTEGRITYTAB, IntegrityEntry, parse_integritytab};
pub use iscsi::{Chap, ISCSI_PORT, IscsiError, IscsiTarget, redact_secrets};
pub use nbd::{NBD_PORT, NbdError, NbdTarget};
pub use nvmf::{DISCOVERY_NQN, NVMF_DISCOVERY_PORT, NVMF_PORT, NvmfError, NvmfTarget, option_value};
pub use root::{LiveRoot, NfsRoot, NfsVersion, Root, RootError, RootFeature, RootKind, ZfsRoot, zfs_name};

/// Where helper programs are: the generator looks for a feature's binaries here (under the
/// system root), /init runs them with this `PATH`.
pub const SEARCH_PATH: [&str; 4] = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"];

/// Unlocking over SSH: where the image keeps the server's host keys (dropbear's format, private),
/// the program every session runs (a link to /init: the session is the prompt, nothing else;
/// it is root's shell in the image's /etc/passwd, the only one /etc/shells lists), and the
/// socket /init asks on, which that program relays the session to.
pub mod ssh {
    /// The host keys, in the image and under the system root (made there once, then kept).
    pub const HOST_KEYS: [&str; 2] =
        ["/etc/leanrd/ssh/dropbear_ed25519_host_key", "/etc/leanrd/ssh/dropbear_ecdsa_host_key"];
    /// Their types, as dropbearkey's `-t` names them, in the order of [`HOST_KEYS`].
    pub const HOST_KEY_TYPES: [&str; 2] = ["ed25519", "ecdsa"];
    /// The users' public keys, host-only: under the system root.
    pub const AUTHORIZED_KEYS: &str = "/etc/leanrd/ssh/authorized_keys";
    /// The session's program: a link to /init, which relays the session to [`SOCKET`].
    pub const UNLOCK_PROGRAM: &str = "/usr/lib/leanrd/leanrd-unlock";
    /// The name /init knows it by (`argv[0]`'s last part, a login shell's `-` taken off).
    pub const UNLOCK_NAME: &str = "leanrd-unlock";
    /// Where /init listens for sessions while it asks for a passphrase.
    pub const SOCKET: &str = "/run/leanrd/unlock.sock";
    /// The port, unless the configuration says otherwise.
    pub const DEFAULT_PORT: u16 = 22;
}

/// Where the generator puts the configuration in the image, and where /init reads it.
pub const CONFIG_PATH: &str = "/etc/leanrd/init.conf";
