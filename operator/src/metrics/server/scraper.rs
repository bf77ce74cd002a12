//! The scrape worker: one thread that owns the registry and reads the
//! node for every round of scrapes. Requests that arrive while a round
//! runs wait for the next one and share its read of the node and its
//! encoded body, so any number of scrapers cost one read at a time and
//! one body per format and round. The server is woken through a socket
//! when a round is done.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use super::http::Answer;
use super::Judging;
use crate::metrics::{Format, Metrics, Sources};

/// The connection a scrape answers, as the server numbers them.
pub type Token = u64;

/// A round's answer to one scrape.
pub struct Done {
    pub token: Token,
    pub answer: Answer,
}

/// The server's side of the worker.
pub struct Scraper {
    jobs: Sender<(Token, Format)>,
    done: Receiver<Done>,
}

impl Scraper {
    /// Starts the worker; `wake` is written a byte after each round.
    pub fn start(
        sources: Sources,
        mut metrics: Metrics,
        judge: Box<Judging>,
        mut wake: UnixStream,
    ) -> Scraper {
        let (jobs, job_rx) = channel::<(Token, Format)>();
        let (done_tx, done) = channel();
        std::thread::spawn(move || {
            // Ends when the server drops its sender.
            while let Ok(first) = job_rx.recv() {
                let round: Vec<(Token, Format)> =
                    std::iter::once(first).chain(job_rx.try_iter()).collect();
                // A bug in reading the node fails this round's scrapes,
                // not every later one.
                let read = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    metrics.refresh(&sources.paths, &|| judge())
                }));
                let mut bodies: Vec<(Format, Arc<str>)> = Vec::new();
                for (token, format) in round {
                    let answer = if read.is_err() {
                        Answer::plain("500 Internal Server Error", "the scrape failed")
                    } else if let Some((_, body)) = bodies.iter().find(|(f, _)| *f == format) {
                        Answer::scrape(format, Arc::clone(body))
                    } else {
                        let body: Arc<str> = metrics.encode(format).into();
                        bodies.push((format, Arc::clone(&body)));
                        Answer::scrape(format, body)
                    };
                    if done_tx.send(Done { token, answer }).is_err() {
                        return;
                    }
                }
                // A full socket already wakes the server: nothing lost.
                let _ = wake.write(&[1]);
            }
        });
        Scraper { jobs, done }
    }

    /// Asks for a scrape in `format` for connection `token`.
    pub fn ask(&self, token: Token, format: Format) {
        // The worker only stops when this sender is dropped.
        let _ = self.jobs.send((token, format));
    }

    /// The answers of the rounds done so far.
    pub fn answers(&self) -> impl Iterator<Item = Done> + '_ {
        self.done.try_iter()
    }
}
