//! The README's table of served, answered and refused functions is `table::TABLE`, row for row.

use std::collections::BTreeSet;

use mscclpp_nccl::table::{Disposition, TABLE};

#[test]
fn the_readme_table_is_the_code_table() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let row = |start: &str| -> BTreeSet<String> {
        let line = readme
            .lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("README has no table row starting with {start:?}"));
        let cells: Vec<&str> = line.split('|').collect();
        let names = cells.get(2).unwrap_or_else(|| panic!("README row {start:?} has no second cell"));
        names.split('`').skip(1).step_by(2).map(str::to_string).collect()
    };
    for (start, kind) in [
        ("| served (", Disposition::Served),
        ("| answered here", Disposition::Local),
        ("| refused on served", Disposition::Refused),
    ] {
        let code: BTreeSet<String> = TABLE.iter().filter(|(_, d)| *d == kind).map(|(n, _)| n.to_string()).collect();
        let text = row(start);
        assert_eq!(text, code, "README row {start:?} against table.rs ({kind:?})");
    }
}
