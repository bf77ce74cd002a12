//! The command line of `cni-bench`.

use std::path::PathBuf;

pub const USAGE: &str = "\
usage: cni-bench [--quick] [--iterations N] [--sweep-iterations N] [--rss-runs N]
                 [--pods 0,100,1000] [--leases 0,100,1000,10000] [--no-sweep] [--floors-only]
                 [--chains bridge,portmap,bandwidth,flannel,full,dhcp,loopback]
                 [--ours DIR] [--reference DIR]... [--dynamic DIR]
                 [--results FILE] [--plot FILE]

Times our CNI plugins against the Go reference plugins inside throwaway network
namespaces (root needed) and writes RESULTS.md and the sweep plot.

  --quick               few iterations and a small sweep (a check, not a result)
  --iterations N        iterations per chain in the main table (default 30; quick 5)
  --sweep-iterations N  iterations per level of the sweep (default 15; quick 3)
  --rss-runs N          traced runs per chain and side for peak RSS (default 2; quick 1)
  --pods LIST           pods present in the pod sweep (default 0,100,1000; quick 0,100)
  --leases LIST         leases present in the host-local sweep (default 0,100,1000,10000; quick 0,1000)
  --no-sweep            main table only
  --floors-only         only the chains against their two floors, that section alone
                        written to --results (to compare a kernel setting, e.g.
                        rcu_expedited: docs/operating.md)
  --chains LIST         only these chains
  --ours DIR            our plugin binaries (default: the directory of cni-bench)
  --reference DIR       the Go plugins (default /usr/lib/cni); repeatable: the first
                        is measured everywhere, each further one (e.g. the current
                        upstream release built locally) in the chain and plugin tables
  --dynamic DIR         a dynamic build of our plugins (RUSTFLAGS=\"\" cargo build --release,
                        scripts/bench.sh makes one): measured against ours, which are
                        static, on the full chain, starts and a burst of 32 pods
  --results FILE        default bench/RESULTS.md of the source tree
  --plot FILE           default bench/latency-vs-pods.svg of the source tree
";

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub help: bool,
    pub quick: bool,
    pub iterations: usize,
    pub sweep_iterations: usize,
    pub rss_runs: usize,
    pub pods: Vec<usize>,
    pub leases: Vec<usize>,
    pub sweep: bool,
    /// Only the floors section ([`crate::floors`]).
    pub floors_only: bool,
    pub chains: Option<Vec<String>>,
    pub ours: Option<PathBuf>,
    /// The reference plugin directories, the first being the main one.
    pub reference: Vec<PathBuf>,
    /// A dynamic build of our plugins, to measure the static ones against.
    pub dynamic: Option<PathBuf>,
    pub results: PathBuf,
    pub plot: PathBuf,
}

fn list(flag: &str, v: &str) -> Result<Vec<usize>, String> {
    let mut out: Vec<usize> = v
        .split(',')
        .map(|x| {
            x.trim()
                .replace('_', "")
                .parse()
                .map_err(|_| format!("{flag}: {x:?} is not a number"))
        })
        .collect::<Result<_, _>>()?;
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

fn number(flag: &str, v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{flag}: {v:?} is not a positive number")),
    }
}

impl Options {
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
        let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let mut quick = false;
        let mut help = false;
        let mut sweep = true;
        let mut floors_only = false;
        let (mut iterations, mut sweep_iterations, mut rss_runs) = (None, None, None);
        let (mut pods, mut leases, mut chains) = (None, None, None);
        let mut ours = None;
        let mut dynamic = None;
        let mut reference: Vec<PathBuf> = Vec::new();
        let mut results = here.join("RESULTS.md");
        let mut plot = here.join("latency-vs-pods.svg");
        let mut args = args.into_iter();
        while let Some(a) = args.next() {
            let mut value = |flag: &str| {
                args.next()
                    .ok_or_else(|| format!("{flag} needs a value\n\n{USAGE}"))
            };
            match a.as_str() {
                "-h" | "--help" => help = true,
                "--quick" => quick = true,
                "--no-sweep" => sweep = false,
                "--floors-only" => floors_only = true,
                "--iterations" => iterations = Some(number(&a, &value(&a)?)?),
                "--sweep-iterations" => sweep_iterations = Some(number(&a, &value(&a)?)?),
                "--rss-runs" => rss_runs = Some(number(&a, &value(&a)?)?),
                "--pods" => pods = Some(list(&a, &value(&a)?)?),
                "--leases" => leases = Some(list(&a, &value(&a)?)?),
                "--chains" => {
                    let v = value(&a)?;
                    let keys: Vec<String> = v.split(',').map(|k| k.trim().to_string()).collect();
                    for k in &keys {
                        if !crate::chains::KEYS.contains(&k.as_str()) {
                            return Err(format!(
                                "--chains: unknown chain {k:?} (known: {})",
                                crate::chains::KEYS.join(", ")
                            ));
                        }
                    }
                    chains = Some(keys);
                }
                "--ours" => ours = Some(PathBuf::from(value(&a)?)),
                "--reference" => {
                    let dir = PathBuf::from(value(&a)?);
                    if !reference.contains(&dir) {
                        reference.push(dir);
                    }
                }
                "--dynamic" => dynamic = Some(PathBuf::from(value(&a)?)),
                "--results" => results = PathBuf::from(value(&a)?),
                "--plot" => plot = PathBuf::from(value(&a)?),
                other => return Err(format!("unknown argument {other:?}\n\n{USAGE}")),
            }
        }
        if let Some(p) = &pods {
            if p.iter().any(|&n| n > 1000) {
                // A Linux bridge takes at most 1024 ports.
                return Err("--pods: at most 1000 (a bridge has at most 1024 ports)".into());
            }
        }
        if let Some(l) = &leases {
            if l.iter().any(|&n| n > 60_000) {
                return Err("--leases: at most 60000 (the sweep's range is a /16)".into());
            }
        }
        if reference.is_empty() {
            reference.push(PathBuf::from("/usr/lib/cni"));
        }
        Ok(Options {
            help,
            quick,
            iterations: iterations.unwrap_or(if quick { 5 } else { 30 }),
            sweep_iterations: sweep_iterations.unwrap_or(if quick { 3 } else { 15 }),
            rss_runs: rss_runs.unwrap_or(if quick { 1 } else { 2 }),
            pods: pods.unwrap_or_else(|| {
                if quick {
                    vec![0, 100]
                } else {
                    vec![0, 100, 1000]
                }
            }),
            leases: leases.unwrap_or_else(|| {
                if quick {
                    vec![0, 1000]
                } else {
                    vec![0, 100, 1000, 10_000]
                }
            }),
            sweep,
            floors_only,
            chains,
            ours,
            reference,
            dynamic,
            results,
            plot,
        })
    }

    /// One line for the report.
    pub fn summary(&self) -> String {
        format!(
            "{} iterations per chain, {} per sweep level, {} traced runs for RSS; pods {:?}, leases {:?}{}",
            self.iterations,
            self.sweep_iterations,
            self.rss_runs,
            self.pods,
            self.leases,
            if self.sweep { "" } else { " (sweep off)" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Result<Options, String> {
        Options::parse(v.iter().map(|s| s.to_string()))
    }

    #[test]
    fn quick_sets_defaults_that_flags_override() {
        let o = parse(&["--iterations", "7", "--quick"]).unwrap();
        assert_eq!(o.iterations, 7);
        assert_eq!(o.sweep_iterations, 3);
        assert_eq!(o.pods, [0, 100]);
        let o = parse(&[]).unwrap();
        assert_eq!((o.iterations, o.rss_runs), (30, 2));
        assert_eq!(o.leases, [0, 100, 1000, 10_000]);
    }

    #[test]
    fn bad_values_are_named() {
        assert!(parse(&["--iterations", "0"])
            .unwrap_err()
            .contains("--iterations"));
        assert!(parse(&["--pods", "0,2000"]).unwrap_err().contains("1024"));
        assert!(parse(&["--chains", "nope"]).unwrap_err().contains("nope"));
        assert!(parse(&["--wat"]).unwrap_err().contains("--wat"));
        assert_eq!(parse(&["--pods", "100,0,100"]).unwrap().pods, [0, 100]);
    }

    #[test]
    fn references_repeat_and_default_to_debians() {
        assert_eq!(
            parse(&[]).unwrap().reference,
            [PathBuf::from("/usr/lib/cni")]
        );
        let o = parse(&[
            "--reference",
            "/usr/lib/cni",
            "--reference",
            "/tmp/up",
            "--reference",
            "/tmp/up",
        ])
        .unwrap();
        assert_eq!(
            o.reference,
            [PathBuf::from("/usr/lib/cni"), PathBuf::from("/tmp/up")]
        );
    }
}
