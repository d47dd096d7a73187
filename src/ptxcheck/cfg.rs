//! The control flow of a PTX kernel body: basic blocks, dominators, post-dominators.

use std::collections::BTreeMap;

use super::ptx::noreturn_funcs;
use super::tokens::{holds, tokens};

/// The control flow of a PTX kernel body: its instructions in basic blocks, with dominators and
/// post-dominators, for order checks that hold on every path (the text order of the blocks is
/// the compiler's layout, not program order; inside one block it is).
#[derive(Debug)]
pub struct Cfg {
    /// The instructions, in text order.
    pub ins: Vec<String>,
    /// The block of each instruction.
    block: Vec<usize>,
    /// `dom[b][a]`: block `a` is on every path from the entry to block `b`.
    dom: Vec<Vec<bool>>,
    /// `pdom[b][a]`: block `a` is on every path from block `b` to a `ret`.
    pdom: Vec<Vec<bool>>,
}

impl Cfg {
    /// Builds the graph of a `.entry` body (as [`super::entries`] returns it) in a module `ptx`: a call
    /// of a function the module declares `.noreturn` ends its path (the compiler places no
    /// branch after it, so the next block in the text is not its successor).
    pub fn of(ptx: &str, body: &str) -> Self {
        Self::new(body, &noreturn_funcs(ptx))
    }

    /// Builds the graph of a `.entry` body, calls of `noreturn` ending their paths.
    pub fn new(body: &str, noreturn: &[String]) -> Self {
        let mut ins = Vec::new();
        let mut block = Vec::new();
        let mut labels: BTreeMap<String, usize> = BTreeMap::new();
        // (first instruction, successors by label or fall-through)
        let mut starts: Vec<usize> = Vec::new();
        let mut new_block = true;
        for raw in body.lines() {
            let l = raw.trim();
            if l.is_empty() || l.starts_with("//") || l.starts_with(".reg") || l.starts_with('}') {
                continue;
            }
            if l.starts_with('{') && !l.starts_with("{ .reg") {
                continue;
            }
            if let Some(label) = l.strip_suffix(':') {
                labels.insert(label.to_string(), starts.len());
                new_block = true;
                continue;
            }
            if new_block {
                // An empty block (two labels in a row) simply shares the next one's start.
                starts.push(ins.len());
                new_block = false;
            }
            block.push(starts.len() - 1);
            ins.push(l.to_string());
            if Self::ends_path(l, noreturn) {
                new_block = true;
            }
        }
        // Labels right before the end (or before another label) point at the next block start.
        let n = starts.len();
        let mut succ = vec![Vec::new(); n];
        for b in 0..n {
            let last = if b + 1 < n { starts[b + 1] - 1 } else { ins.len() - 1 };
            let l = &ins[last];
            let op = Self::mnemonic(l);
            let guarded = l.starts_with('@');
            if op.starts_with("bra") {
                let target = tokens(l).last().copied().unwrap_or_default().to_string();
                if let Some(&t) = labels.get(&target) {
                    succ[b].push(t.min(n - 1));
                }
                if guarded && b + 1 < n {
                    succ[b].push(b + 1);
                }
            } else if Self::ends_path(l, noreturn) {
                if guarded && b + 1 < n {
                    succ[b].push(b + 1);
                }
            } else if b + 1 < n {
                succ[b].push(b + 1);
            }
        }
        let exits: Vec<bool> = (0..n)
            .map(|b| {
                let last = if b + 1 < n { starts[b + 1] - 1 } else { ins.len() - 1 };
                let op = Self::mnemonic(&ins[last]);
                op == "ret" || op == "exit"
            })
            .collect();
        let mut pred = vec![Vec::new(); n];
        for (b, ss) in succ.iter().enumerate() {
            for &s in ss {
                pred[s].push(b);
            }
        }
        let dom = Self::dominators(n, &pred, |b| b == 0);
        let pdom = Self::dominators(n, &succ, |b| exits[b]);
        Self { ins, block, dom, pdom }
    }

    /// Whether an instruction ends its block: a branch, `ret`, `exit`, `trap`, or a call of a
    /// function in `noreturn`.
    fn ends_path(l: &str, noreturn: &[String]) -> bool {
        let op = Self::mnemonic(l);
        op.starts_with("bra")
            || op == "ret"
            || op == "exit"
            || op == "trap"
            || (op.starts_with("call") && tokens(l).iter().any(|t| noreturn.iter().any(|f| f == t)))
    }

    /// The mnemonic of an instruction line, past a guard predicate.
    fn mnemonic(l: &str) -> &str {
        let t = tokens(l);
        t.into_iter().find(|t| !t.starts_with('@')).unwrap_or("")
    }

    /// Iterative (post-)dominator sets: `preds` are the edges walked back from `root` blocks.
    fn dominators(n: usize, preds: &[Vec<usize>], root: impl Fn(usize) -> bool) -> Vec<Vec<bool>> {
        let mut d: Vec<Vec<bool>> =
            (0..n).map(|b| if root(b) { (0..n).map(|a| a == b).collect() } else { vec![true; n] }).collect();
        let mut changed = true;
        while changed {
            changed = false;
            for b in (0..n).filter(|&b| !root(b)) {
                let mut new = vec![true; n];
                for &p in &preds[b] {
                    for a in 0..n {
                        new[a] &= d[p][a];
                    }
                }
                new[b] = true;
                if new != d[b] {
                    d[b] = new;
                    changed = true;
                }
            }
        }
        d
    }

    /// The indices of the instructions that hold `want` (whole tokens, as [`holds`]).
    pub fn find(&self, want: &str) -> Vec<usize> {
        self.ins.iter().enumerate().filter(|(_, l)| holds(&[tokens(l)], want)).map(|(i, _)| i).collect()
    }

    /// Whether instruction `a` is executed before instruction `b` on every path to `b`.
    pub fn dominates(&self, a: usize, b: usize) -> bool {
        let (ba, bb) = (self.block[a], self.block[b]);
        if ba == bb { a < b } else { self.dom[bb][ba] }
    }

    /// Whether instruction `a` is executed after instruction `b` on every path from `b` to a
    /// `ret`.
    pub fn post_dominates(&self, a: usize, b: usize) -> bool {
        let (ba, bb) = (self.block[a], self.block[b]);
        if ba == bb { a > b } else { self.pdom[bb][ba] }
    }

    /// Whether every instruction holding `later` has one holding `earlier` before it on every
    /// path (and there is at least one of each).
    pub fn always_before(&self, earlier: &str, later: &str) -> bool {
        let (e, l) = (self.find(earlier), self.find(later));
        !e.is_empty() && !l.is_empty() && l.iter().all(|&i| e.iter().any(|&j| self.dominates(j, i)))
    }

    /// Whether every instruction holding `earlier` has one holding `later` after it on every
    /// path to a `ret` (and there is at least one of each).
    pub fn always_after(&self, later: &str, earlier: &str) -> bool {
        let (e, l) = (self.find(earlier), self.find(later));
        !e.is_empty() && !l.is_empty() && e.iter().all(|&i| l.iter().any(|&j| self.post_dominates(j, i)))
    }

    /// The instructions of each basic block, in program order.
    pub fn blocks(&self) -> Vec<Vec<&str>> {
        let mut out: Vec<Vec<&str>> = Vec::new();
        for (i, l) in self.ins.iter().enumerate() {
            if out.len() <= self.block[i] {
                out.resize(self.block[i] + 1, Vec::new());
            }
            out[self.block[i]].push(l);
        }
        out
    }
}

/// Asserts that the only calls left in `kernel`'s instructions are the waits' cold paths: expiry
/// (`poll::expired`: print and trap) and abort (`abort::aborted`: print and exit).
pub fn assert_only_cold_wait_calls(kernel: &str, ins: &[String]) {
    let calls: Vec<_> = ins.iter().filter(|l| l.starts_with("call")).collect();
    assert!(
        calls.iter().all(|l| l.contains("poll7expired") || l.contains("abort7aborted")),
        "{kernel}: stray call in {calls:?}"
    );
}
