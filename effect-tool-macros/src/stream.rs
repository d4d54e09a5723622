//! `#[tool(stream)]`: the return type of a tool that yields its progress as a stream, read from
//! the signature. Two forms are accepted, both written with `impl Stream`:
//!
//! - `-> impl Stream<Item = Result<Output, Error>>`: every item is progress, the last `Ok` is
//!   the output, the first `Err` ends the call;
//! - `-> Result<impl Stream<Item = Result<Output, Error>>, Error>`: the same, after a set-up that
//!   may fail before the first item (`?` works in the function's body).
//!
//! The item type is read as written, as the output type of a plain tool is: the recorded output
//! (its schema, the manifest's `# output:` line) is the item's `Ok` type.

use syn::{GenericArgument, PathArguments, Type, TypeParamBound};

/// What a `stream` tool returns.
pub struct Shape<'a> {
    /// `Result<impl Stream<..>, E>`: the function may fail before the stream starts.
    pub setup: bool,
    /// The stream's item as written (`Result<Step, DeployError>`).
    pub item: &'a Type,
}

/// The shape of a `stream` tool's return type, if it is written in one of the two forms.
pub fn shape(ret: &Type) -> Option<Shape<'_>> {
    if let Some(item) = stream_item(ret) {
        return Some(Shape { setup: false, item });
    }
    let Type::Path(path) = ret else { return None };
    let last = path.path.segments.last()?;
    if last.ident != "Result" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let first = args.args.iter().find_map(|a| match a {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    })?;
    stream_item(first).map(|item| Shape { setup: true, item })
}

/// The `Item` of `impl Stream<Item = X> (+ ...)`.
fn stream_item(ty: &Type) -> Option<&Type> {
    let bounds = match ty {
        Type::ImplTrait(it) => &it.bounds,
        Type::Paren(p) => return stream_item(&p.elem),
        Type::Group(g) => return stream_item(&g.elem),
        _ => return None,
    };
    bounds.iter().find_map(|b| {
        let TypeParamBound::Trait(t) = b else { return None };
        let seg = t.path.segments.last()?;
        if seg.ident != "Stream" {
            return None;
        }
        let PathArguments::AngleBracketed(args) = &seg.arguments else {
            return None;
        };
        args.args.iter().find_map(|a| match a {
            GenericArgument::AssocType(at) if at.ident == "Item" => Some(&at.ty),
            _ => None,
        })
    })
}

/// Whether the return type is written `impl Stream<...>` or `Result<impl Stream<...>, E>` (a
/// tool without `stream` that returns one is told to add it).
pub fn is_stream(ret: &Type) -> bool {
    shape(ret).is_some()
}
