//! The web view (issue 44) in a real headless Chromium: `tidings net up topologies/web-5.toml`
//! (five brokers, one cell of two), then `web_view.py` drives the page of e3 with selenium
//! and Debian's chromium-driver: all brokers and links shown up, a publisher's rate on the links
//! that carry it, a cut link shown down within 2 s, a killed broker shown down, a screenshot.
//!
//! Skipped, saying so, where chromium, chromedriver or Python's selenium is missing; `.ci/run`
//! installs them and sets `TIDINGS_REQUIRE_BROWSER=1`, which turns a missing one into a failure.
//! The screenshot goes to the test's scratch directory, or to `docs/images/web-view.png` (the
//! README's) with `TIDINGS_UPDATE_SCREENSHOT=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step is a failed test

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tidings"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether the browser and its driver can run here; says why not otherwise.
fn browser_present() -> bool {
    let missing: Vec<&str> = [
        ("/usr/bin/chromium", Path::new("/usr/bin/chromium").exists()),
        ("/usr/bin/chromedriver", Path::new("/usr/bin/chromedriver").exists()),
        (
            "python3 with selenium",
            Command::new("python3")
                .args(["-c", "import selenium.webdriver"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success()),
        ),
    ]
    .into_iter()
    .filter(|(_, present)| !present)
    .map(|(what, _)| what)
    .collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var_os("TIDINGS_REQUIRE_BROWSER").is_some() {
        panic!("TIDINGS_REQUIRE_BROWSER is set but these are missing: {missing:?}");
    }
    eprintln!(
        "SKIPPED: missing {missing:?} (apt-get install chromium chromium-driver; python3 -m pip install selenium)"
    );
    false
}

/// Stops the network however the test ends.
struct Network {
    dir: tempfile::TempDir,
}

impl Drop for Network {
    fn drop(&mut self) {
        let _ = Command::new(bin()).args(["net", "down", "--dir"]).arg(self.dir.path()).output();
    }
}

/// Waits at most `timeout` for the driver script; past it, SIGTERM (the script closes its
/// browser on the way out) and, 5 s later, SIGKILL. Its exit status if it finished in time.
fn finish(child: &mut std::process::Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = tidings_testkit::send_signal(child.id(), tidings_testkit::Signal::Term);
    let grace = Instant::now();
    while grace.elapsed() < Duration::from_secs(5) {
        if child.try_wait().unwrap().is_some() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn the_web_view_shows_the_network_its_rates_a_cut_link_and_a_killed_broker_in_chromium() {
    if !browser_present() {
        return;
    }
    let _alone = tidings_testkit::one_at_a_time();
    let began = Instant::now();
    let network = Network { dir: tempfile::tempdir().unwrap() };
    let topology = repo().join("topologies/web-5.toml");
    let up = Command::new(bin())
        .args(["net", "up"])
        .arg(&topology)
        .args(["--faults", "--timeout", "30", "--dir"])
        .arg(network.dir.path())
        .output()
        .unwrap();
    assert!(up.status.success(), "net up failed: {}", String::from_utf8_lossy(&up.stderr));
    eprintln!("network up in {:.1} s", began.elapsed().as_secs_f64());

    let screenshot = match std::env::var_os("TIDINGS_UPDATE_SCREENSHOT") {
        Some(_) => repo().join("docs/images/web-view.png"),
        None => network.dir.path().join("web-view.png"),
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/web_view.py");
    let log_path = network.dir.path().join("web_view.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut driver = Command::new("python3")
        .arg(script)
        .arg(bin())
        .arg(network.dir.path())
        .arg("e3")
        .arg(&screenshot)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let status = finish(&mut driver, Duration::from_secs(50));
    eprintln!("{}", std::fs::read_to_string(&log_path).unwrap_or_default());
    assert!(status.is_some_and(|s| s.success()), "the browser's checks failed or did not finish (see above)");
    let png = std::fs::read(&screenshot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "the screenshot is not a picture of the page");
    eprintln!("whole test {:.1} s", began.elapsed().as_secs_f64());
}
