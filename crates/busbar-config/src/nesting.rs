//! How deep steps nest, counted through the sequences they run, and sequences that run
//! themselves.
//!
//! Layout: [`check`] reports both problems with their paths; [`build_order`] gives the order
//! in which the engine builds named sequences (each after the ones it runs), so building never
//! follows a chain of references. Both walk the graph of sequence references without
//! recursion (Tarjan's algorithm with an explicit stack): a config may hold thousands of
//! sequences, and a walk that recursed once per reference would overflow the stack that a
//! reload runs on. Recursion is left only inside one step list, whose depth the YAML parser
//! bounds.

use std::collections::BTreeMap;

use crate::{line_of, ConfigError, LoadedConfig, Spanned, StepConfig};

/// The deepest level a step may run at. A step of a proxy's `in`, `out` or `on_error` is at
/// level 1; a step in a `route` case, a `scatter_gather` branch or a sequence that a step at
/// level N runs is at level N + 1. Each level costs stack on the worker thread that runs a
/// request (most for `scatter_gather`), and the worker's stack is fixed: a debug build
/// overflows at about 50 levels of `scatter_gather` steps, a release build at several times
/// that, so 32 leaves room for what the deepest step itself needs.
pub const MAX_NESTING: usize = 32;

/// The graph of sequence references: by sequence, in key order.
struct Graph<'a> {
    names: Vec<&'a str>,
    index: BTreeMap<&'a str, usize>,
    /// The references of each sequence's steps (at any depth), known sequences only.
    edges: Vec<Vec<(usize, &'a Spanned<String>)>>,
}

impl<'a> Graph<'a> {
    fn new(sequences: &'a BTreeMap<String, Vec<StepConfig>>) -> Self {
        let names: Vec<&str> = sequences.keys().map(String::as_str).collect();
        let index: BTreeMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let edges = sequences
            .values()
            .map(|steps| {
                let mut out = Vec::new();
                refs(steps, &mut |r| {
                    if let Some(&to) = index.get(r.value.as_str()) {
                        out.push((to, r));
                    }
                });
                out
            })
            .collect();
        Graph {
            names,
            index,
            edges,
        }
    }

    /// The strongly connected components, each after every component it reaches (Tarjan's
    /// algorithm, iterative).
    fn components(&self) -> Vec<Vec<usize>> {
        const UNSEEN: usize = usize::MAX;
        let n = self.names.len();
        let mut order = vec![UNSEEN; n];
        let mut low = vec![0; n];
        let mut on_stack = vec![false; n];
        let mut stack = Vec::new();
        let mut out = Vec::new();
        let mut next = 0;
        // (node, index of the next edge to follow)
        let mut walk: Vec<(usize, usize)> = Vec::new();
        for root in 0..n {
            if order[root] != UNSEEN {
                continue;
            }
            walk.push((root, 0));
            order[root] = next;
            low[root] = next;
            next += 1;
            stack.push(root);
            on_stack[root] = true;
            while let Some(&mut (v, ref mut e)) = walk.last_mut() {
                if let Some(&(w, _)) = self.edges[v].get(*e) {
                    *e += 1;
                    if order[w] == UNSEEN {
                        order[w] = next;
                        low[w] = next;
                        next += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        walk.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(order[w]);
                    }
                    continue;
                }
                walk.pop();
                if let Some(&(parent, _)) = walk.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == order[v] {
                    let mut component = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        component.push(w);
                        if w == v {
                            break;
                        }
                    }
                    component.sort_unstable();
                    out.push(component);
                }
            }
        }
        out
    }

    /// True when the sequences of `component` run one another (or the one runs itself).
    fn is_cycle(&self, component: &[usize]) -> bool {
        match component {
            [one] => self.edges[*one].iter().any(|(to, _)| to == one),
            _ => true,
        }
    }
}

/// Calls `found` with every `sequence` reference in `steps`, nested steps included.
fn refs<'a>(steps: &'a [StepConfig], found: &mut impl FnMut(&'a Spanned<String>)) {
    for s in steps {
        if let StepConfig::Sequence(n) = s {
            found(n);
        }
        for (_, children) in s.children() {
            refs(children, found);
        }
    }
}

/// How deep one step list nests: the level of its deepest step (0 for none), and the first
/// sequence on the way there. `depth_of` gives a known sequence's own depth (0 for one not
/// measured: unknown, or part of a cycle).
fn list_depth<'a>(
    steps: &'a [StepConfig],
    depth_of: &impl Fn(&str) -> usize,
) -> (usize, Option<&'a str>) {
    let mut deepest = (0, None);
    for s in steps {
        let here = step_depth(s, depth_of);
        if here.0 > deepest.0 {
            deepest = here;
        }
    }
    deepest
}

fn step_depth<'a>(
    step: &'a StepConfig,
    depth_of: &impl Fn(&str) -> usize,
) -> (usize, Option<&'a str>) {
    let mut below = match step {
        StepConfig::Sequence(n) => (depth_of(&n.value), Some(n.value.as_str())),
        _ => (0, None),
    };
    for (_, children) in step.children() {
        let d = list_depth(children, depth_of);
        if d.0 > below.0 {
            below = d;
        }
    }
    (below.0 + 1, below.1)
}

/// Every named sequence, each after the sequences it runs (the sequences of a cycle in no
/// particular order among themselves): building them in this order never follows a reference
/// to a sequence not built yet, except around a cycle.
pub fn build_order(sequences: &BTreeMap<String, Vec<StepConfig>>) -> Vec<&str> {
    let graph = Graph::new(sequences);
    graph
        .components()
        .into_iter()
        .flatten()
        .map(|i| graph.names[i])
        .collect()
}

/// Sequences that run themselves (directly or through others), and step lists that nest
/// deeper than [`MAX_NESTING`] levels counting the sequences they run: each at its path.
pub fn check(loaded: &LoadedConfig) -> Vec<ConfigError> {
    let cfg = &loaded.config;
    let mut errors = Vec::new();
    let graph = Graph::new(&cfg.sequences);
    let components = graph.components();
    let n = graph.names.len();
    let mut cyclic = vec![false; n];
    for c in &components {
        if graph.is_cycle(c) {
            for &i in c {
                cyclic[i] = true;
            }
        }
    }
    // A sequence that runs itself would recurse forever on the first request: said once for
    // each reference that closes a cycle back to it, from the sequence that holds it.
    let mut component_of = vec![0; n];
    for (k, c) in components.iter().enumerate() {
        for &i in c {
            component_of[i] = k;
        }
    }
    for start in (0..n).filter(|&i| cyclic[i]) {
        for p in components[component_of[start]].iter().copied() {
            for (to, r) in &graph.edges[p] {
                if *to == start {
                    errors.push(loaded.error(
                        line_of(r),
                        format!("sequences.{}", graph.names[p]),
                        format!(
                            "sequence '{}' runs itself (through '{}')",
                            graph.names[start], graph.names[p]
                        ),
                    ));
                }
            }
        }
    }
    errors.sort_by_key(|e| e.line.unwrap_or(u64::MAX));
    // Depths, each sequence after those it runs; a sequence in a cycle is not measured.
    let mut depth = vec![0usize; n];
    let mut via: Vec<Option<usize>> = vec![None; n];
    for c in &components {
        let [i] = c.as_slice() else { continue };
        if cyclic[*i] {
            continue;
        }
        let depth_of = |name: &str| graph.index.get(name).map_or(0, |&j| depth[j]);
        let (d, first) = list_depth(&cfg.sequences[graph.names[*i]], &depth_of);
        depth[*i] = d;
        via[*i] = first.and_then(|f| graph.index.get(f).copied());
    }
    let depth_of = |name: &str| graph.index.get(name).map_or(0, |&j| depth[j]);
    let chain = |first: Option<&str>| -> String {
        let mut names = Vec::new();
        let mut at = first.and_then(|f| graph.index.get(f).copied());
        while let Some(i) = at {
            names.push(graph.names[i]);
            at = via[i];
        }
        match names.len() {
            0 => String::new(),
            1 => format!(", through sequence '{}'", names[0]),
            2..=5 => format!(", through sequences {}", quoted(&names)),
            _ => format!(
                ", through sequences {} → … → '{}' ({} sequences)",
                quoted(&names[..3]),
                names[names.len() - 1],
                names.len()
            ),
        }
    };
    for (name, p) in &cfg.proxies {
        for (key, list) in [
            ("in", &p.in_seq),
            ("out", &p.out_seq),
            ("on_error", &p.on_error),
        ] {
            // The first step of the list that goes too deep.
            let deep = list.iter().enumerate().find_map(|(i, s)| {
                let (d, first) = step_depth(s, &depth_of);
                (d > MAX_NESTING).then_some((i, s, d, first))
            });
            if let Some((i, s, d, first)) = deep {
                let line = match s {
                    StepConfig::Sequence(n) => line_of(n),
                    _ => None,
                };
                errors.push(loaded.error(
                    line,
                    format!("proxies.{name}.{key}[{i}].{}", s.kind()),
                    format!(
                        "steps nest {d} levels deep here{}; at most {MAX_NESTING} are allowed",
                        chain(first)
                    ),
                ));
            }
        }
    }
    // Sequences too deep that nothing runs (those that something runs are reported where they
    // are run from): they are built all the same.
    let mut referenced = vec![false; n];
    for edges in &graph.edges {
        for (to, _) in edges {
            referenced[*to] = true;
        }
    }
    for p in cfg.proxies.values() {
        for list in [&p.in_seq, &p.out_seq, &p.on_error] {
            refs(list, &mut |r| {
                if let Some(&i) = graph.index.get(r.value.as_str()) {
                    referenced[i] = true;
                }
            });
        }
    }
    for i in 0..n {
        if depth[i] > MAX_NESTING && !referenced[i] {
            errors.push(loaded.error(
                None,
                format!("sequences.{}", graph.names[i]),
                format!(
                    "steps nest {} levels deep here{}; at most {MAX_NESTING} are allowed",
                    depth[i],
                    chain(via[i].map(|v| graph.names[v]))
                ),
            ));
        }
    }
    errors
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(" → ")
}
