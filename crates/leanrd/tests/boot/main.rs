//! The boot scenarios: real Debian roots (12 with the host's kernel, 13 with its own) on
//! disks, stacks and controllers, booted under QEMU TCG by images leanrd built, each
//! scenario of scenarios.toml a test of its own:
//!
//! ```text
//! cargo test --release -p leanrd --test boot -- debian13_btrfs_raid1
//! ```
//!
//! Every boot must reach multi-user.target with `systemctl is-system-running` = running (the
//! report unit of tools/boot-report prints it). The harness is crates/testkit (scenario.rs);
//! a failed boot prints its console's tail and keeps the whole under target/boot-logs/.
//! Needs root, qemu, mmdebstrap (roots are made once and cached), mkfs.ext4, mkfs.xfs,
//! mkfs.btrfs, sfdisk, xz, zstd and depmod; under LEANRD_TEST_STRICT=1 a missing one fails.

fn main() -> std::process::ExitCode {
    leanrd_testkit::boot::use_leanrd(env!("CARGO_BIN_EXE_leanrd"));
    leanrd_testkit::scenario::main(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/boot/scenarios.toml"))
}
