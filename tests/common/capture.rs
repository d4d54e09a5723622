//! Log capture: a tracing subscriber that writes every event of every target, at TRACE, into
//! memory, for the tests that search the logs for values that must never be there.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// Everything the subscriber of [`Capture::subscriber`] wrote.
#[derive(Clone, Default)]
pub struct Capture(Arc<Mutex<Vec<u8>>>);

impl Capture {
    /// A subscriber at TRACE, without colours, that writes here. Install it for the test
    /// (`tracing::subscriber::set_default`) or for the process (`set_global_default`).
    pub fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + 'static {
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(self.clone())
            .with_ansi(false)
            .finish()
    }

    /// The text written so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}
