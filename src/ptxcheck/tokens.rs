//! Whitespace- and punctuation-separated tokens of instruction text, shared by the PTX and SASS
//! checks (a check names whole tokens, never substrings).

/// The tokens of an instruction line or of an expected text: split at white space and at the
/// punctuation of operand lists (`,;{}[]()`), so `ld.acquire.sys.u64 %rd1, [%rd2];` is
/// `["ld.acquire.sys.u64", "%rd1", "%rd2"]`.
pub fn tokens(s: &str) -> Vec<&str> {
    s.split(|c: char| c.is_whitespace() || ",;{}[]()".contains(c)).filter(|t| !t.is_empty()).collect()
}

/// Whether one of `lines` (already tokenized) holds `want`'s tokens whole, in order and next to
/// each other: `st.release.sys.global.u64` matches that mnemonic only, not
/// `multimem.st.release.sys.global.u64`, and `DEPBAR.LE SB0, 0x3` needs the count as well.
pub fn holds(lines: &[Vec<&str>], want: &str) -> bool {
    let w = tokens(want);
    !w.is_empty() && lines.iter().any(|l| l.windows(w.len()).any(|win| win == w.as_slice()))
}

/// The tokenized lines of a text.
pub fn token_lines(text: &str) -> Vec<Vec<&str>> {
    text.lines().map(tokens).filter(|t| !t.is_empty()).collect()
}

/// Whether the PTX symbol `symbol` names the Rust function `name`: equal to it, or a mangled
/// path ending in it (`..._14mscclpp_device3ptx5print13print_failure`).
pub fn names(symbol: &str, name: &str) -> bool {
    symbol == name || symbol.ends_with(&format!("{}{name}", name.len()))
}
