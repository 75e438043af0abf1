//! The admin port's HTTP, as little as reading it needs: one HTTP/1.0 request per connection,
//! read to close, so no HTTP client library (or async runtime) is linked for a few pages.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// `GET path` from an admin listener: the body of a 200, an error naming the status otherwise.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    http_get_as(addr, path, None)
}

/// [`http_get`] with an `Authorization` header value (`Basic ...`), for a broker whose admin
/// port asks for a login (a users file).
pub fn http_get_as(addr: SocketAddr, path: &str, authorization: Option<&str>) -> std::io::Result<String> {
    match http_request_as(addr, "GET", path, authorization)? {
        (200, body) => Ok(body),
        (status, body) => Err(std::io::Error::other(format!("GET {path}: status {status}: {}", body.trim()))),
    }
}

/// `METHOD path` over HTTP/1.0 to `addr`: the status and the body, whatever the status.
pub fn http_request(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    http_request_as(addr, method, path, None)
}

/// [`http_request`] with an `Authorization` header value.
pub fn http_request_as(
    addr: SocketAddr,
    method: &str,
    path: &str,
    authorization: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let login = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    write!(stream, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n{login}\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((response.as_str(), ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok());
    match status {
        Some(status) => Ok((status, body.to_string())),
        None => {
            Err(std::io::Error::other(format!("{method} {path}: {}", head.lines().next().unwrap_or("no response"))))
        }
    }
}
