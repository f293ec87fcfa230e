//! newc archives as leanrd builds and reads them.
//!
//! Data flow: an input ([`manifest`], [`input::tree`], [`input::paths`]) yields an ordered list
//! of [`Entry`] values; [`layout::Layout::plan`] fixes every offset (name padding for data
//! alignment, filler entries where the name cap forbids it); [`write`] puts the bytes in place,
//! cloning file data with `FICLONERANGE`/`copy_file_range` where it can. [`read`] streams
//! images back, segment by segment, for `ls`, `extract`, `check`.

pub mod check;
pub mod entry;
pub mod extract;
pub mod fiemap;
pub mod image;
pub mod input;
pub mod layout;
pub mod manifest;
pub mod names;
pub mod output;
pub mod read;
pub mod write;

pub use entry::{Data, Entry, Normalize};
pub use layout::Layout;
