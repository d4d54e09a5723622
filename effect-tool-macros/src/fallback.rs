//! What is emitted when a declaration has errors: the errors, the function as written (so the
//! rest of the crate type-checks and IDEs keep working) and, when the signature is sound, a
//! minimal tool type (class, name and whether it streams) so code that names the tool does not fail with a
//! cascade of secondary errors.

use proc_macro2::TokenStream;

use crate::ast::ToolFn;
use crate::attr::ToolAttrs;
use crate::expand::{self, Target};

pub fn emit(
    errors: syn::Error,
    original: TokenStream,
    func: &ToolFn,
    attrs: ToolAttrs,
    target: &Target,
) -> TokenStream {
    let mut out = errors.to_compile_error();
    out.extend(original);
    // A stream returned without `stream` (or `stream` on something else) has no output type to
    // give the minimal tool: its errors are enough.
    let streams = func.ret.as_ref().is_some_and(crate::stream::is_stream);
    if func.sound && streams == attrs.stream.is_some() {
        let minimal = ToolAttrs {
            effect: attrs.effect,
            name: attrs.name,
            krate: attrs.krate,
            stream: attrs.stream,
            ..ToolAttrs::default()
        };
        out.extend(expand::tool(func, &minimal, target));
    }
    out
}
