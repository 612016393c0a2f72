//! Architecture registry: which GGUF tensors of a MoE architecture hold the routed experts.
//!
//! A recipe maps a `general.architecture` value to the suffixes of its per-layer expert tensors
//! (`blk.<il>.<suffix>.weight`, dim 2 indexes experts). Everything else in a layer — shared
//! experts, routers, biases, scales — stays on llama.cpp's mmap.

/// One way a layer can store its routed experts: the tensor suffixes that together form an
/// expert (gate/up/down, or a fused gate_up plus down).
pub type Layout = &'static [&'static str];

/// How to find the routed-expert tensors of one architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recipe {
    /// The GGUF `general.architecture` value.
    pub arch: &'static str,
    /// Accepted layouts, preferred first. A layer binds when its captured expert tensors are
    /// exactly one of these.
    pub layouts: &'static [Layout],
}

const SPLIT: Layout = &["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"];
const FUSED: Layout = &["ffn_gate_up_exps", "ffn_down_exps"];

/// Every architecture this build streams (engine spec §2.2; all present in the vendored
/// llama.cpp). qwen35moe also accepts a fused gate_up tensor, which llama.cpp loads when the GGUF
/// has one.
pub const RECIPES: &[Recipe] = &[
    Recipe {
        arch: "bailingmoe3",
        layouts: &[SPLIT],
    },
    Recipe {
        arch: "deepseek4",
        layouts: &[SPLIT],
    },
    Recipe {
        arch: "gemma4",
        layouts: &[FUSED],
    },
    Recipe {
        arch: "gpt-oss",
        layouts: &[SPLIT],
    },
    Recipe {
        arch: "lfm2moe",
        layouts: &[SPLIT],
    },
    Recipe {
        arch: "qwen2moe",
        layouts: &[SPLIT],
    },
    Recipe {
        arch: "qwen35moe",
        layouts: &[SPLIT, FUSED],
    },
    Recipe {
        arch: "qwen3moe",
        layouts: &[SPLIT],
    },
];

/// The recipe for `arch`, if this build streams it.
pub fn recipe_for(arch: &str) -> Option<&'static Recipe> {
    RECIPES.iter().find(|r| r.arch == arch)
}

impl Recipe {
    /// Every suffix any layout of this recipe uses, without duplicates.
    pub fn suffixes(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for layout in self.layouts {
            for s in *layout {
                if !out.contains(s) {
                    out.push(s);
                }
            }
        }
        out
    }

    /// If `name` is `blk.<il>.<suffix>.weight` for one of this recipe's suffixes, the layer and
    /// suffix. The `.weight` tail is exact, so `…_exps.bias` / `.scale` companions never match.
    pub fn match_tensor(&self, name: &str) -> Option<(usize, &'static str)> {
        let rest = name.strip_prefix("blk.")?;
        let (il, rest) = rest.split_once('.')?;
        if il.is_empty() || !il.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let suffix = rest.strip_suffix(".weight")?;
        let found = self.suffixes().into_iter().find(|s| *s == suffix)?;
        Some((il.parse().ok()?, found))
    }

    /// The layout whose suffixes are exactly `captured` (order-insensitive).
    pub fn layout_for(&self, captured: &[&str]) -> Option<Layout> {
        self.layouts.iter().copied().find(|layout| {
            layout.len() == captured.len() && layout.iter().all(|s| captured.contains(s))
        })
    }
}

/// The text `--list-archs` prints: per architecture its expert layouts and the
/// `bmoe-bench model synth --preset` names that write a model of it.
pub fn list_archs_text() -> String {
    let mut out = String::from("supported MoE architectures:\n");
    for r in RECIPES {
        let layouts: Vec<String> = r.layouts.iter().map(|l| l.join(" + ")).collect();
        let presets = bmoe_gguf::synth::Preset::names_for(r.arch);
        out.push_str(&format!(
            "  {:<12} {}  (synth presets: {})\n",
            r.arch,
            layouts.join("  |  "),
            presets.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_arch_has_a_recipe() {
        for arch in [
            "qwen3moe",
            "qwen2moe",
            "qwen35moe",
            "gemma4",
            "gpt-oss",
            "lfm2moe",
            "deepseek4",
            "bailingmoe3",
        ] {
            assert!(recipe_for(arch).is_some(), "{arch}");
        }
        assert!(recipe_for("llama").is_none());
    }

    /// bmoe-gguf's list (which its checks refuse files against) and the recipes (what
    /// `--list-archs` prints) are one set, so the two cannot drift.
    #[test]
    fn recipes_are_exactly_bmoe_gguf_s_supported_architectures() {
        let recipes: Vec<&str> = RECIPES.iter().map(|r| r.arch).collect();
        assert_eq!(recipes, bmoe_gguf::MOE_ARCHITECTURES);
        for arch in bmoe_gguf::MOE_ARCHITECTURES {
            assert!(bmoe_gguf::is_supported_arch(arch));
            assert!(recipe_for(arch).is_some(), "{arch}");
        }
        assert!(!bmoe_gguf::is_supported_arch("llama"));
    }

    #[test]
    fn matches_only_exact_weight_names() {
        let r = recipe_for("qwen3moe").unwrap();
        assert_eq!(
            r.match_tensor("blk.12.ffn_up_exps.weight"),
            Some((12, "ffn_up_exps"))
        );
        assert_eq!(r.match_tensor("blk.12.ffn_up_exps.bias"), None);
        assert_eq!(r.match_tensor("blk.1.ffn_up_shexp.weight"), None);
        assert_eq!(r.match_tensor("blk.x.ffn_up_exps.weight"), None);
        assert_eq!(r.match_tensor("blk..ffn_up_exps.weight"), None);
        assert_eq!(r.match_tensor("token_embd.weight"), None);
        let g = recipe_for("gemma4").unwrap();
        assert_eq!(
            g.match_tensor("blk.3.ffn_gate_up_exps.weight"),
            Some((3, "ffn_gate_up_exps"))
        );
        assert_eq!(g.match_tensor("blk.3.ffn_gate_exps.weight"), None);
    }

    #[test]
    fn layouts_must_match_exactly() {
        let r = recipe_for("qwen35moe").unwrap();
        assert_eq!(
            r.layout_for(&["ffn_down_exps", "ffn_gate_exps", "ffn_up_exps"]),
            Some(SPLIT)
        );
        assert_eq!(
            r.layout_for(&["ffn_gate_up_exps", "ffn_down_exps"]),
            Some(FUSED)
        );
        assert_eq!(r.layout_for(&["ffn_gate_exps", "ffn_down_exps"]), None);
    }

    #[test]
    fn list_text_names_every_arch() {
        let text = list_archs_text();
        assert!(text.starts_with("supported MoE architectures:\n"));
        for r in RECIPES {
            assert!(text.contains(&format!("  {}", r.arch)));
        }
    }

    /// Every streamed architecture can be synthesised (so every one is gated), and its
    /// `--list-archs` line names its presets.
    #[test]
    fn every_recipe_has_a_synth_preset_listed() {
        let text = list_archs_text();
        for r in RECIPES {
            let presets = bmoe_gguf::synth::Preset::names_for(r.arch);
            assert!(!presets.is_empty(), "{} has no preset", r.arch);
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("  {} ", r.arch)))
                .unwrap();
            assert!(
                line.ends_with(&format!("(synth presets: {})", presets.join(", "))),
                "{line}"
            );
        }
        assert_eq!(
            bmoe_gguf::synth::Preset::names_for("deepseek4"),
            ["deepseek4-tiny", "deepseek-v4-flash"]
        );
        assert!(bmoe_gguf::synth::Preset::names_for("llama").is_empty());
    }
}
