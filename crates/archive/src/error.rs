//! The errors of the build pipeline's libraries (this one and leanrd-gen, which shares it):
//! typed where a caller may act on the kind (a manifest line, a file too large for newc, the
//! output, an I/O failure), and otherwise a message that names the place — file and line,
//! or image offset — with what was being done and the cause beneath it. Only the CLI uses
//! anyhow.

use std::error::Error as StdError;
use std::io;

use thiserror::Error;

use crate::entry::TooLarge;
use crate::manifest::ManifestError;
use crate::output::OutputError;

/// Why an operation of this library (or of leanrd-gen, which shares it) failed.
#[derive(Debug, Error)]
pub enum Error {
    /// A manifest line that cannot be used.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A file larger than newc's 4 GiB limit.
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
    /// An output file that could not be written.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// An I/O failure passed up as it is, without a place.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// Input that is not what it must be; the message names where.
    #[error("{0}")]
    Invalid(String),
    /// What was being done (with the file or offset) when `source` happened.
    #[error("{what}")]
    Context {
        /// What was being done, naming the file or offset.
        what: String,
        /// The error it failed with.
        #[source]
        source: Box<dyn StdError + Send + Sync + 'static>,
    },
}

/// A result whose error is this crate's [`Error`](enum@Error) unless another is named.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The I/O error at the bottom of this one, if that is what it is (a broken pipe on
    /// stdout is no error for `leanrd ls | head`).
    pub fn io(&self) -> Option<&io::Error> {
        let mut e: &(dyn StdError + 'static) = self;
        loop {
            if let Some(io) = e.downcast_ref::<io::Error>() {
                return Some(io);
            }
            if let Some(Error::Io(io)) = e.downcast_ref::<Error>() {
                return Some(io);
            }
            e = e.source()?;
        }
    }
}

/// `.context(...)` and `.with_context(|| ...)` on results and options, as the CLI's anyhow
/// has them, for this library's [`Error`](enum@Error).
pub trait Context<T> {
    /// An error becomes an [`Error::Context`] saying `what` was being done, over the error; a None
    /// becomes an [`Error::Invalid`] saying `what`.
    fn context(self, what: impl Into<String>) -> Result<T>;
    /// As `context`, with the message made by `f` only when there is an error.
    fn with_context<C: Into<String>>(self, f: impl FnOnce() -> C) -> Result<T>;
}

impl<T, E: StdError + Send + Sync + 'static> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|e| Error::Context { what: what.into(), source: Box::new(e) })
    }
    fn with_context<C: Into<String>>(self, f: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| Error::Context { what: f().into(), source: Box::new(e) })
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, what: impl Into<String>) -> Result<T> {
        self.ok_or_else(|| Error::Invalid(what.into()))
    }
    fn with_context<C: Into<String>>(self, f: impl FnOnce() -> C) -> Result<T> {
        self.ok_or_else(|| Error::Invalid(f().into()))
    }
}

/// An [`Error::Invalid`] from a format string.
#[macro_export]
macro_rules! invalid {
    ($($t:tt)*) => { $crate::Error::Invalid(format!($($t)*)) };
}

/// Return an [`Error::Invalid`] from a format string.
#[macro_export]
macro_rules! bail {
    ($($t:tt)*) => { return Err($crate::invalid!($($t)*)) };
}

pub(crate) use crate::{bail, invalid};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_reads_like_a_chain_and_keeps_the_cause() {
        let r: std::result::Result<(), io::Error> = Err(io::Error::from(io::ErrorKind::BrokenPipe));
        let e = r.context("offset 12").unwrap_err();
        assert_eq!(e.to_string(), "offset 12");
        assert_eq!(e.source().unwrap().to_string(), "broken pipe");
        assert_eq!(e.io().unwrap().kind(), io::ErrorKind::BrokenPipe);
        let e = Error::Context { what: "outer".into(), source: Box::new(e) };
        assert_eq!(e.io().unwrap().kind(), io::ErrorKind::BrokenPipe);
        assert!(Error::Invalid("x".into()).io().is_none());
    }
}
