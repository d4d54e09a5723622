#!/usr/bin/env python3
"""Check that the core crate's modules import only down the layer table, and that no two
modules of the workspace import each other (directly or through others).

Run from the workspace root: `python3 scripts/layers.py`. Exit 1 on a violation.
"""
import os, re, sys
from collections import defaultdict

def strip(src):
    # Remove comments and string literals (raw strings included) so doc links do not count.
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i); i = n if j < 0 else j
        elif src.startswith('/*', i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith('/*', i): depth += 1; i += 2
                elif src.startswith('*/', i): depth -= 1; i += 2
                else: i += 1
        elif c == 'r' and re.match(r'r#*"', src[i:i+10]) and (i == 0 or not (src[i-1].isalnum() or src[i-1] == '_')):
            m = re.match(r'r(#*)"', src[i:]); hashes = m.group(1)
            end = src.find('"' + hashes, i + len(m.group(0)))
            i = n if end < 0 else end + 1 + len(hashes); out.append('""')
        elif c == 'b' and src.startswith('b"', i) and (i == 0 or not (src[i-1].isalnum() or src[i-1] == '_')):
            i += 1
        elif c == '"':
            i += 1
            while i < n and src[i] != '"':
                i += 2 if src[i] == '\\' else 1
            i += 1; out.append('""')
        elif c == "'":
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", src[i:])
            if m: i += len(m.group(0)); out.append("' '")
            else: out.append(c); i += 1
        else:
            out.append(c); i += 1
    return ''.join(out)

def heads(code, prefix):
    """First path segment after each `prefix::` (use trees expanded)."""
    found = []
    for m in re.finditer(r'(?<![\w:])' + re.escape(prefix) + r'::', code):
        j = m.end()
        while code[j].isspace(): j += 1
        if code[j] == '{':
            depth, k, start = 1, j + 1, j + 1
            parts = []
            while depth:
                if code[k] == '{': depth += 1
                elif code[k] == '}':
                    depth -= 1
                    if depth == 0: parts.append(code[start:k])
                elif code[k] == ',' and depth == 1:
                    parts.append(code[start:k]); start = k + 1
                k += 1
            for p in parts:
                w = re.match(r'\s*(\w+)', p)
                if w and w.group(1) != 'self': found.append(w.group(1))
        else:
            w = re.match(r'(\w+)', code[j:])
            if w: found.append(w.group(1))
    return found

def module_of(rel, depth):
    parts = rel[:-3].split('/')
    if parts[-1] == 'mod': parts = parts[:-1]
    return '/'.join(parts[:depth]) if parts and parts != ['lib'] else 'lib'

def graph(src_root, depth=1):
    edges = defaultdict(set)
    for dirpath, _, files in os.walk(src_root):
        for f in files:
            if not f.endswith('.rs'): continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, src_root)
            me = module_of(rel, depth)
            code = strip(open(path).read())
            for h in heads(code, 'crate'):
                if h != me.split('/')[0]:
                    edges[me].add(h)
    return edges

def cycles(edges):
    found, color, stack = [], {}, []
    def visit(v):
        color[v] = 1; stack.append(v)
        for w in sorted(edges.get(v, ())):
            if color.get(w) == 1: found.append(stack[stack.index(w):] + [w])
            elif not color.get(w): visit(w)
        stack.pop(); color[v] = 2
    for v in sorted(edges):
        if not color.get(v): visit(v)
    return found

# The core crate's layers, lowest first. A module may use the layers before its own and the
# rooms of its own layer (without a circle), never a layer after it. Layers of one rank
# (`ops`, `adapters`) may not use each other.
LAYERS = {'value': 0, 'decide': 1, 'call': 2, 'store': 3, 'engine': 4, 'toolkit': 5,
          'ops': 6, 'adapters': 6, 'testing': 7}
# The crate root (lib.rs) and its deprecated shims (moved.rs) re-export from every layer.
ROOT_FILES = {'lib.rs', 'moved.rs'}

def root_names(src_root):
    """Names re-exported at the crate root, mapped to the layer they come from."""
    names = {}
    code = strip(open(os.path.join(src_root, 'lib.rs')).read())
    for m in re.finditer(r'pub use (\w+)::([^;]*);', code):
        for name in re.findall(r'\b(\w+)\b', m.group(2)):
            names[name] = m.group(1)
    return names

def resolve_super(code, parent, me):
    """Spell a room file's `super::` paths from the crate: at its top level `super::` is the
    layer (`parent`); inside an inline `mod x { ... }` (a test module) it is the room itself
    (`me`), and `super::super::` the layer."""
    out, depth_stack, depth, i = [], [], 0, 0
    pending_mod = False
    for m in re.finditer(r'\bmod\s+\w+\s*\{|[{}]|(?<![\w:])(?:super::)+', code):
        out.append(code[i:m.start()]); i = m.end(); tok = m.group(0)
        if tok.startswith('mod'):
            depth += 1; depth_stack.append(depth); out.append(tok)
        elif tok == '{':
            depth += 1; out.append(tok)
        elif tok == '}':
            if depth_stack and depth_stack[-1] == depth:
                depth_stack.pop()
            depth -= 1; out.append(tok)
        else:
            ups = tok.count('super::') - len(depth_stack)
            out.append(parent if ups >= 1 else me if ups == 0 else tok)
    out.append(code[i:])
    return ''.join(out)

def room_of(rel):
    """`engine/lead.rs` → `engine/lead`; `engine/mod.rs` → `engine/mod`; `store/sqlite/writer.rs` → `store/sqlite`."""
    parts = rel[:-3].split('/')
    return '/'.join(parts[:2]) if len(parts) > 1 else parts[0]

def room_of_path(layer, rest, rooms):
    """The room a path `crate::layer::rest...` names (the layer's mod.rs when `rest` is no room)."""
    if rest and f'{layer}/{rest}' in rooms:
        return f'{layer}/{rest}'
    return f'{layer}/mod'

def check_core(src_root):
    files = []
    for dirpath, _, fs in os.walk(src_root):
        for f in fs:
            if f.endswith('.rs'):
                files.append(os.path.relpath(os.path.join(dirpath, f), src_root))
    rooms = {room_of(f) for f in files}
    roots = root_names(src_root)
    # Names a layer's index (its mod.rs) re-exports from its rooms: `super::Store` in a room is
    # an import of the room that defines `Store`, not of the index.
    reexports = {}
    for layer in LAYERS:
        index = os.path.join(src_root, layer, 'mod.rs')
        if not os.path.exists(index):
            continue
        code = strip(open(index).read())
        for m in re.finditer(r'pub(?:\(crate\))? use (?:self::)?(\w+)::(\{[^;]*\}|\w+)\s*;', code):
            for name in re.findall(r'\b(\w+)\b', m.group(2)):
                if f'{layer}/{m.group(1)}' in rooms:
                    reexports[(layer, name)] = f'{layer}/{m.group(1)}'

    errors, edges = [], defaultdict(set)
    for rel in sorted(files):
        if rel in ROOT_FILES:
            continue
        layer = rel.split('/')[0]
        if layer not in LAYERS:
            errors.append(f'{rel}: not in a layer folder ({", ".join(LAYERS)})')
            continue
        me = room_of(rel)
        code = strip(open(os.path.join(src_root, rel)).read())
        # A layer's index re-exports its rooms: those lines are not imports of its own.
        if rel.endswith('/mod.rs') and rel.count('/') == 1:
            code = re.sub(r'\bpub(?:\([^)]*\))?\s+use\s+[^;]*;', '', code)
        # A room file's `super::x` is `crate::layer::x`; a layer's mod.rs names its rooms bare.
        depth = rel.count('/')
        if depth == 1 and not rel.endswith('/mod.rs'):
            code = resolve_super(code, f'crate::{layer}::', f'crate::{me.replace("/", "::")}::')
        if rel.endswith('/mod.rs') and depth == 1:
            children = re.findall(r'\bmod (\w+);', code)
            for child in children:
                if f'{layer}/{child}' in rooms:
                    code = re.sub(r'(?<![\w:])(?:self::)?' + child + r'::', f'crate::{layer}::{child}::', code)
        for m in re.finditer(r'(?<![\w:])crate::(\w+)(?:::(\w+))?', code):
            head, rest = m.group(1), m.group(2)
            if head in LAYERS:
                target_layer = head
                target = reexports.get((head, rest)) or room_of_path(head, rest, rooms)
            elif head in roots:
                target_layer = roots[head]; target = f'{target_layer}/(root name {head})'
            else:
                continue
            if LAYERS[target_layer] > LAYERS[layer] or (LAYERS[target_layer] == LAYERS[layer] and target_layer != layer):
                line = code.count('\n', 0, m.start()) + 1
                errors.append(f'{rel}:{line}: `{m.group(0)}`: layer `{layer}` may not use layer `{target_layer}`')
            if target_layer == layer and not target.startswith(f'{layer}/(root') and target != me:
                edges[me].add(target)
    return errors, edges


if __name__ == '__main__':
    errors = []
    core = 'effect-tool-core/src'
    layer_errors, edges = check_core(core)
    errors += layer_errors
    for c in cycles(edges):
        name = ' -> '.join(c)
        errors.append(f'{core}: import circle: {name}')
    for crate in ('effect-tool-macros/src', 'effect-tool-cli/src'):
        for c in cycles(graph(crate)):
            errors.append(f'{crate}: import circle: {" -> ".join(c)}')
    for e in errors:
        print(e)
    if errors:
        print(f'{len(errors)} problem(s): see ARCHITECTURE.md, "Code map", for the layers.')
        sys.exit(1)
    print('layers: every import points down; no import circle.')
