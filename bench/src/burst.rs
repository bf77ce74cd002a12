//! Bursts: [`BURST_PODS`] pods ADDed at once, as a node does when a
//! deployment scales up or a node comes back, then DELed at once, through
//! the runtime, a thread per pod. Every form measured takes its turn in
//! each round, the first of the round rotating, so drift hits all alike.

use crate::chains::{self, Chain};
use crate::runner::{runtime_conf, SideSetup};
use crate::stats::Samples;
use cnitool::RuntimeConf;
use std::time::Instant;

/// Pods of one burst.
pub const BURST_PODS: usize = 32;

/// One form's bursts: the wall time from the first ADD started to the
/// last one done (ms), the same for DEL, and what failed.
#[derive(Debug, Clone, Default)]
pub struct Bursts {
    pub add: Samples,
    pub del: Samples,
    pub errors: Vec<String>,
}

/// `rounds` bursts of each of `forms` on `pods`, after one untimed burst
/// each; each pod has a host port of its own. One [`Bursts`] per form, in
/// order.
pub fn measure(
    forms: &[SideSetup],
    pods: &[String],
    chain: &Chain,
    rounds: usize,
) -> Result<Vec<Bursts>, String> {
    let mut out = vec![Bursts::default(); forms.len()];
    for (round, k) in turns(rounds, forms.len()) {
        crate::interrupt::check()?;
        let rts = attachments(chain, pods, &format!("burst-{k}-{round}"));
        let (add_ms, add_errors) = at_once(&forms[k], &rts, Verb::Add);
        let (del_ms, del_errors) = at_once(&forms[k], &rts, Verb::Del);
        // The first round of each form warms it and is not counted.
        if round == 0 {
            continue;
        }
        let errors: Vec<String> = add_errors.into_iter().chain(del_errors).collect();
        if errors.is_empty() {
            out[k].add.push(add_ms);
            out[k].del.push(del_ms);
        } else {
            out[k].errors.extend(errors);
        }
    }
    Ok(out)
}

/// `(round, form)` for rounds `0..=rounds` (round 0 warms each form up),
/// every form once per round, the first of a round rotating.
pub fn turns(rounds: usize, forms: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..=rounds).flat_map(move |round| (0..forms).map(move |turn| (round, (round + turn) % forms)))
}

/// One attachment per pod, container IDs starting with `prefix`, each with
/// a host port of its own when the chain maps ports.
pub fn attachments(chain: &Chain, pods: &[String], prefix: &str) -> Vec<RuntimeConf> {
    pods.iter()
        .enumerate()
        .map(|(i, pod)| {
            let mut caps = chain.capability_args.clone();
            if caps.contains_key("portMappings") {
                caps.insert(
                    "portMappings".into(),
                    chains::port_mapping(20_000 + i as u16),
                );
            }
            runtime_conf(format!("{prefix}-{i}"), pod, chain.ifname, &caps)
        })
        .collect()
}

#[derive(Debug, Clone, Copy)]
enum Verb {
    Add,
    Del,
}

/// Runs `verb` for every attachment of `rts` at once, a thread each (each
/// thread is in the node namespace, as this one is): the wall time until
/// the last is done, and the errors.
fn at_once(side: &SideSetup, rts: &[RuntimeConf], verb: Verb) -> (f64, Vec<String>) {
    let start = Instant::now();
    let errors: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = rts
            .iter()
            .map(|rt| {
                s.spawn(move || match verb {
                    Verb::Add => side
                        .cni
                        .add_network_list(&side.list, rt)
                        .map(|_| ())
                        .map_err(|e| format!("ADD {}: {e}", rt.container_id)),
                    Verb::Del => side
                        .cni
                        .del_network_list(&side.list, rt)
                        .map_err(|e| format!("DEL {}: {e}", rt.container_id)),
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| match h.join() {
                Ok(r) => r.err(),
                Err(_) => Some("a burst thread panicked".into()),
            })
            .collect()
    });
    (start.elapsed().as_secs_f64() * 1e3, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_takes_one_turn_a_round_the_first_rotating() {
        let t: Vec<(usize, usize)> = turns(2, 3).collect();
        assert_eq!(
            t,
            [
                (0, 0),
                (0, 1),
                (0, 2),
                (1, 1),
                (1, 2),
                (1, 0),
                (2, 2),
                (2, 0),
                (2, 1)
            ]
        );
    }
}
