//! The one parser of llama.cpp's graph node names (`ffn_moe_topk-12`, `norm-0`, …): every other
//! module asks here which layer a node belongs to and what role it plays.

/// The routing node whose ids decide which experts a layer reads.
pub const TOPK_NODE: &str = "ffn_moe_topk";

/// Node names of the weight chain, in graph order: the last one computed is the applied weight.
pub const WEIGHT_NODES: [&str; 4] = [
    "ffn_moe_weights",
    "ffn_moe_weights_softmax",
    "ffn_moe_weights_norm",
    "ffn_moe_weights_scaled",
];

/// Splits `<base>-<il>` into its base and layer: the suffix after the last dash must be all
/// digits (`ffn_moe_topk-1x` and `x-` have no layer).
pub fn split_layer(name: &str) -> Option<(&str, usize)> {
    let (base, digits) = name.rsplit_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((base, digits.parse().ok()?))
}

/// The layer when `name` is exactly `base`, a dash and digits.
pub fn layer_of(name: &str, base: &str) -> Option<usize> {
    split_layer(name).and_then(|(b, il)| (b == base).then_some(il))
}

/// The layer of a routing node (`ffn_moe_topk-<il>`).
pub fn topk_layer(name: &str) -> Option<usize> {
    layer_of(name, TOPK_NODE)
}

/// The layer of a weight-chain node name (`ffn_moe_weights_norm-3` → 3).
pub fn weight_layer(name: &str) -> Option<usize> {
    let (base, il) = split_layer(name)?;
    WEIGHT_NODES.contains(&base).then_some(il)
}

/// The layer of any node with a `-<il>` suffix (the compute trace's `layer` column).
pub fn node_layer(name: &str) -> Option<usize> {
    split_layer(name).map(|(_, il)| il)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_suffix_must_be_exact() {
        assert_eq!(topk_layer("ffn_moe_topk-12"), Some(12));
        assert_eq!(topk_layer("ffn_moe_topk-0"), Some(0));
        assert_eq!(topk_layer("ffn_moe_topk_sum-1"), None);
        assert_eq!(topk_layer("ffn_moe_topk-"), None);
        assert_eq!(topk_layer("ffn_moe_topk-1x"), None);
        assert_eq!(topk_layer("ffn_moe_topk"), None);
        assert_eq!(topk_layer("ffn_moe_weights-3"), None);
        assert_eq!(layer_of("a-b-3", "a-b"), Some(3));
    }

    #[test]
    fn weight_chain_names_parse_and_others_do_not() {
        assert_eq!(weight_layer("ffn_moe_weights-2"), Some(2));
        assert_eq!(weight_layer("ffn_moe_weights_norm-11"), Some(11));
        assert_eq!(weight_layer("ffn_moe_weights_scaled-0"), Some(0));
        assert_eq!(weight_layer("ffn_moe_weights_sum-0"), None);
        assert_eq!(weight_layer("ffn_moe_topk-0"), None);
    }

    #[test]
    fn any_layer_suffix() {
        assert_eq!(node_layer("norm-0"), Some(0));
        assert_eq!(node_layer("ffn_moe_topk-12"), Some(12));
        assert_eq!(node_layer("result_output"), None);
        assert_eq!(node_layer("inp_embd"), None);
        assert_eq!(node_layer("x-"), None);
        assert_eq!(node_layer("leaf_3 (copy)"), None);
    }
}
