//! One HTTP/1.1 request over a fresh connection (`Connection: close`), for the tests of the
//! HTTP endpoints: the status, the headers (lower-case names) and the body (de-chunked). The
//! console's requests are in [`super::console`], MCP's in [`super::mcp`].

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An answer.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The status code (0 if the answer had no status line).
    pub status: u16,
    /// The headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
}

impl Answer {
    /// The body as JSON (`null` if it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_default()
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// `method path` with `headers` (`Name: value` lines) and `body`, after `Host` and
/// `Connection: close` (and `Content-Length` when there is a body).
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &str,
) -> std::io::Result<Answer> {
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for h in headers {
        text.push_str(h);
        text.push_str("\r\n");
    }
    if !body.is_empty() {
        text.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    text.push_str("\r\n");
    text.push_str(body);
    exchange(addr, &text).await
}

/// `raw` sent as it is (the request line, every header, the body: nothing added) over a fresh
/// connection, and the answer read to its end: for requests no client library would send.
pub async fn exchange(addr: SocketAddr, raw: &str) -> std::io::Result<Answer> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(raw.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked { dechunk(body) } else { body.to_owned() };
    Ok(Answer { status, headers, body })
}

/// `GET path`.
pub async fn get(addr: SocketAddr, path: &str) -> std::io::Result<Answer> {
    request(addr, "GET", path, &[], "").await
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// `s` percent-encoded for a query string.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
