//! Collects every error of one attribute so a user sees all of them in one build (serde_derive's
//! `Ctxt` pattern). Dropping a context that was never checked panics: no error is lost.

use std::cell::RefCell;
use std::fmt::Display;

use proc_macro2::Span;
use quote::ToTokens;

/// The errors found so far.
pub struct Ctxt {
    errors: RefCell<Option<Vec<syn::Error>>>,
}

impl Ctxt {
    pub fn new() -> Self {
        Ctxt {
            errors: RefCell::new(Some(Vec::new())),
        }
    }

    /// An error at `span`, with a `help:` line that says what to write instead.
    pub fn error(&self, span: Span, msg: impl Display, help: impl Display) {
        self.push(syn::Error::new(span, format!("{msg}\nhelp: {help}")));
    }

    /// An error spanning all of `tokens`, with a `help:` line.
    pub fn error_spanned(&self, tokens: impl ToTokens, msg: impl Display, help: impl Display) {
        self.push(syn::Error::new_spanned(tokens, format!("{msg}\nhelp: {help}")));
    }

    /// A syntax error from syn.
    pub fn syn_error(&self, err: syn::Error) {
        self.push(err);
    }

    fn push(&self, err: syn::Error) {
        self.errors
            .borrow_mut()
            .as_mut()
            .expect("Ctxt used after check")
            .push(err);
    }

    /// How many errors have been reported so far.
    pub fn count(&self) -> usize {
        self.errors.borrow().as_ref().map_or(0, Vec::len)
    }

    /// Consume the context: all errors combined, if any.
    pub fn check(self) -> syn::Result<()> {
        let errors = self.errors.borrow_mut().take().expect("Ctxt checked twice");
        let mut errors = errors.into_iter();
        let Some(mut combined) = errors.next() else {
            return Ok(());
        };
        for rest in errors {
            combined.combine(rest);
        }
        Err(combined)
    }
}

impl Drop for Ctxt {
    fn drop(&mut self) {
        if !std::thread::panicking() && self.errors.borrow().is_some() {
            panic!("effect-tool-macros: an error context was dropped without being checked");
        }
    }
}
