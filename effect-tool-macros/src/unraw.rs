//! An identifier as the model and the journal see it: without the `r#` of a raw identifier
//! (`r#type` is the field `type`). Every stage compares names this way, so it lives below them
//! all (thiserror keeps its `unraw` in a file of its own for the same reason).

/// `r#type` → `type`; any other identifier as written.
pub fn unraw(ident: &syn::Ident) -> String {
    let s = ident.to_string();
    s.strip_prefix("r#").map(str::to_owned).unwrap_or(s)
}
