//! The C interface against NCCL's official `nccl.h` (2.28.9, installed by `./x setup`): a C
//! program compiled with `cc` and linked with `-lnccl` against this library checks every enum
//! value, size and offset against the Rust definitions, that every function of the header is
//! exported (under its `pnccl` name too), the calls that need no GPU, and that creating a
//! communicator without a GPU fails cleanly (an error and a message, no crash, no hang); with a
//! GPU, a world of one is created, queried and destroyed.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mscclpp_nccl::abi::{self, ncclConfig_t, ncclResult_t};
use mscclpp_nccl::table::TABLE;

mod common;
use common::library;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The official header's folder, or `None` (the test then says why it skips; CI, which sets
/// `MSCCLPP_RS_REQUIRE_PTXAS=1`, never skips).
fn include() -> Option<PathBuf> {
    let dir = std::env::var_os("MSCCLPP_RS_NCCL_INCLUDE")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv-tools/nccl-2.28.9/include"));
    if dir.join("nccl.h").exists() {
        return Some(dir);
    }
    let why = format!("{}/nccl.h not found (run ./x setup)", dir.display());
    assert!(std::env::var("MSCCLPP_RS_REQUIRE_PTXAS").as_deref() != Ok("1"), "{why}");
    eprintln!("SKIPPED: the C interface test: {why}");
    None
}

/// Every function the official header declares (from its text: `ncclResult_t  ncclName(`, and
/// the functions returning `const char*` or `void`), with their `pnccl` forms.
fn header_functions(header: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in header.lines() {
        let t = line.trim_start();
        let rest = ["ncclResult_t", "const char*", "void", "__attribute__"]
            .iter()
            .find_map(|p| t.strip_prefix(p))
            .map(str::trim_start);
        let Some(rest) = rest else { continue };
        let named = |n: &&str| (n.starts_with("nccl") || n.starts_with("pnccl")) && rest.contains('(');
        if let Some(name) = rest.split('(').next().filter(named) {
            let name = name.trim();
            if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                out.insert(name.to_string());
            }
        }
    }
    out
}

#[test]
fn the_official_header_compiles_links_and_agrees() {
    let Some(include) = include() else { return };
    let header = std::fs::read_to_string(include.join("nccl.h")).unwrap();
    let declared_all = header_functions(&header);
    let declared: BTreeSet<String> = declared_all.iter().filter(|n| n.starts_with("nccl")).cloned().collect();
    assert!(declared.len() >= 40, "parsed only {declared:?}");
    for n in &declared {
        assert!(declared_all.contains(&format!("p{n}")), "nccl.h declares {n} without p{n}");
    }
    let ours: BTreeSet<String> = TABLE.iter().map(|(n, _)| n.to_string()).collect();
    let missing: Vec<_> = declared.difference(&ours).collect();
    assert!(missing.is_empty(), "functions of nccl.h missing from the table: {missing:?}");

    // The library under NCCL's names, for -lnccl and the loader.
    let work = std::env::temp_dir().join(format!("mscclpp-nccl-abi-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let lib = library();
    for name in ["libnccl.so", "libnccl.so.2"] {
        std::os::unix::fs::symlink(&lib, work.join(name)).unwrap();
    }
    // Every function of the table (the device API's too, which nccl.h does not declare) and its
    // profiling name: the link fails if one is not exported.
    let mut fns = String::from("#include <stddef.h>\n");
    for (name, _) in TABLE {
        for n in [name.to_string(), format!("p{name}")] {
            if !declared_all.contains(&n) {
                fns.push_str(&format!("extern void {n}(void);\n"));
            }
        }
    }
    let refs: Vec<String> = TABLE.iter().flat_map(|(n, _)| [format!("(void *){n}"), format!("(void *)p{n}")]).collect();
    fns.push_str(&format!("static void *FUNCTIONS[] = {{ {} }};\n", refs.join(", ")));
    std::fs::write(work.join("functions.h"), fns).unwrap();
    let c_dir = std::env::var_os("MSCCLPP_RS_NCCL_C")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c"));
    let exe = work.join("abi");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .arg(c_dir.join("abi.c"))
        .arg("-I")
        .arg(&include)
        .arg("-I")
        .arg(c_dir.join("stub"))
        .arg("-I")
        .arg(&work)
        .args(["-Wall", "-Werror", "-Wno-deprecated-declarations", "-o"])
        .arg(&exe)
        .arg("-L")
        .arg(&work)
        .arg("-lnccl")
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(built.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&built.stderr));

    let started = Instant::now();
    let run =
        Command::new(&exe).env("LD_LIBRARY_PATH", &work).env("MSCCLPP_RS_BOOTSTRAP_TIMEOUT", "20").output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "the C program failed ({:?}):\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(60), "the C program took {:?}", started.elapsed());
    assert!(stdout.ends_with("done\n"), "{stdout}");
    let mut value = HashMap::new();
    let mut calls = HashMap::new();
    let mut messages = HashMap::new();
    for line in stdout.lines() {
        let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
        match kind {
            "value" | "size" | "offset" => {
                let (k, v) = rest.rsplit_once(' ').unwrap();
                value.insert(format!("{kind} {k}"), v.parse::<i64>().unwrap());
            }
            "call" => {
                let (k, v) = rest.rsplit_once(' ').unwrap();
                calls.insert(k.to_string(), v.to_string());
            }
            "message" => {
                let (k, v) = rest.split_once(") ").map(|(a, b)| (format!("{a})"), b)).unwrap_or((rest.into(), ""));
                messages.insert(k, v.to_string());
            }
            _ => {}
        }
    }
    let v = |k: &str| *value.get(k).unwrap_or_else(|| panic!("{k} not printed:\n{stdout}"));

    // Result codes, types, reductions: every value the header defines against ours.
    for r in ncclResult_t::ALL {
        assert_eq!(v(&format!("value {r:?}")), r as i64, "{r:?}");
    }
    assert_eq!(v("value ncclNumResults"), abi::NUM_RESULTS as i64);
    let types = [
        ("ncclInt8", 0),
        ("ncclChar", 0),
        ("ncclUint8", 1),
        ("ncclInt32", 2),
        ("ncclInt", 2),
        ("ncclUint32", 3),
        ("ncclInt64", 4),
        ("ncclUint64", 5),
        ("ncclFloat16", 6),
        ("ncclHalf", 6),
        ("ncclFloat32", 7),
        ("ncclFloat", 7),
        ("ncclFloat64", 8),
        ("ncclDouble", 8),
        ("ncclBfloat16", 9),
        ("ncclFloat8e4m3", 10),
        ("ncclFloat8e5m2", 11),
    ];
    for (name, i) in types {
        let ours = abi::DataType::ALL[i as usize];
        assert_eq!(v(&format!("value {name}")), ours.raw() as i64, "{name} is {ours:?}");
    }
    assert_eq!(v("value ncclNumTypes"), abi::NUM_TYPES as i64);
    for (name, op) in [("ncclSum", 0), ("ncclProd", 1), ("ncclMax", 2), ("ncclMin", 3), ("ncclAvg", 4)] {
        let ours = mscclpp_nccl_device::ReduceOp::from_u32(op).unwrap();
        assert_eq!(v(&format!("value {name}")), ours as i64, "{name}");
    }
    assert_eq!(v("value ncclNumOps"), abi::NUM_OPS as i64);
    assert_eq!(v("value ncclMaxRedOp"), abi::MAX_RED_OP as i64);
    assert_eq!(v("value ncclScalarDevice"), abi::SCALAR_DEVICE as i64);
    assert_eq!(v("value ncclScalarHostImmediate"), abi::SCALAR_HOST_IMMEDIATE as i64);
    assert_eq!(v("value NCCL_VERSION_CODE"), abi::NCCL_VERSION_CODE as i64);
    assert_eq!(
        (v("value NCCL_MAJOR"), v("value NCCL_MINOR"), v("value NCCL_PATCH")),
        (abi::NCCL_VERSION.0 as i64, abi::NCCL_VERSION.1 as i64, abi::NCCL_VERSION.2 as i64)
    );
    assert_eq!(v("value NCCL_UNIQUE_ID_BYTES"), abi::UNIQUE_ID_BYTES as i64);
    assert_eq!(v("value NCCL_CONFIG_UNDEF_INT"), abi::CONFIG_UNDEF_INT as i64);
    assert_eq!(v("value NCCL_SPLIT_NOCOLOR"), abi::SPLIT_NOCOLOR as i64);

    // Layouts.
    assert_eq!(v("size ncclUniqueId"), std::mem::size_of::<abi::ncclUniqueId>() as i64);
    assert_eq!(v("size ncclConfig_t"), std::mem::size_of::<ncclConfig_t>() as i64);
    assert_eq!(v("size ncclSimInfo_t"), std::mem::size_of::<abi::ncclSimInfo_t>() as i64);
    assert_eq!(v("size ncclResult_t"), std::mem::size_of::<ncclResult_t>() as i64);
    assert_eq!(v("size ncclRedOp_t"), 4);
    assert_eq!(v("size ncclDataType_t"), 4);
    macro_rules! offsets {
        ($($f:ident),*) => { $(
            assert_eq!(
                v(concat!("offset ncclConfig_t.", stringify!($f))),
                std::mem::offset_of!(ncclConfig_t, $f) as i64,
                stringify!($f)
            );
        )* };
    }
    offsets!(
        size,
        magic,
        version,
        blocking,
        cgaClusterSize,
        minCTAs,
        maxCTAs,
        netName,
        splitShare,
        trafficClass,
        commName,
        collnetEnable,
        CTAPolicy,
        shrinkShare,
        nvlsCTAs,
        nChannelsPerNetPeer,
        nvlinkCentricSched
    );
    assert_eq!(v("offset ncclSimInfo_t.estimatedTime"), std::mem::offset_of!(abi::ncclSimInfo_t, estimatedTime) as i64);
    let init = ncclConfig_t::default();
    assert_eq!(v("value c.magic"), init.magic as i64);
    assert_eq!(v("value c.version"), init.version as i64);
    assert_eq!(v("value c.size"), init.size as i64);

    // Every function linked (the program counts the non-null addresses it took).
    let functions = stdout.lines().find_map(|l| l.strip_prefix("functions ")).unwrap();
    assert_eq!(functions.parse::<usize>().unwrap(), 2 * TABLE.len());

    // The calls.
    let call = |k: &str| calls.get(k).unwrap_or_else(|| panic!("call {k} not printed:\n{stdout}")).clone();
    let code = |r: ncclResult_t| (r as i32).to_string();
    assert_eq!(call("ncclGetVersion"), "0");
    assert_eq!(v("value version"), abi::NCCL_VERSION_CODE as i64);
    assert_eq!(call("ncclGetVersion(NULL)"), code(ncclResult_t::ncclInvalidArgument));
    for r in ncclResult_t::ALL {
        let line = format!("text {} {}", r as i32, r.text().trim_end_matches('\0'));
        assert!(stdout.lines().any(|l| l == line), "missing {line:?}");
    }
    assert!(stdout.lines().any(|l| l == "text 8 unknown result code"));
    assert_eq!(call("ncclGetUniqueId"), "0");
    for k in ["ncclCommCount(NULL)", "ncclCommCount(garbage)", "ncclAllReduce(NULL comm)"] {
        assert_eq!(call(k), code(ncclResult_t::ncclInvalidArgument), "{k}");
    }
    assert_eq!(call("ncclCommInitRank(rank 2 of 2)"), code(ncclResult_t::ncclInvalidArgument));
    assert!(messages["ncclCommInitRank(rank 2 of 2)"].contains("rank 2 is not in 0..2"), "{messages:?}");
    assert_eq!(call("ncclCommInitRank(foreign id)"), code(ncclResult_t::ncclInvalidArgument));
    assert!(messages["ncclCommInitRank(foreign id)"].contains("another NCCL"), "{messages:?}");
    assert_eq!(call("ncclGroupEnd(unopened)"), code(ncclResult_t::ncclInvalidUsage));
    for k in ["ncclGroupStart", "ncclGroupStart(nested)", "ncclGroupEnd(nested)", "ncclGroupEnd"] {
        assert_eq!(call(k), "0", "{k}");
    }
    let init = call("ncclCommInitRankConfig(1 rank)");
    if mscclpp_host::gpu::devices().is_ok_and(|d| !d.is_empty()) {
        assert_eq!(init, "0", "{stdout}");
        let q = stdout.lines().find_map(|l| l.strip_prefix("query ")).unwrap();
        assert!(q.starts_with("1 0 "), "{q}");
        assert_eq!(call("ncclCommDestroy"), "0");
    } else {
        // No GPU: a clean error naming why, and no communicator.
        assert_eq!(init, code(ncclResult_t::ncclUnhandledCudaError), "{stdout}");
        let m = &messages["ncclCommInitRankConfig(1 rank)"];
        assert!(m.contains("driver") || m.contains("device"), "{m}");
        assert!(stdout.contains("comm null"));
    }
    let _ = std::fs::remove_dir_all(&work);
}
