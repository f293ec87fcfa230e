//! What a host-only image's drm feature keeps of a display driver's firmware list for one GPU,
//! by leanrd's own selection (leanrd_gen::gpu), for bench/gpu_firmware.py:
//!
//!     modinfo -F firmware amdgpu.ko.xz | gpu_firmware FIRMWARE_DIR amdgpu 1002:744c GC=11.0.0 ...
//!
//! prints the kept entries, one a line (of the files the driver tries in turn, the first
//! FIRMWARE_DIR has, as the build takes the first its sysroot's /lib/firmware has); exits 2
//! when the device is not in the table (the whole list is kept then, as the build does).

use std::io::Read;
use std::process::ExitCode;

use leanrd_gen::gpu::{DisplayGpu, FirmwareFilter};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage =
        "usage: gpu_firmware FIRMWARE_DIR DRIVER VENDOR:DEVICE [BLOCK=MAJ.MIN.REV...] < modinfo's firmware list";
    let (Some(dir), Some(driver), Some(id)) = (args.first(), args.get(1), args.get(2)) else {
        eprintln!("{usage}");
        return ExitCode::from(1);
    };
    let hex = |s: &str| u16::from_str_radix(s, 16).ok();
    let Some((Some(vendor), Some(device_id))) = id.split_once(':').map(|(v, d)| (hex(v), hex(d))) else {
        eprintln!("gpu_firmware: {id}: not VENDOR:DEVICE in hex\n{usage}");
        return ExitCode::from(1);
    };
    let mut gpu = DisplayGpu { driver: driver.clone(), vendor, device_id, ..Default::default() };
    for a in &args[3..] {
        let v: Option<Vec<u32>> = a.split_once('=').and_then(|(_, v)| v.split('.').map(|x| x.parse().ok()).collect());
        let (Some((block, _)), Some([x, y, z])) = (a.split_once('='), v.as_deref()) else {
            eprintln!("gpu_firmware: {a}: not BLOCK=MAJ.MIN.REV\n{usage}");
            return ExitCode::from(1);
        };
        gpu.ip.insert(block.to_string(), (*x, *y, *z));
    }
    let mut list = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut list) {
        eprintln!("gpu_firmware: standard input: {e}");
        return ExitCode::from(1);
    }
    let present =
        |fw: &str| ["", ".zst", ".xz"].iter().any(|ext| std::path::Path::new(&format!("{dir}/{fw}{ext}")).exists());
    let filter = FirmwareFilter::for_displays(std::slice::from_ref(&gpu), &present);
    for fw in list.lines().filter(|l| filter.keeps(driver, l)) {
        println!("{fw}");
    }
    if filter.unknown().is_empty() { ExitCode::SUCCESS } else { ExitCode::from(2) }
}
