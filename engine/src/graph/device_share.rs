//! The prefill device's share of a prompt: which prefill decodes the device computed part of,
//! and what those decodes read from flash, waited for and routed. One place for the one-shot or
//! session prefill (`BMOE_DONE`, the CSV trailer) and a `decide`'s prefill (`BMOE_DECIDE`), so
//! both report the seed's `prefill_dev_*` keys the same way.

use crate::ffi::{Context, DeviceTally};
use crate::graph::arena::ArenaTally;
use crate::graph::hook::MoeHook;
use crate::stream::{StreamStats, Streamer};

/// The prefill device's share of the prompt phase (telemetry.md's `prefill_dev_*`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PrefillDevice {
    /// Prompt tokens whose graph ran on the device.
    pub tokens: u64,
    /// Graph nodes whose output landed in a device buffer.
    pub nodes: u64,
    /// Expert bytes read from flash for the decodes the device computed.
    pub read_bytes: u64,
    /// Wall time those decodes waited at a routing node for the reads, s.
    pub stall_s: f64,
    /// Routed mode: the (layer, expert) pairs those decodes routed (each routing node's union;
    /// `BMOE_DECIDE`'s `prefill_dev_routed`, 0 with `--no-prefill-routed`).
    pub routed: u64,
    /// Routed mode: of those, the pairs the prediction missed, read at the routing node
    /// (`prefill_dev_demand`).
    pub demand: u64,
}

/// The counters a prefill decode is charged against, read right before it.
#[derive(Debug, Clone, Copy)]
pub struct DecodeMark {
    device: DeviceTally,
    stream: Option<StreamStats>,
    arena: ArenaTally,
}

impl DecodeMark {
    /// Reads the counters as they stand before a decode on `ctx`.
    pub fn take(ctx: &mut Context<'_, MoeHook>) -> DecodeMark {
        DecodeMark {
            device: ctx.device_tally(),
            stream: stream_stats(ctx),
            arena: arena_tally(ctx),
        }
    }

    /// Adds the decode that ran since this mark to `d` when the device computed part of it: its
    /// device nodes and tokens, the decode's expert reads and the time it waited for them
    /// (serial loads: the blocked read time, the arena's reads ahead included; the device graph
    /// was held at the routing node), and routed mode's counts. Returns the arena's share of the
    /// decode (zeros when the device computed none of it, or without routed mode).
    pub fn charge(self, ctx: &mut Context<'_, MoeHook>, d: &mut PrefillDevice) -> ArenaTally {
        let now = ctx.device_tally();
        if now.nodes == self.device.nodes {
            return ArenaTally::default();
        }
        d.nodes += now.nodes - self.device.nodes;
        d.tokens += now.tokens - self.device.tokens;
        if let (Some(a), Some(b)) = (self.stream, stream_stats(ctx)) {
            d.read_bytes += b.read_bytes - a.read_bytes;
            d.stall_s += ((b.io_ns - a.io_ns) + (b.stall_ns - a.stall_ns)) as f64 / 1e9;
        }
        let a = arena_tally(ctx).since(&self.arena);
        d.routed += a.routed;
        d.demand += a.demand;
        a
    }
}

fn stream_stats(ctx: &mut Context<'_, MoeHook>) -> Option<StreamStats> {
    ctx.hook_mut()
        .and_then(|h| h.streamer())
        .map(Streamer::stats)
}

/// What the prefill arena did so far (zeros without routed mode).
fn arena_tally(ctx: &mut Context<'_, MoeHook>) -> ArenaTally {
    ctx.hook_mut()
        .and_then(|h| h.arena_tally())
        .unwrap_or_default()
}
