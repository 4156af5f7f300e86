#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! The HTML page in a real browser: headless Chromium loads it from a
//! loopback server, and the test checks what the browser built. The page
//! paints with its tables, a hostile spec's markup executes nothing (no
//! script element, no event handler, no request but the page itself), and
//! every internal link lands on an element.
//!
//! Needs `/usr/bin/chromium` (`apt-get install chromium`; `.ci/run` installs
//! it). Without it the tests say so on stderr and pass.

mod docs_support;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use docs_support::{assert_inert_and_linked, attribute_values, internal_links, pages};

const CHROMIUM: &str = "/usr/bin/chromium";
/// A liveness bound for one browser run, not a performance assertion.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(120);

fn chromium() -> Option<PathBuf> {
    let path = Path::new(CHROMIUM);
    if path.exists() {
        Some(path.to_owned())
    } else {
        // Straight to the stream: the harness captures `eprintln!`, and a
        // skip must show in every run.
        let _ = writeln!(
            std::io::stderr(),
            "skipped: {CHROMIUM} not found; install Debian's chromium to run the browser tests"
        );
        None
    }
}

/// Runs headless Chromium with `args` and a fresh profile, returning its
/// stdout; killed (and the test failed) after [`BROWSER_TIMEOUT`].
fn run_chromium(binary: &Path, args: &[String]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(binary)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium exited with {status}");
            break;
        }
        if started.elapsed() > BROWSER_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within {BROWSER_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

/// Serves `page` at `/` on a loopback port (404 for anything else) and
/// records the request line of every request that reaches it.
struct PageServer {
    url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

impl PageServer {
    fn start(page: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        // The thread ends with the test process; it only ever answers.
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                if let Some(line) = serve_one(stream, &page) {
                    seen.lock().unwrap().push(line);
                }
            }
        });
        PageServer { url, requests }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve_one(stream: TcpStream, page: &str) -> Option<String> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line).ok()?;
    let request_line = request_line.trim_end().to_owned();
    if request_line.is_empty() {
        return None;
    }
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 || header.trim_end().is_empty() {
            break;
        }
    }
    let (status, body) = if request_line.starts_with("GET / ") {
        ("200 OK", page)
    } else {
        ("404 Not Found", "")
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    Some(request_line)
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn hostile_page_executes_nothing_and_requests_nothing() {
    let Some(chromium) = chromium() else { return };
    let pages = pages("docs-hostile.yaml");
    let server = PageServer::start(pages.html.clone());
    let dom = run_chromium(
        &chromium,
        &[
            "--virtual-time-budget=2000".to_owned(),
            "--dump-dom".to_owned(),
            server.url.clone(),
        ],
    );
    assert!(dom.contains("</html>"), "no DOM dumped: {dom:.200}");
    // What the browser built, not what was sent: no script, no handler.
    assert_inert_and_linked(&dom, "DOM of docs-hostile");
    assert_eq!(count(&dom.to_ascii_lowercase(), "<script"), 0);
    assert_eq!(count(&dom.to_ascii_lowercase(), "<img"), 0);
    // The payloads are there, as text.
    assert!(dom.contains("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(dom.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(dom.contains("{{ 7*7 }}"));
    // Every table row of the page survived parsing.
    assert_eq!(count(&dom, "<tr"), count(&pages.html, "<tr"));
    // Nothing but the page itself was requested.
    assert_eq!(server.requests(), ["GET / HTTP/1.1"]);
}

#[test]
fn page_paints_with_its_tables_and_resolves_its_links() {
    let Some(chromium) = chromium() else { return };
    let pages = pages("payments-clean.yaml");
    let server = PageServer::start(pages.html.clone());
    let dom = run_chromium(&chromium, &["--dump-dom".to_owned(), server.url.clone()]);
    assert_inert_and_linked(&dom, "DOM of payments-clean");
    let ids = attribute_values(&dom, "id");
    for link in internal_links(&pages.html) {
        assert!(ids.contains(&link), "#{link} does not resolve in the DOM");
    }
    // The endpoint tables and the worked schedule, row by row.
    assert_eq!(count(&dom, "<table"), count(&pages.html, "<table"));
    assert!(count(&dom, "<tr") >= 20, "{} rows", count(&dom, "<tr"));
    assert!(dom.contains(r#"<tr id="op-createtransfer">"#));
    assert!(dom.contains("20.05 s"));

    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("page.png");
    run_chromium(
        &chromium,
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1280,2000".to_owned(),
            server.url.clone(),
        ],
    );
    let image = std::fs::read(&png).unwrap();
    assert!(image.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(
        image.len() > 20_000,
        "a {}-byte screenshot paints nothing",
        image.len()
    );
    // Both loads were of the page; nothing else was fetched.
    assert!(
        server.requests().iter().all(|r| r == "GET / HTTP/1.1"),
        "{:?}",
        server.requests()
    );
}
