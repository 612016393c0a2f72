//! The devices and models a manifest declares, and the ones a sweep uses: each declared once,
//! complete for its kind, and every use naming a declared one.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use super::{Ctx, ModelSource, Res};
use crate::sweep::manifest::{DeviceDef, DeviceKind, ModelPath, SweepDef};

/// The declared devices, in declaration order; none declared = one local device `local`.
pub(super) fn devices(cx: &Ctx<'_>) -> Res<Vec<DeviceDef>> {
    let mut devices: Vec<DeviceDef> = Vec::new();
    for d in &cx.m.devices {
        let dd = d.get_ref();
        if devices.iter().any(|x| x.id == dd.id) {
            return Err(cx.err(d.span(), format!("device `{}` is declared twice", dd.id)));
        }
        match dd.kind {
            DeviceKind::Ssh if dd.host.is_none() => {
                return Err(cx.err_hint(
                    d.span(),
                    format!("ssh device `{}` has no host", dd.id),
                    "add host = \"name-or-address\"",
                ));
            }
            DeviceKind::Adb if dd.serial.is_none() => {
                return Err(cx.err_hint(
                    d.span(),
                    format!("adb device `{}` has no serial", dd.id),
                    "add serial = \"...\" (see `adb devices`)",
                ));
            }
            _ => {}
        }
        devices.push(dd.clone());
    }
    if devices.is_empty() {
        devices.push(DeviceDef {
            id: "local".into(),
            kind: DeviceKind::Local,
            host: None,
            user: None,
            port: None,
            identity_file: None,
            ssh_options: Vec::new(),
            serial: None,
            workdir: None,
            binary: None,
            env: BTreeMap::new(),
        });
    }
    Ok(devices)
}

/// The declared models by id; a relative `path` resolves against `manifest_dir`.
pub(super) fn models(
    cx: &Ctx<'_>,
    devices: &[DeviceDef],
    manifest_dir: &Path,
) -> Res<BTreeMap<String, ModelSource>> {
    let mut models = BTreeMap::new();
    for md in &cx.m.models {
        let d = md.get_ref();
        if models.contains_key(&d.id) {
            return Err(cx.err(md.span(), format!("model `{}` is declared twice", d.id)));
        }
        let source = match (&d.path, &d.preset) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(cx.err_hint(
                    md.span(),
                    format!("model `{}` needs exactly one of `path` and `preset`", d.id),
                    "e.g. preset = \"tiny\" (built on first use) or path = \"models/x.gguf\"",
                ));
            }
            (Some(ModelPath::One(p)), None) => ModelSource::File(manifest_dir.join(p)),
            (Some(ModelPath::PerDevice(map)), None) => {
                for dev in map.keys() {
                    if !devices.iter().any(|x| &x.id == dev) {
                        return Err(cx.err(
                            md.span(),
                            format!("model `{}` names undeclared device `{dev}`", d.id),
                        ));
                    }
                }
                ModelSource::PerDevice(map.clone())
            }
            (None, Some(p)) => {
                if bmoe_gguf::synth::Preset::from_name(p).is_none() {
                    return Err(cx.err_hint(
                        md.span(),
                        format!("model `{}`: unknown preset `{p}`", d.id),
                        "presets: tiny, qwen2moe-tiny, gpt-oss-tiny, qwen3-30b-a3b",
                    ));
                }
                if let Some(t) = &d.expert_type
                    && bmoe_gguf::GgmlType::from_name(t).is_none()
                {
                    return Err(cx.err(
                        md.span(),
                        format!("model `{}`: unknown expert_type `{t}`", d.id),
                    ));
                }
                ModelSource::Preset {
                    preset: p.clone(),
                    expert_type: d.expert_type.clone(),
                    seed: d.seed,
                }
            }
        };
        models.insert(d.id.clone(), source);
    }
    Ok(models)
}

/// The ids of the devices sweep `sw` runs on (default: every declared device).
pub(super) fn sweep_devices(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    sweep: &str,
    devices: &[DeviceDef],
    span: &Range<usize>,
) -> Res<Vec<String>> {
    let dev_ids: Vec<String> = match &sw.devices {
        Some(list) => {
            let mut out = Vec::new();
            for d in list {
                if !devices.iter().any(|x| &x.id == d.get_ref()) {
                    let known: Vec<&str> = devices.iter().map(|x| x.id.as_str()).collect();
                    return Err(cx.err_hint(
                        d.span(),
                        format!(
                            "sweep `{sweep}` uses device `{}`, which is not declared",
                            d.get_ref()
                        ),
                        format!(
                            "declare it with [[device]] id = \"{}\" ... (declared: {})",
                            d.get_ref(),
                            known.join(", ")
                        ),
                    ));
                }
                out.push(d.get_ref().clone());
            }
            out
        }
        None => devices.iter().map(|d| d.id.clone()).collect(),
    };
    if dev_ids.is_empty() {
        return Err(cx.err_hint(
            span.clone(),
            format!("sweep `{sweep}` has an empty device list"),
            "name at least one declared device (or leave `devices` out for all of them)",
        ));
    }
    Ok(dev_ids)
}

/// The ids of the models sweep `sw` runs (default: every declared model); one empty id when a
/// model-kind axis picks the model per cell instead (`model_axis`).
pub(super) fn sweep_models(
    cx: &Ctx<'_>,
    sw: &SweepDef,
    sweep: &str,
    models: &BTreeMap<String, ModelSource>,
    model_axis: bool,
    span: &Range<usize>,
) -> Res<Vec<String>> {
    let model_ids: Vec<String> = if model_axis {
        vec![String::new()]
    } else {
        match &sw.models {
            Some(list) => {
                let mut out = Vec::new();
                for mid in list {
                    if !models.contains_key(mid.get_ref()) {
                        return Err(cx.err_hint(
                            mid.span(),
                            format!("sweep `{sweep}` uses model `{}`, which is not declared", mid.get_ref()),
                            "declare it with [[model]] id = \"...\" preset = \"tiny\" (or path = ...)",
                        ));
                    }
                    out.push(mid.get_ref().clone());
                }
                out
            }
            None => models.keys().cloned().collect(),
        }
    };
    if model_ids.is_empty() {
        return Err(cx.err_hint(
            span.clone(),
            format!("sweep `{sweep}` has no model"),
            "declare one with [[model]] id = \"tiny\" preset = \"tiny\"",
        ));
    }
    for (model, pm) in &sw.per_model {
        if !model_ids.contains(model) {
            return Err(cx.err_hint(
                pm.span(),
                format!("per_model names model `{model}`, which this sweep does not run"),
                format!(
                    "per_model keys are model ids of this sweep: {}",
                    model_ids.join(", ")
                ),
            ));
        }
    }
    Ok(model_ids)
}
