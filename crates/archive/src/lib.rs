//! newc archives as leanrd builds and reads them.
//!
//! Data flow: an input ([`manifest`], [`input::tree`], [`input::paths`]) yields an ordered list
//! of [`Entry`] values; [`layout::Layout::plan`] fixes every offset (name padding for data
//! alignment, filler entries where the name cap forbids it); [`write`](mod@write) puts the bytes in place,
//! cloning file data with `FICLONERANGE`/`copy_file_range` where it can. [`read`] streams
//! images back, segment by segment, for `ls`, `extract`, `check`.
//!
//! ```
//! use leanrd_archive::{Checker, Layout, Normalize, image, layout, manifest, read};
//! use leanrd_compress::{Format, Spec};
//!
//! let text = b"dir /etc 755 0 0\nslink /etc/mtab /proc/mounts 777 0 0\n";
//! let entries = manifest::parse(text, "example", &Normalize::default(), &|_| None)?;
//! let layout = Layout::plan(entries, layout::Options::default())?;
//! let mut img = Vec::new();
//! image::write_compressed(&layout, Spec::new(Format::Zstd), 1, &mut img)?;
//! let mut checker = Checker::new();
//! read::read_image(&img[..], &mut checker)?;
//! assert!(checker.problems.is_empty());
//! # Ok::<(), leanrd_archive::Error>(())
//! ```

#![deny(missing_docs)]

mod check;
pub mod devicetree;
mod dircache;
mod entry;
mod error;
mod extract;
pub mod fiemap;
pub mod image;
pub mod input;
pub mod layout;
pub mod manifest;
pub mod names;
pub mod output;
pub mod read;
mod select;
mod source;
pub mod uki;
pub mod write;

// The surface: the namespaces above (reading, writing, layout, inputs, outputs, UKIs, names,
// extents) and, here, the types every user of the crate handles.
pub use check::Checker;
pub use entry::{Data, Entry, Normalize, TooLarge, first_secret};
pub use error::{Context, Error, Result};
pub use extract::Extractor;
pub use layout::Layout;
pub use select::Select;
