//! The boot display's GPU and the firmware it loads. A DRM driver's modinfo lists the firmware
//! of every device it drives (amdgpu's: 646 files, 81.5 MB in Debian 13); a host-only image's
//! drm feature keeps only the files of the device the machine boots on. Which files those are
//! the drivers decide in C, from the PCI id and (amdgpu) the IP blocks' versions: no crate
//! knows, so the table, data/gpu-firmware.txt, is read from the kernel's own sources by
//! tools/gpu-firmware-table (whose header says what is read where) and compiled in here.
//!
//! Host detection records the GPU ([`DisplayGpu::read`], from sysfs, before anything is
//! composed); compose asks [`loads`] what it loads and keeps the firmware that matches
//! ([`FirmwareFilter`]); a device the table does not know keeps its driver's whole list.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::sync::OnceLock;

/// What identifies the boot display's GPU: its PCI ids and, on amdgpu's IP-discovery ASICs,
/// its IP blocks' versions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DisplayGpu {
    /// Its driver's module (`amdgpu`, `i915`).
    pub driver: String,
    /// The device, as its sysfs path under /sys/devices.
    pub device: String,
    /// The PCI vendor id (0x1002, 0x8086).
    pub vendor: u16,
    /// The PCI device id.
    pub device_id: u16,
    /// The PCI revision.
    pub revision: u8,
    /// amdgpu's IP discovery (`ip_discovery/die/0/BLOCK/N/{major,minor,revision}`): each
    /// named block (`GC`, `MP0`, `MP1`, `SDMA0`, `UVD`, `DMU`...) and its first instance's
    /// version. Empty where the driver publishes none.
    pub ip: BTreeMap<String, Version>,
}

impl DisplayGpu {
    /// The GPU at `dev` (its sysfs directory, bound to `driver`); None when it is not a PCI
    /// device (no vendor/device files).
    pub(crate) fn read(dev: &Path, driver: &str, device: &str) -> Option<DisplayGpu> {
        let hex = |name: &str| {
            let s = fs::read_to_string(dev.join(name)).ok()?;
            u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
        };
        let num = |p: &Path| fs::read_to_string(p).ok()?.trim().parse::<u32>().ok();
        let mut ip = BTreeMap::new();
        if let Ok(rd) = fs::read_dir(dev.join("ip_discovery/die/0")) {
            // The blocks by name (links to the numbered hw_id directories).
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.bytes().all(|b| b.is_ascii_digit()) {
                    continue;
                }
                let Ok(inst) = fs::read_dir(e.path()) else { continue };
                let first = inst
                    .flatten()
                    .filter_map(|i| i.file_name().to_str()?.parse::<u32>().ok().map(|n| (n, i.path())))
                    .min_by_key(|(n, _)| *n);
                let Some((_, d)) = first else { continue };
                if let (Some(a), Some(b), Some(c)) =
                    (num(&d.join("major")), num(&d.join("minor")), num(&d.join("revision")))
                {
                    ip.insert(name, (a, b, c));
                }
            }
        }
        Some(DisplayGpu {
            driver: driver.to_string(),
            device: device.to_string(),
            vendor: u16::try_from(hex("vendor")?).ok()?,
            device_id: u16::try_from(hex("device")?).ok()?,
            revision: hex("revision").and_then(|r| u8::try_from(r).ok()).unwrap_or(0),
            ip,
        })
    }

    /// `vendor:device` as lspci prints it (`1002:73bf`).
    pub fn id(&self) -> String {
        format!("{:04x}:{:04x}", self.vendor, self.device_id)
    }
}

/// An IP block's version: (major, minor, revision).
type Version = (u32, u32, u32);

/// A device's `vendor:device` and what it loads: names and the files kept of those it tries
/// (None: the table does not know it).
type Device = (String, Option<(BTreeSet<String>, BTreeSet<String>)>);

/// A file a chip tries: its kind (`guc`), the first revision that tries it, the file.
type Try = (String, u8, String);

/// The table of data/gpu-firmware.txt (see tools/gpu-firmware-table for its rows).
#[derive(Debug, Default)]
struct Table {
    /// (driver, vendor, device) → chip.
    pci: BTreeMap<(String, u16, u16), String>,
    /// (driver, chip) → its names, when they are not the chip's own name (i915's platforms).
    chip: BTreeMap<(String, String), Vec<String>>,
    /// (driver, chip) → names it loads besides its own.
    also: BTreeMap<(String, String), Vec<String>>,
    /// (driver, block, version) → the names; `*`: the block's default name too.
    ip: BTreeMap<(String, String, Version), Vec<String>>,
    /// (driver, block) → the prefix of its default name, PREFIX_MAJ_MIN_REV.
    ipname: BTreeMap<(String, String), String>,
    /// (driver, chip) → the files it tries, in order.
    tries: BTreeMap<(String, String), Vec<Try>>,
}

/// The table compiled into leanrd, generated from Linux 6.12's sources.
const TABLE: &str = include_str!("../data/gpu-firmware.txt");

fn parse(text: &str) -> Result<Table, String> {
    let mut t = Table::default();
    for (n, line) in text.lines().enumerate() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let at = |why: &str| format!("gpu-firmware.txt line {}: {why}: {line}", n + 1);
        if w.is_empty() || w[0].starts_with('#') {
            continue;
        }
        if w.len() < 3 {
            return Err(at("too few fields"));
        }
        let (drv, rest) = (w[1].to_string(), &w[2..]);
        let names = |from: usize| rest[from..].iter().map(|s| s.to_string()).collect::<Vec<_>>();
        match w[0] {
            "pci" if rest.len() == 2 => {
                let (v, d) = rest[0].split_once(':').ok_or_else(|| at("no VENDOR:DEVICE"))?;
                let hex = |s: &str| u16::from_str_radix(s, 16).map_err(|_| at("not a hex id"));
                t.pci.insert((drv, hex(v)?, hex(d)?), rest[1].to_string());
            }
            "chip" => {
                t.chip.insert((drv, rest[0].to_string()), names(1));
            }
            "also" => {
                t.also.insert((drv, rest[0].to_string()), names(1));
            }
            "ip" if rest.len() >= 3 => {
                let v: Vec<u32> = rest[1]
                    .split('.')
                    .map(|x| x.parse().map_err(|_| at("not MAJ.MIN.REV")))
                    .collect::<Result<_, _>>()?;
                let [a, b, c] = v[..] else { return Err(at("not MAJ.MIN.REV")) };
                t.ip.insert((drv, rest[0].to_string(), (a, b, c)), names(2));
            }
            "try" if rest.len() == 4 => {
                let rev = rest[2].parse().map_err(|_| at("not a revision"))?;
                let v = t.tries.entry((drv, rest[0].to_string())).or_default();
                v.push((rest[1].to_string(), rev, rest[3].to_string()));
            }
            "ipname" if rest.len() == 2 => {
                t.ipname.insert((drv, rest[0].to_string()), rest[1].to_string());
            }
            _ => return Err(at("not a row leanrd knows")),
        }
    }
    Ok(t)
}

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    // The file is leanrd's own, compiled in: the unit tests parse it.
    T.get_or_init(|| parse(TABLE).unwrap_or_else(|e| panic!("{e}")))
}

/// What a GPU loads, by its driver's firmware names (without the driver's directory).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loads {
    /// Names: every firmware NAME followed by `_` or `.` (`sienna_cichlid` for
    /// sienna_cichlid_sos.bin).
    pub names: BTreeSet<String>,
    /// Files the driver tries in turn, each list in its order: the first present is loaded,
    /// the next only when it is missing (i915's GuC, HuC and GSC).
    pub tries: Vec<Vec<String>>,
}

/// What `gpu` loads; None when the table does not know the device (nor, for amdgpu, its IP
/// blocks).
pub fn loads(gpu: &DisplayGpu) -> Option<Loads> {
    loads_in(table(), gpu)
}

fn loads_in(t: &Table, gpu: &DisplayGpu) -> Option<Loads> {
    let drv = gpu.driver.clone();
    if let Some(chip) = t.pci.get(&(drv.clone(), gpu.vendor, gpu.device_id)) {
        let key = (drv, chip.clone());
        let mut names: BTreeSet<String> = match t.chip.get(&key) {
            Some(v) => v.iter().cloned().collect(),
            None => BTreeSet::from([chip.clone()]),
        };
        names.extend(t.also.get(&key).into_iter().flatten().cloned());
        // Each kind's files for this revision, in the table's order.
        let mut tries: Vec<(String, Vec<String>)> = Vec::new();
        for (kind, _, file) in t.tries.get(&key).into_iter().flatten().filter(|(_, r, _)| *r <= gpu.revision) {
            match tries.iter_mut().find(|(k, _)| k == kind) {
                Some((_, v)) => v.push(file.clone()),
                None => tries.push((kind.clone(), vec![file.clone()])),
            }
        }
        return Some(Loads { names, tries: tries.into_iter().map(|(_, v)| v).collect() });
    }
    // amdgpu's IP-discovery ASICs (matched by class, in no PCI row): named from their blocks.
    let mut names = BTreeSet::new();
    for (block, &(a, b, c)) in &gpu.ip {
        let default = t.ipname.get(&(drv.clone(), block.clone())).map(|p| format!("{p}_{a}_{b}_{c}"));
        match t.ip.get(&(drv.clone(), block.clone(), (a, b, c))) {
            Some(v) => {
                for n in v {
                    if n == "*" {
                        names.extend(default.clone());
                    } else {
                        names.insert(n.clone());
                    }
                }
            }
            None => names.extend(default),
        }
    }
    (!names.is_empty()).then_some(Loads { names, tries: Vec::new() })
}

/// Whether the firmware `fw` (a modinfo entry, `amdgpu/sienna_cichlid_sos.bin`) of `driver`
/// is one of `names`'. Firmware outside the driver's directory is not the table's to judge:
/// kept.
pub fn matches(driver: &str, names: &BTreeSet<String>, fw: &str) -> bool {
    let Some(file) = fw.strip_prefix(driver).and_then(|f| f.strip_prefix('/')) else { return true };
    names.iter().any(|n| file.strip_prefix(n.as_str()).is_some_and(|r| r.starts_with(['_', '.'])))
}

/// What a host-only image's drm feature keeps of its display drivers' firmware lists.
#[derive(Debug, Clone, Default)]
pub struct FirmwareFilter {
    /// Driver module → its devices: their `vendor:device` and what they load (None: unknown,
    /// the whole list).
    by_driver: BTreeMap<String, Vec<Device>>,
}

impl FirmwareFilter {
    /// The filter for the boot displays' GPUs; `present` says whether a firmware file
    /// (`i915/tgl_guc_70.bin`) is installed: of the files a driver tries in turn, the first
    /// present is kept (all of them when none is).
    pub fn for_displays(gpus: &[DisplayGpu], present: &dyn Fn(&str) -> bool) -> FirmwareFilter {
        let mut f = FirmwareFilter::default();
        for g in gpus {
            let kept = loads(g).map(|l| {
                let mut files = BTreeSet::new();
                for chain in &l.tries {
                    let path = |x: &String| format!("{}/{x}", g.driver);
                    match chain.iter().find(|x| present(&path(x))) {
                        Some(x) => files.insert(path(x)),
                        None => {
                            files.extend(chain.iter().map(path));
                            true
                        }
                    };
                }
                (l.names, files)
            });
            f.by_driver.entry(g.driver.clone()).or_default().push((g.id(), kept));
        }
        f
    }

    /// Whether module `module`'s firmware `fw` goes into the image: any module's but a
    /// filtered driver's, and of that driver's only what one of its devices loads.
    pub fn keeps(&self, module: &str, fw: &str) -> bool {
        match self.by_driver.get(module) {
            None => true,
            Some(devs) => devs
                .iter()
                .any(|(_, k)| k.as_ref().is_none_or(|(names, files)| files.contains(fw) || matches(module, names, fw))),
        }
    }

    /// The devices the table does not know, as (driver, `vendor:device`): their driver's whole
    /// list goes in.
    pub fn unknown(&self) -> Vec<(String, String)> {
        let mut v = Vec::new();
        for (drv, devs) in &self.by_driver {
            v.extend(devs.iter().filter(|(_, n)| n.is_none()).map(|(id, _)| (drv.clone(), id.clone())));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// Real entries of Debian 13's modinfo (Linux 6.12.117): amdgpu's and i915's firmware.
    const AMDGPU: &[&str] = &[
        "amdgpu/sienna_cichlid_sos.bin",
        "amdgpu/sienna_cichlid_ta.bin",
        "amdgpu/sienna_cichlid_smc.bin",
        "amdgpu/sienna_cichlid_pfp.bin",
        "amdgpu/sienna_cichlid_me.bin",
        "amdgpu/sienna_cichlid_ce.bin",
        "amdgpu/sienna_cichlid_rlc.bin",
        "amdgpu/sienna_cichlid_mec.bin",
        "amdgpu/sienna_cichlid_mec2.bin",
        "amdgpu/sienna_cichlid_sdma.bin",
        "amdgpu/sienna_cichlid_vcn.bin",
        "amdgpu/sienna_cichlid_dmcub.bin",
        "amdgpu/sienna_cichlid_cap.bin",
        "amdgpu/navy_flounder_sos.bin",
        "amdgpu/navy_flounder_dmcub.bin",
        "amdgpu/navy_flounder_vcn.bin",
        "amdgpu/navi10_sos.bin",
        "amdgpu/gc_11_0_0_pfp.bin",
        "amdgpu/gc_11_0_0_me.bin",
        "amdgpu/gc_11_0_0_mec.bin",
        "amdgpu/gc_11_0_0_rlc.bin",
        "amdgpu/gc_11_0_0_imu.bin",
        "amdgpu/gc_11_0_0_mes_2.bin",
        "amdgpu/gc_11_0_0_mes1.bin",
        "amdgpu/gc_11_0_0_toc.bin",
        "amdgpu/gc_11_0_1_pfp.bin",
        "amdgpu/gc_11_0_2_pfp.bin",
        "amdgpu/psp_13_0_0_sos.bin",
        "amdgpu/psp_13_0_0_ta.bin",
        "amdgpu/psp_13_0_10_sos.bin",
        "amdgpu/smu_13_0_0.bin",
        "amdgpu/smu_13_0_10.bin",
        "amdgpu/sdma_6_0_0.bin",
        "amdgpu/sdma_6_0_1.bin",
        "amdgpu/vcn_4_0_0.bin",
        "amdgpu/vcn_4_0_2.bin",
        "amdgpu/dcn_3_2_0_dmcub.bin",
        "amdgpu/dcn_3_2_1_dmcub.bin",
        "amdgpu/raven2_gpu_info.bin",
        "amdgpu/ip_discovery.bin",
    ];
    const I915: &[&str] = &[
        "i915/mtl_gsc_1.bin",
        "i915/mtl_guc_70.bin",
        "i915/mtl_huc_gsc.bin",
        "i915/mtl_dmc.bin",
        "i915/dg2_guc_70.bin",
        "i915/adlp_guc_70.bin",
        "i915/adlp_guc_70.1.1.bin",
        "i915/adlp_dmc.bin",
        "i915/adlp_dmc_ver2_16.bin",
        "i915/adls_dmc_ver2_01.bin",
        "i915/tgl_guc_70.1.1.bin",
        "i915/tgl_huc.bin",
        "i915/tgl_huc_7.9.3.bin",
        "i915/tgl_dmc_ver2_12.bin",
        "i915/rkl_dmc_ver2_03.bin",
        "i915/icl_dmc_ver1_09.bin",
        "i915/kbl_guc_70.1.1.bin",
        "i915/skl_dmc_ver1_27.bin",
    ];

    /// A fake sysfs: /sys/class/drm/card0 → a PCI device with `ids`, bound to `driver`, and
    /// amdgpu's IP discovery blocks `ip`. Returns (root, the device's directory).
    fn sys(
        root: &Path,
        driver: &str,
        ids: (&str, &str, &str),
        ip: &[(&str, u32, (u32, u32, u32))],
    ) -> std::path::PathBuf {
        let dev = root.join("sys/devices/pci0000:00/0000:00:01.0/0000:03:00.0");
        fs::create_dir_all(&dev).unwrap();
        fs::write(dev.join("vendor"), format!("{}\n", ids.0)).unwrap();
        fs::write(dev.join("device"), format!("{}\n", ids.1)).unwrap();
        fs::write(dev.join("revision"), format!("{}\n", ids.2)).unwrap();
        fs::write(dev.join("boot_vga"), "1\n").unwrap();
        fs::write(dev.join("modalias"), format!("pci:v0000{}d0000{}", &ids.0[2..], &ids.1[2..])).unwrap();
        let drv = root.join("sys/bus/pci/drivers").join(driver);
        let module = root.join("sys/module").join(driver);
        fs::create_dir_all(&drv).unwrap();
        fs::create_dir_all(&module).unwrap();
        symlink(&module, drv.join("module")).unwrap();
        symlink(&drv, dev.join("driver")).unwrap();
        for (name, hwid, (a, b, c)) in ip {
            let die = dev.join("ip_discovery/die/0");
            let inst = die.join(hwid.to_string()).join("0");
            fs::create_dir_all(&inst).unwrap();
            for (f, v) in [("major", a), ("minor", b), ("revision", c)] {
                fs::write(inst.join(f), format!("{v}\n")).unwrap();
            }
            let _ = symlink(die.join(hwid.to_string()), die.join(name));
        }
        let drm = dev.join("drm/card0");
        fs::create_dir_all(&drm).unwrap();
        fs::create_dir_all(root.join("sys/class/drm")).unwrap();
        symlink(&drm, root.join("sys/class/drm/card0")).unwrap();
        symlink(&dev, drm.join("device")).unwrap();
        dev
    }

    /// Host detection of the fake tree, and what the filter keeps of `list`.
    fn kept(root: &Path, list: &[&str]) -> (crate::host::Facts, Vec<String>) {
        let mut f = crate::host::Facts::default();
        crate::host::detect_displays(root, &mut f);
        // Every file of the list installed.
        let filter = FirmwareFilter::for_displays(&f.display_gpus, &|fw| list.contains(&fw));
        let driver = f.display_gpus.first().map(|g| g.driver.clone()).unwrap_or_default();
        let v = list.iter().filter(|fw| filter.keeps(&driver, fw)).map(|s| s.to_string()).collect();
        (f, v)
    }

    #[test]
    fn the_table_parses_and_knows_the_devices_of_the_tests() {
        let t = parse(TABLE).unwrap();
        assert_eq!(t.pci.get(&("amdgpu".into(), 0x1002, 0x73bf)).map(String::as_str), Some("sienna_cichlid"));
        assert_eq!(t.pci.get(&("i915".into(), 0x8086, 0x9a49)).map(String::as_str), Some("TIGERLAKE"));
        assert_eq!(t.pci.get(&("i915".into(), 0x8086, 0x46a6)).map(String::as_str), Some("ALDERLAKE_P"));
        // RDNA3 is matched by class: no PCI row, named from its IP blocks.
        assert!(!t.pci.contains_key(&("amdgpu".into(), 0x1002, 0x744c)));
        for bad in ["pci amdgpu 1002-73bf x", "ip amdgpu GC 11.0 gc", "what amdgpu x y", "pci amdgpu"] {
            assert!(parse(bad).unwrap_err().starts_with("gpu-firmware.txt line 1: "), "{bad}");
        }
    }

    #[test]
    fn navi21_keeps_sienna_cichlid_only() {
        let d = tempfile::tempdir().unwrap();
        // Navi 21 publishes its IP blocks too; its PCI row decides.
        sys(d.path(), "amdgpu", ("0x1002", "0x73bf", "0xc1"), &[("GC", 11, (10, 3, 0)), ("DMU", 271, (3, 0, 0))]);
        let (f, v) = kept(d.path(), AMDGPU);
        let g = &f.display_gpus[0];
        assert_eq!((g.id().as_str(), g.revision, g.driver.as_str()), ("1002:73bf", 0xc1, "amdgpu"));
        assert_eq!(g.ip.get("GC"), Some(&(10, 3, 0)));
        assert_eq!(v.len(), 13, "{v:?}");
        assert!(v.iter().all(|n| n.starts_with("amdgpu/sienna_cichlid_")), "{v:?}");
    }

    #[test]
    fn rdna3_is_named_from_its_ip_versions() {
        let d = tempfile::tempdir().unwrap();
        let ip = [
            ("GC", 11, (11, 0, 0)),
            ("MP0", 255, (13, 0, 0)),
            ("MP1", 1, (13, 0, 0)),
            ("SDMA0", 42, (6, 0, 0)),
            ("UVD", 12, (4, 0, 0)),
            ("DMU", 271, (3, 2, 0)),
            ("MMHUB", 34, (3, 0, 0)),
        ];
        sys(d.path(), "amdgpu", ("0x1002", "0x744c", "0xc8"), &ip);
        let (f, v) = kept(d.path(), AMDGPU);
        assert_eq!(f.display_gpus[0].ip.len(), 7);
        assert_eq!(
            v,
            [
                "amdgpu/gc_11_0_0_pfp.bin",
                "amdgpu/gc_11_0_0_me.bin",
                "amdgpu/gc_11_0_0_mec.bin",
                "amdgpu/gc_11_0_0_rlc.bin",
                "amdgpu/gc_11_0_0_imu.bin",
                "amdgpu/gc_11_0_0_mes_2.bin",
                "amdgpu/gc_11_0_0_mes1.bin",
                "amdgpu/gc_11_0_0_toc.bin",
                "amdgpu/psp_13_0_0_sos.bin",
                "amdgpu/psp_13_0_0_ta.bin",
                "amdgpu/smu_13_0_0.bin",
                "amdgpu/sdma_6_0_0.bin",
                "amdgpu/vcn_4_0_0.bin",
                "amdgpu/dcn_3_2_0_dmcub.bin",
            ]
        );
    }

    #[test]
    fn tiger_lake_and_alder_lake_keep_their_platforms_files() {
        let d = tempfile::tempdir().unwrap();
        sys(d.path(), "i915", ("0x8086", "0x9a49", "0x01"), &[]);
        let (f, v) = kept(d.path(), I915);
        assert!(f.display_modules.contains("i915"));
        // Its one GuC and HuC (tgl_guc_70.bin, tgl_huc.bin are Alder Lake-S's), its DMC.
        assert_eq!(v, ["i915/tgl_guc_70.1.1.bin", "i915/tgl_huc_7.9.3.bin", "i915/tgl_dmc_ver2_12.bin"]);
        let d = tempfile::tempdir().unwrap();
        sys(d.path(), "i915", ("0x8086", "0x46a6", "0x0c"), &[]);
        let (_, v) = kept(d.path(), I915);
        // Alder Lake-P: its own GuC and DMC (both DMC files: the second is its fallback), Tiger
        // Lake's HuC (intel_uc_fw.c).
        assert_eq!(v, ["i915/adlp_guc_70.bin", "i915/adlp_dmc.bin", "i915/adlp_dmc_ver2_16.bin", "i915/tgl_huc.bin"]);
        // Alder Lake-N is an Alder Lake-P whose GuC is Alder Lake-S's (Tiger Lake's).
        let d = tempfile::tempdir().unwrap();
        sys(d.path(), "i915", ("0x8086", "0x46d0", "0x00"), &[]);
        let (_, v) = kept(d.path(), I915);
        assert_eq!(
            v,
            ["i915/adlp_dmc.bin", "i915/adlp_dmc_ver2_16.bin", "i915/tgl_guc_70.1.1.bin", "i915/tgl_huc.bin"]
        );
        // The files the driver tries in turn when none is installed: all of them (the build
        // says which are missing); one installed: that one.
        let gpu = DisplayGpu { driver: "i915".into(), vendor: 0x8086, device_id: 0x46a6, ..Default::default() };
        let adlp_guc = ["i915/adlp_guc_70.bin", "i915/adlp_guc_70.1.1.bin", "i915/adlp_guc_69.0.3.bin"];
        let none = FirmwareFilter::for_displays(std::slice::from_ref(&gpu), &|_| false);
        assert!(adlp_guc.iter().all(|f| none.keeps("i915", f)));
        let last = FirmwareFilter::for_displays(std::slice::from_ref(&gpu), &|f| f == adlp_guc[2]);
        assert_eq!(adlp_guc.map(|f| last.keeps("i915", f)), [false, false, true]);
        // Comet Lake from revision 5 tries its own GuC first, an earlier one Kaby Lake's only.
        let cml = |revision| {
            let g =
                DisplayGpu { driver: "i915".into(), vendor: 0x8086, device_id: 0x9ba4, revision, ..Default::default() };
            loads(&g).unwrap().tries
        };
        assert_eq!(cml(5)[0], ["cml_guc_70.1.1.bin", "kbl_guc_70.1.1.bin"]);
        assert_eq!(cml(0)[0], ["kbl_guc_70.1.1.bin"]);
    }

    #[test]
    fn an_unknown_device_keeps_the_whole_list() {
        let d = tempfile::tempdir().unwrap();
        // A device id no kernel table has, of a vendor whose driver has none either.
        sys(d.path(), "amdgpu", ("0x1002", "0xffff", "0x00"), &[]);
        let (f, v) = kept(d.path(), AMDGPU);
        assert_eq!(v.len(), AMDGPU.len());
        let filter = FirmwareFilter::for_displays(&f.display_gpus, &|_| true);
        assert_eq!(filter.unknown(), [("amdgpu".to_string(), "1002:ffff".to_string())]);
        let d = tempfile::tempdir().unwrap();
        sys(d.path(), "nouveau", ("0x10de", "0x2484", "0xa1"), &[]);
        let (f, v) = kept(d.path(), &["nvidia/ga104/gr/fecs_bl.bin", "nvidia/tu102/gr/fecs_bl.bin"]);
        assert_eq!(v.len(), 2);
        assert_eq!(
            FirmwareFilter::for_displays(&f.display_gpus, &|_| true).unknown(),
            [("nouveau".into(), "10de:2484".into())]
        );
        // Another module's firmware is never the filter's.
        assert!(FirmwareFilter::for_displays(&f.display_gpus, &|_| true).keeps("r8169", "rtl_nic/rtl8168h-2.fw"));
    }

    #[test]
    fn a_name_matches_whole_words_only() {
        let n = BTreeSet::from(["smu_13_0_1".to_string(), "raven".to_string()]);
        assert!(matches("amdgpu", &n, "amdgpu/smu_13_0_1.bin"));
        assert!(!matches("amdgpu", &n, "amdgpu/smu_13_0_10.bin"));
        assert!(matches("amdgpu", &n, "amdgpu/raven_sdma.bin"));
        assert!(!matches("amdgpu", &n, "amdgpu/raven2_sdma.bin"));
        assert!(matches("amdgpu", &n, "radeon/raven_x.bin"), "outside the driver's directory: kept");
    }
}
