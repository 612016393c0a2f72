//! Device state (free memory, load, temperatures, CPU frequency cap), read by one shell probe
//! that works on Linux hosts and Android alike, before and after every run and by the
//! condition-gated cooldown.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::manifest::UntilDef;

/// The probe: prints `key: value` lines; unreadable sources are skipped.
pub const PROBE: &str = r#"grep -E '^(MemTotal|MemAvailable|MemFree|SwapFree):' /proc/meminfo 2>/dev/null
echo "loadavg: $(cat /proc/loadavg 2>/dev/null)"
echo "ncpu: $(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc 2>/dev/null)"
for z in /sys/class/thermal/thermal_zone*; do
  if [ -r "$z/temp" ]; then echo "thermal: $(cat "$z/type" 2>/dev/null) $(cat "$z/temp" 2>/dev/null)"; fi
done
f=/sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq
if [ -r $f ]; then echo "scaling_max_freq: $(cat $f)"; fi
b=/sys/class/power_supply/battery/temp
if [ -r $b ]; then echo "battery_temp: $(cat $b)"; fi
true"#;

/// One reading of the device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceState {
    /// `MemTotal`, MiB.
    pub mem_total_mib: Option<f64>,
    /// `MemAvailable`, MiB.
    pub mem_available_mib: Option<f64>,
    /// `MemFree`, MiB.
    pub mem_free_mib: Option<f64>,
    /// `SwapFree`, MiB.
    pub swap_free_mib: Option<f64>,
    /// Load averages (1, 5, 15 min).
    pub load: Option<[f64; 3]>,
    /// Online CPUs (the report judges the load against them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ncpu: Option<u32>,
    /// Hottest CPU-like thermal zone, °C (trip-point zones ignored).
    pub cpu_temp_c: Option<f64>,
    /// Battery temperature, °C.
    pub battery_temp_c: Option<f64>,
    /// `scaling_max_freq` of cpu0, kHz.
    pub scaling_max_freq_khz: Option<u64>,
    /// Every readable thermal zone: type -> °C.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub thermal: BTreeMap<String, f64>,
}

impl DeviceState {
    /// Parses the probe's output.
    pub fn parse(text: &str) -> DeviceState {
        let mut s = DeviceState::default();
        for line in text.lines() {
            let Some((key, rest)) = line.split_once(':') else {
                continue;
            };
            let rest = rest.trim();
            let kb = || {
                rest.split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<f64>().ok())
                    .map(|v| v / 1024.0)
            };
            match key {
                "MemTotal" => s.mem_total_mib = kb(),
                "MemAvailable" => s.mem_available_mib = kb(),
                "MemFree" => s.mem_free_mib = kb(),
                "SwapFree" => s.swap_free_mib = kb(),
                "loadavg" => {
                    let v: Vec<f64> = rest
                        .split_whitespace()
                        .take(3)
                        .filter_map(|x| x.parse().ok())
                        .collect();
                    if v.len() == 3 {
                        s.load = Some([v[0], v[1], v[2]]);
                    }
                }
                "thermal" => {
                    let mut parts = rest.rsplitn(2, ' ');
                    let (Some(t), Some(ty)) = (parts.next(), parts.next()) else {
                        continue;
                    };
                    let Ok(milli) = t.parse::<f64>() else {
                        continue;
                    };
                    // Zones report milli-degrees; a few old drivers report degrees.
                    let c = if milli.abs() > 1000.0 {
                        milli / 1000.0
                    } else {
                        milli
                    };
                    let ty = ty.trim().to_string();
                    let mut name = ty.clone();
                    let mut i = 1;
                    while s.thermal.contains_key(&name) {
                        i += 1;
                        name = format!("{ty}#{i}");
                    }
                    s.thermal.insert(name, c);
                    let lower = ty.to_ascii_lowercase();
                    let cpu_like = lower.contains("cpu")
                        || lower.contains("x86_pkg")
                        || lower.contains("coretemp")
                        || lower.contains("soc");
                    if cpu_like && !lower.contains("trip") {
                        s.cpu_temp_c = Some(s.cpu_temp_c.map_or(c, |m: f64| m.max(c)));
                    }
                }
                "scaling_max_freq" => s.scaling_max_freq_khz = rest.parse().ok(),
                "ncpu" => s.ncpu = rest.parse().ok().filter(|n| *n > 0),
                "battery_temp" => {
                    s.battery_temp_c = rest.parse::<f64>().ok().map(|d| d / 10.0);
                }
                _ => {}
            }
        }
        s
    }

    /// Which `until` conditions fail (empty = gate open). A condition on a quantity the device
    /// cannot report fails, so a gate is never silently open.
    pub fn unmet(&self, until: &UntilDef) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |name: &str, have: Option<f64>, want: Option<f64>, max: bool| {
            if let Some(w) = want {
                match have {
                    None => out.push(format!("{name} unreadable")),
                    Some(h) if (max && h > w) || (!max && h < w) => {
                        out.push(format!(
                            "{name}={h:.1} (want {} {w})",
                            if max { "≤" } else { "≥" }
                        ));
                    }
                    Some(_) => {}
                }
            }
        };
        check("cpu_temp_c", self.cpu_temp_c, until.cpu_temp_c_max, true);
        check(
            "battery_temp_c",
            self.battery_temp_c,
            until.battery_temp_c_max,
            true,
        );
        check(
            "mem_available_mib",
            self.mem_available_mib,
            until.mem_available_mib_min,
            false,
        );
        check("load1", self.load.map(|l| l[0]), until.load1_max, true);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "MemTotal:       11366276 kB\nMemFree:          200000 kB\nMemAvailable:    5500000 kB\nSwapFree:              0 kB\nloadavg: 0.50 0.40 0.30 1/200 123\nthermal: cpu-0-0-0 41200\nthermal: cpu-1-0-0 44800\nthermal: cpu-hw-trip-0 95000\nthermal: battery 30000\nscaling_max_freq: 3321600\nbattery_temp: 312\n";

    #[test]
    fn parses_an_android_probe() {
        let s = DeviceState::parse(SAMPLE);
        assert!((s.mem_available_mib.expect("mem") - 5_500_000.0 / 1024.0).abs() < 1e-9);
        assert_eq!(s.load, Some([0.5, 0.4, 0.3]));
        assert_eq!(s.cpu_temp_c, Some(44.8), "trip zone ignored");
        assert_eq!(s.battery_temp_c, Some(31.2));
        assert_eq!(s.scaling_max_freq_khz, Some(3_321_600));
        assert_eq!(s.thermal.len(), 4);
    }

    #[test]
    fn gate_conditions() {
        let s = DeviceState::parse(SAMPLE);
        let ok = UntilDef {
            cpu_temp_c_max: Some(45.0),
            mem_available_mib_min: Some(5000.0),
            ..UntilDef::default()
        };
        assert!(s.unmet(&ok).is_empty());
        let hot = UntilDef {
            cpu_temp_c_max: Some(40.0),
            ..UntilDef::default()
        };
        assert_eq!(s.unmet(&hot).len(), 1);
        let none = DeviceState::default();
        assert_eq!(
            none.unmet(&ok),
            ["cpu_temp_c unreadable", "mem_available_mib unreadable"]
        );
    }

    #[test]
    fn probe_runs_here() {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(PROBE)
            .output()
            .expect("sh");
        assert!(out.status.success());
        let s = DeviceState::parse(&String::from_utf8_lossy(&out.stdout));
        assert!(s.mem_total_mib.is_some_and(|m| m > 0.0), "{s:?}");
        assert!(s.load.is_some());
    }
}
