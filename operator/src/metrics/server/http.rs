//! The HTTP/1.x the server speaks, without I/O: a request head read from
//! the bytes received so far (`httparse`), what it is answered, and the
//! answer's bytes. One request per connection: every answer closes it.

use std::sync::Arc;

use super::MAX_REQUEST;
use crate::metrics::Format;

/// What the bytes received so far make of a request.
pub enum Request {
    /// Not whole yet, and within [`MAX_REQUEST`]: read on.
    Partial,
    /// Whole: a scrape to run, or an answer to send now.
    Whole(Route),
}

/// Where a whole request goes.
pub enum Route {
    /// `GET /metrics`, in the format the scraper accepts.
    Scrape(Format),
    /// Anything else: answered at once (`/healthz`, and every refusal).
    Answer(Answer),
}

/// A status line and a body, ready to send.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: &'static str,
    pub content_type: &'static str,
    /// Shared: the scrapes of one round send the same body.
    pub body: Arc<str>,
}

impl Answer {
    /// A plain-text answer of one line.
    pub fn plain(status: &'static str, body: &str) -> Answer {
        Answer {
            status,
            content_type: "text/plain; charset=utf-8",
            body: format!("{body}\n").into(),
        }
    }

    /// A scrape's answer: the registry encoded in `format`.
    pub fn scrape(format: Format, body: Arc<str>) -> Answer {
        Answer {
            status: "200 OK",
            content_type: format.content_type(),
            body,
        }
    }

    /// The request's whole head did not arrive in time.
    pub fn timeout() -> Answer {
        Answer::plain("408 Request Timeout", "request timeout")
    }

    /// The client closed its side before its request was whole.
    pub fn incomplete() -> Answer {
        Answer::plain("400 Bad Request", "incomplete request")
    }

    /// The status line and headers.
    pub fn head(&self) -> Vec<u8> {
        format!(
            "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len()
        )
        .into_bytes()
    }
}

/// Reads `received` as a request head: whole, partial, or refused (a
/// malformed request 400, a head over [`MAX_REQUEST`] 431).
pub fn parse(received: &[u8]) -> Request {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(received) {
        Ok(httparse::Status::Complete(_)) => {
            let header = |name: &str| {
                req.headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .map(|h| String::from_utf8_lossy(h.value).into_owned())
            };
            let has_body = header("content-length").is_some_and(|v| v.trim() != "0")
                || header("transfer-encoding").is_some();
            let head = Head {
                method: req.method.unwrap_or_default(),
                path: req.path.unwrap_or_default(),
                accept: header("accept").unwrap_or_default(),
                has_body,
            };
            Request::Whole(route(&head))
        }
        Ok(httparse::Status::Partial) if received.len() < MAX_REQUEST => Request::Partial,
        Ok(httparse::Status::Partial) => Request::Whole(Route::Answer(Answer::plain(
            "431 Request Header Fields Too Large",
            "request too large",
        ))),
        Err(e) => Request::Whole(Route::Answer(Answer::plain(
            "400 Bad Request",
            &e.to_string(),
        ))),
    }
}

/// A request's method, path and `Accept`.
struct Head<'a> {
    method: &'a str,
    path: &'a str,
    accept: String,
    has_body: bool,
}

fn route(head: &Head) -> Route {
    let path = head.path.split('?').next().unwrap_or("");
    if head.has_body {
        return Route::Answer(Answer::plain(
            "413 Content Too Large",
            "no request body is taken",
        ));
    }
    let answer = match (head.method, path) {
        ("GET", "/metrics") => return Route::Scrape(Format::from_accept(&head.accept)),
        ("GET", "/healthz") => Answer::plain("200 OK", "ok"),
        (_, "/metrics" | "/healthz") => Answer::plain("405 Method Not Allowed", "GET only"),
        _ => Answer::plain("404 Not Found", "only /metrics and /healthz"),
    };
    Route::Answer(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(received: &str) -> Option<&'static str> {
        match parse(received.as_bytes()) {
            Request::Whole(Route::Answer(a)) => Some(a.status),
            _ => None,
        }
    }

    #[test]
    fn a_scrape_asks_its_format() {
        let openmetrics =
            "GET /metrics?x=1 HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n";
        assert!(matches!(
            parse(openmetrics.as_bytes()),
            Request::Whole(Route::Scrape(Format::OpenMetrics))
        ));
        assert!(matches!(
            parse(b"GET /metrics HTTP/1.0\r\n\r\n"),
            Request::Whole(Route::Scrape(Format::Text))
        ));
    }

    #[test]
    fn refusals_keep_their_status() {
        assert_eq!(status("GET /healthz HTTP/1.0\r\n\r\n"), Some("200 OK"));
        assert_eq!(
            status("POST /metrics HTTP/1.0\r\n\r\n"),
            Some("405 Method Not Allowed")
        );
        assert_eq!(status("GET /x HTTP/1.0\r\n\r\n"), Some("404 Not Found"));
        assert_eq!(
            status("GET /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\n"),
            Some("413 Content Too Large")
        );
        assert_eq!(status("NOT HTTP\r\n\r\n"), Some("400 Bad Request"));
        let huge = format!("GET /metrics HTTP/1.0\r\nX: {}", "a".repeat(MAX_REQUEST));
        assert_eq!(status(&huge), Some("431 Request Header Fields Too Large"));
        assert!(matches!(
            parse(b"GET /metrics HTTP/1.0\r\nX: a"),
            Request::Partial
        ));
    }
}
