//! The kernel module tables depmod writes (modules.dep, modules.alias, modules.softdep,
//! modules.builtin, modules.builtin.modinfo), and resolution of names and aliases to the
//! modules to load, as `modprobe --show-depends` does, plus soft dependencies.
//!
//! Hand-written: the tables are simple text, and the existing crates bind libkmod (C), which
//! the static /init must not need. No dependencies and `no_std` (alloc only), so the libc-free
//! /init shares this code: the generator writes an image's tables with [`ModuleDb::subset`],
//! /init reads them with [`ModuleDb::parse`].
//!
//! ```
//! use leanrd_kmod::{ModuleDb, Resolved, Tables};
//!
//! let t = Tables {
//!     dep: b"kernel/fs/ext4/ext4.ko: kernel/fs/jbd2/jbd2.ko\nkernel/fs/jbd2/jbd2.ko:\n".to_vec(),
//!     alias: b"alias fs-ext4 ext4\n".to_vec(),
//!     ..Tables::default()
//! };
//! let db = ModuleDb::parse(&t).unwrap();
//! assert_eq!(db.resolve("fs-ext4"), Resolved::Modules(vec!["jbd2".into(), "ext4".into()]));
//! ```

#![deny(missing_docs)]
#![no_std]

extern crate alloc;
#[cfg(test)]
extern crate std;

mod names;
mod resolve;
mod tables;

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;

pub use names::{
    COMPRESSIONS, ModuleCompression, fnmatch, is_module_file, name_of_path, normalize, normalize_alias,
    split_compression,
};
pub use tables::{ParseError, Tables};

/// What a name or alias resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// Modules to load (dependencies first, the asked-for module last, soft dependencies
    /// around it), by name.
    Modules(Vec<String>),
    /// Built into the kernel: nothing to load.
    Builtin,
    /// Unknown to this kernel.
    Missing,
}

/// The module tables of one kernel.
#[derive(Debug, Default, Clone)]
pub struct ModuleDb {
    /// name → path relative to /lib/modules/KVER.
    pub paths: BTreeMap<String, String>,
    /// name → direct and indirect dependencies, as modules.dep lists them.
    pub deps: BTreeMap<String, Vec<String>>,
    /// (pattern, normalised) and module name, in file order (order matters: modprobe
    /// returns matches in this order).
    pub aliases: Vec<(String, String)>,
    /// name → (pre, post) soft dependencies, all lines merged.
    pub softdeps: BTreeMap<String, (Vec<String>, Vec<String>)>,
    /// Names of the modules built into the kernel (modules.builtin).
    pub builtin: BTreeSet<String>,
    /// modules.builtin's lines, for writing a subset.
    pub builtin_paths: Vec<String>,
    /// Aliases of built-in modules (from modules.builtin.modinfo).
    pub builtin_aliases: Vec<(String, String)>,
    /// Prefix index over `aliases`: first 4 bytes of the pattern (when literal) → indices.
    pub(crate) index: BTreeMap<[u8; 4], Vec<usize>>,
    pub(crate) wild: Vec<usize>,
}
