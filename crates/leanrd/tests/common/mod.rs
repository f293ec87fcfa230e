//! Helpers shared by the integration tests: leanrd-testkit, and the leanrd binary.
#![allow(dead_code)]

use std::process::Command;

pub use leanrd_testkit::*;

pub fn leanrd() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_leanrd"));
    c.env_remove("SOURCE_DATE_EPOCH");
    c
}
