//! Command-line arguments as the suite's tools (cnitool, the installer)
//! read them: flags before, between or after the positionals, a value as
//! `--name=value` or as the next argument, `--` ending the flags, and a
//! lone `-` a positional.

/// The arguments of a command line, without the program name, read one
/// flag at a time.
pub struct Args<'a> {
    rest: std::slice::Iter<'a, String>,
    flags_done: bool,
}

/// A flag: its name (`--ifname` of `--ifname=eth0`), the argument as
/// given, and the value written inline, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag<'a> {
    pub name: &'a str,
    pub given: &'a str,
    inline: Option<&'a str>,
}

impl<'a> Args<'a> {
    pub fn new(args: &'a [String]) -> Args<'a> {
        Args {
            rest: args.iter(),
            flags_done: false,
        }
    }

    /// The next flag; the positionals before it go to `positional`, and
    /// `--` is consumed. `None` at the end.
    pub fn next_flag(&mut self, positional: &mut Vec<String>) -> Option<Flag<'a>> {
        loop {
            let arg = self.rest.next()?;
            if self.flags_done || !arg.starts_with('-') || arg == "-" {
                positional.push(arg.clone());
                continue;
            }
            if arg == "--" {
                self.flags_done = true;
                continue;
            }
            let (name, inline) = match arg.split_once('=') {
                Some((name, value)) if name.starts_with("--") => (name, Some(value)),
                _ => (arg.as_str(), None),
            };
            return Some(Flag {
                name,
                given: arg,
                inline,
            });
        }
    }

    /// The value of `flag`: the one written inline, else the next
    /// argument; `None` when there is neither.
    pub fn value(&mut self, flag: &Flag<'a>) -> Option<String> {
        match flag.inline {
            Some(v) => Some(v.to_string()),
            None => self.rest.next().cloned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_flags_values_and_positionals_in_any_order() {
        let line: Vec<String> = ["a", "--x=1", "-y", "2", "-", "--", "--z", "b"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut args = Args::new(&line);
        let mut positional = Vec::new();
        let mut flags = Vec::new();
        while let Some(f) = args.next_flag(&mut positional) {
            let v = args.value(&f);
            flags.push(format!("{} {v:?} ({})", f.name, f.given));
        }
        assert_eq!(flags, ["--x Some(\"1\") (--x=1)", "-y Some(\"2\") (-y)"]);
        assert_eq!(positional, ["a", "-", "--z", "b"]);
        let line = vec!["--x".to_string()];
        let mut args = Args::new(&line);
        let f = args.next_flag(&mut positional).unwrap();
        assert_eq!(args.value(&f), None);
    }
}
