//! Whether a code block appears in a source file, line for line: the check that documentation
//! examples are compiled code. One source for the xtask's README check and the harness's
//! device-doc check (`tests/doc_examples.rs` includes this file by `#[path]`).

/// A line with its indentation dropped and every run of spaces made one (rustfmt may align
/// trailing comments differently from a hand-written block).
pub fn normalize(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `block` appears in `file`: its lines in order, contiguous (after [`normalize`]),
/// where a block line starting with `// ...` stands for any number of lines.
pub fn contains_block(file: &str, block: &[&str]) -> bool {
    let file: Vec<String> = file.lines().map(normalize).collect();
    let block: Vec<String> = block.iter().map(|l| normalize(l)).filter(|l| !l.is_empty()).collect();
    let file: Vec<&String> = file.iter().filter(|l| !l.is_empty()).collect();
    let segments: Vec<&[String]> = block.split(|l| l.starts_with("// ...")).filter(|s| !s.is_empty()).collect();
    let Some((first, rest)) = segments.split_first() else { return true };
    let at = |from: usize, seg: &[String]| {
        (from..file.len()).find(|&i| file.len() - i >= seg.len() && seg.iter().zip(&file[i..]).all(|(a, b)| a == *b))
    };
    // The first segment may start anywhere; each later one somewhere after the one before.
    let mut start = 0;
    while let Some(i) = at(start, first) {
        let mut pos = Some(i + first.len());
        for seg in rest {
            pos = pos.and_then(|p| at(p, seg)).map(|j| j + seg.len());
        }
        if pos.is_some() {
            return true;
        }
        start = i + 1;
    }
    false
}
