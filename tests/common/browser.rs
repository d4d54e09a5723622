//! The console's pages in a real browser: headless Chromium (Debian's `chromium`) driven through
//! WebDriver (`chromedriver`, the `fantoccini` client), for every browser test of the console.
//!
//! [`browser`] finds the two programs (a test skips loudly without them, unless
//! `EFFECT_TOOL_REQUIRE_BROWSER=1`, as CI sets it, where it fails); [`start_driver`] starts
//! chromedriver; [`open_browser_at`] (or [`open_browser`]) opens a session; [`sign_in`],
//! [`shown_text`], [`act`] and [`open_record`] are what an operator does on a page.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};

/// chromedriver on a free port, killed on drop.
pub struct Driver {
    child: Child,
    pub port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The browser's two programs, or `None` (the test skips, unless CI requires them).
pub fn browser() -> Option<(String, String)> {
    // The full path: chromedriver wants the browser's binary as a path.
    let found = |names: &[&str]| {
        let path = std::env::var_os("PATH").unwrap_or_default();
        names.iter().find_map(|n| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(n))
                .find(|p| p.is_file())
                .map(|p| p.to_string_lossy().into_owned())
        })
    };
    let chromium = found(&["chromium", "chromium-browser", "google-chrome"]);
    let driver = found(&["chromedriver"]);
    match (chromium, driver) {
        (Some(c), Some(d)) => Some((c, d)),
        _ => {
            assert!(
                std::env::var_os("EFFECT_TOOL_REQUIRE_BROWSER").is_none(),
                "EFFECT_TOOL_REQUIRE_BROWSER is set but chromium or chromedriver is missing: apt-get install chromium chromium-driver"
            );
            eprintln!(
                "SKIPPED: the browser test needs chromium and chromedriver (apt-get install chromium chromium-driver)"
            );
            None
        }
    }
}

pub fn start_driver(program: &str) -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(program)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting chromedriver");
    let until = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < until, "chromedriver did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Driver { child, port }
}

/// A WebDriver session in headless Chromium, its window `width` px wide.
pub async fn open_browser_at(driver: &Driver, chromium: &str, width: u32) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": chromium,
            // Root in a container: no sandbox; no GPU; /dev/shm may be small.
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--no-first-run", format!("--window-size={width},1024")],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a WebDriver session in headless Chromium")
}

/// The text of the element `css`, once it is shown and has some (the page may show an element
/// before its script fills it in: on a loaded machine, the two are seen apart).
pub async fn shown_text(browser: &Client, css: &str) -> String {
    let until = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let el = browser
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(Locator::Css(&format!("{css}:not([hidden])")))
            .await
            .unwrap_or_else(|e| panic!("`{css}` never showed: {e}"));
        // The element may be replaced while it is read (the page re-renders): look again.
        if let Ok(text) = el.text().await
            && !text.is_empty()
        {
            return text;
        }
        assert!(
            std::time::Instant::now() < until,
            "`{css}` showed, and stayed empty for 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Click `id` and wait for the page's answer in `#message` (the page reloads after an action).
pub async fn act(browser: &Client, id: &str) -> String {
    browser.find(Locator::Id(id)).await.unwrap().click().await.unwrap();
    shown_text(browser, "#message").await
}

/// Open the list page and follow the link of the record under `key`.
pub async fn open_record(browser: &Client, base: &str, key: &str) {
    browser.goto(&format!("{base}/")).await.unwrap();
    let link = browser
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css(&format!("#records tbody tr[data-key=\"{key}\"] a")))
        .await
        .unwrap_or_else(|e| panic!("the list page never listed `{key}`: {e}"));
    link.click().await.unwrap();
    assert_eq!(shown_text(browser, "#record-key").await, key);
}

/// A WebDriver session in headless Chromium, 1280 px wide.
pub async fn open_browser(driver: &Driver, chromium: &str) -> Client {
    open_browser_at(driver, chromium, 1280).await
}

/// Open the console at `base` and sign in with `token`: the page asks for it and keeps it in
/// the tab; returns what the page then says of who is signed in.
pub async fn sign_in(browser: &Client, base: &str, token: &str) -> String {
    browser.goto(&format!("{base}/")).await.unwrap();
    shown_text(browser, "#signin-view").await;
    browser
        .find(Locator::Id("signin-token"))
        .await
        .unwrap()
        .send_keys(token)
        .await
        .unwrap();
    browser
        .find(Locator::Id("signin"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    shown_text(browser, "#whoami").await
}
