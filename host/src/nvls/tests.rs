//! The guard, the setup sequence and the teardown, on the CPU (a recording fake driver).

use std::cell::RefCell;
use std::collections::HashMap;

use std::ffi::OsString;

use super::*;
use crate::error::{Error, Result};

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + use<> {
    let m: HashMap<String, OsString> = pairs.iter().map(|(k, v)| (k.to_string(), OsString::from(v))).collect();
    move |k| m.get(k).cloned()
}

fn env_os(pairs: &[(&str, OsString)]) -> impl Fn(&str) -> Option<OsString> + use<> {
    let m: HashMap<String, OsString> = pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    move |k| m.get(k).cloned()
}

/// The refusal's message (the variable is checked against the message: the message names it).
fn refusal(r: Result<MulticastPermit>) -> String {
    match r {
        Err(e @ Error::MulticastRefused { variable, .. }) => {
            let m = e.to_string();
            assert!(m.contains(variable), "the refusal names {variable}: {m}");
            m
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn guard_every_combination() {
    // Each disabling variable: unset, set to its "off" value, set to a value that keeps NVLS on.
    let nccl = [None, Some("0"), Some("1")];
    let nvshmem = [None, Some("1"), Some("0")];
    let torch = [None, Some("1"), Some("0")];
    let allow = [None, Some("1"), Some("0"), Some("yes"), Some(" 1 ")];
    let mut allowed = 0;
    for n in nccl {
        for s in nvshmem {
            for t in torch {
                for a in allow {
                    let mut pairs = Vec::new();
                    for (k, v) in [
                        ("NCCL_NVLS_ENABLE", n),
                        ("NVSHMEM_DISABLE_NVLS", s),
                        ("TORCH_SYMM_MEM_DISABLE_MULTICAST", t),
                        (ALLOW_VAR, a),
                    ] {
                        if let Some(v) = v {
                            pairs.push((k, v));
                        }
                    }
                    let disabled = n == Some("0") || s == Some("1") || t == Some("1");
                    let opted_in = a.is_some_and(|v| v.trim() == "1");
                    let r = multicast_allowed(env(&pairs));
                    if !disabled && opted_in {
                        assert!(r.is_ok(), "{pairs:?} should be allowed");
                        allowed += 1;
                    } else {
                        let m = refusal(r);
                        if n == Some("0") {
                            assert!(m.contains("NCCL_NVLS_ENABLE=0"), "{pairs:?}: {m}");
                        } else if s == Some("1") {
                            assert!(m.contains("NVSHMEM_DISABLE_NVLS=1"), "{pairs:?}: {m}");
                        } else if t == Some("1") {
                            assert!(m.contains("TORCH_SYMM_MEM_DISABLE_MULTICAST=1"), "{pairs:?}: {m}");
                        } else {
                            assert!(m.contains(ALLOW_VAR), "{pairs:?}: {m}");
                        }
                    }
                }
            }
        }
    }
    // NCCL unset/1 x NVSHMEM unset/0 x TORCH unset/0 x two spellings of the opt-in.
    assert_eq!(allowed, 2 * 2 * 2 * 2);
}

#[test]
fn guard_reads_other_spellings_conservatively() {
    for (k, v) in [
        ("NCCL_NVLS_ENABLE", "false"),
        ("NCCL_NVLS_ENABLE", " OFF "),
        ("NVSHMEM_DISABLE_NVLS", "true"),
        ("NVSHMEM_DISABLE_NVLS", "2"),
        ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "yes"),
    ] {
        refusal(multicast_allowed(env(&[(k, v), (ALLOW_VAR, "1")])));
    }
    // Values that leave NVLS on.
    for (k, v) in [
        ("NCCL_NVLS_ENABLE", "1"),
        ("NCCL_NVLS_ENABLE", " TRUE "),
        ("NCCL_NVLS_ENABLE", "on"),
        ("NCCL_NVLS_ENABLE", "Yes"),
        ("NVSHMEM_DISABLE_NVLS", "false"),
        ("NVSHMEM_DISABLE_NVLS", "0"),
        ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "Off"),
    ] {
        assert!(multicast_allowed(env(&[(k, v), (ALLOW_VAR, "1")])).is_ok(), "{k}={v}");
    }
    assert!(DISABLE_VARS.iter().all(|v| !v.is_empty()));
}

#[test]
fn guard_treats_anything_not_clearly_on_as_off() {
    // Present but not a clear "on": NVLS is off.
    for v in ["0", "00", "2", "", "  ", "enable", "-1", "0x1", "1 1"] {
        let m = refusal(multicast_allowed(env(&[("NCCL_NVLS_ENABLE", v), (ALLOW_VAR, "1")])));
        assert!(m.contains("NCCL_NVLS_ENABLE"), "NCCL_NVLS_ENABLE={v:?}: {m}");
    }
    // A disable variable present with anything but a clear "no" disables, the empty string too.
    for var in ["NVSHMEM_DISABLE_NVLS", "TORCH_SYMM_MEM_DISABLE_MULTICAST"] {
        for v in ["", "1", "00x", "disable"] {
            let m = refusal(multicast_allowed(env(&[(var, v), (ALLOW_VAR, "1")])));
            assert!(m.contains(var), "{var}={v:?}: {m}");
        }
    }
}

#[test]
fn guard_sees_values_that_are_not_utf8() {
    use std::os::unix::ffi::OsStringExt;
    let bad = || OsString::from_vec(vec![b'1', 0xff, 0xfe]);
    for var in DISABLE_VARS {
        let m = refusal(multicast_allowed(env_os(&[(var, bad()), (ALLOW_VAR, "1".into())])));
        assert!(m.contains(var), "{var}: {m}");
    }
    let m = refusal(multicast_allowed(env_os(&[(ALLOW_VAR, bad())])));
    assert!(m.contains(ALLOW_VAR), "{m}");
}

/// Records every driver call; can fail one named call.
#[derive(Default)]
struct Fake {
    calls: RefCell<Vec<String>>,
    fail: Option<&'static str>,
    no_multicast: bool,
    next: RefCell<u64>,
}

impl Fake {
    fn call(&self, what: String) -> Result<()> {
        let name = what.split('(').next().unwrap_or_default().to_string();
        self.calls.borrow_mut().push(what);
        if self.fail == Some(name.as_str()) {
            return Err(Error::InvalidArgument(format!("fake failure in {name}")));
        }
        Ok(())
    }
    fn handle(&self) -> u64 {
        let mut n = self.next.borrow_mut();
        *n += 1;
        0x1000 * *n
    }
    fn names(&self) -> Vec<String> {
        self.calls.borrow().iter().map(|c| c.split('(').next().unwrap_or_default().to_string()).collect()
    }
}

impl NvlsDriver for Fake {
    fn attribute(&self, dev: usize, attr: NvlsAttr) -> Result<i32> {
        self.call(format!("attribute({dev},{attr:?})"))?;
        Ok(match attr {
            NvlsAttr::MulticastSupported => !self.no_multicast as i32,
            NvlsAttr::PosixFdHandles => 1,
        })
    }
    fn multicast_granularity(&self, n: usize, _bytes: usize, recommended: bool) -> Result<usize> {
        self.call(format!("multicast_granularity({n},{recommended})"))?;
        Ok(if recommended { 512 << 20 } else { 2 << 20 })
    }
    fn allocation_granularity(&self, dev: usize) -> Result<usize> {
        self.call(format!("allocation_granularity({dev})"))?;
        Ok(2 << 20)
    }
    fn multicast_create(&self, n: usize, bytes: usize) -> Result<Handle> {
        self.call(format!("multicast_create({n},{bytes})"))?;
        Ok(self.handle())
    }
    fn multicast_add_device(&self, mc: Handle, dev: usize) -> Result<()> {
        self.call(format!("multicast_add_device({mc:#x},{dev})"))
    }
    fn mem_create(&self, dev: usize, bytes: usize) -> Result<Handle> {
        self.call(format!("mem_create({dev},{bytes})"))?;
        Ok(self.handle())
    }
    fn multicast_bind_mem(&self, mc: Handle, dev: usize, mem: Handle, bytes: usize) -> Result<()> {
        self.call(format!("multicast_bind_mem({mc:#x},{dev},{mem:#x},{bytes})"))
    }
    fn map(&self, dev: usize, handle: Handle, bytes: usize, align: usize) -> Result<u64> {
        self.call(format!("map({dev},{handle:#x},{bytes},{align})"))?;
        Ok(self.handle() << 20)
    }
    fn unmap(&self, dev: usize, va: u64, bytes: usize) -> Result<()> {
        self.call(format!("unmap({dev},{va:#x},{bytes})"))
    }
    fn multicast_unbind(&self, mc: Handle, dev: usize, bytes: usize) -> Result<()> {
        self.call(format!("multicast_unbind({mc:#x},{dev},{bytes})"))
    }
    fn release(&self, handle: Handle) -> Result<()> {
        self.call(format!("release({handle:#x})"))
    }
}

/// The generic entry point the public one wraps: guard first, then setup.
fn create_with<D: NvlsDriver>(
    env: impl Fn(&str) -> Option<OsString>,
    d: &D,
    n: usize,
    bytes: usize,
) -> Result<NvlsLayout> {
    let permit = multicast_allowed(env)?;
    setup(&permit, d, n, bytes)
}

#[test]
fn refused_setup_makes_no_driver_call() {
    let fake = Fake::default();
    let r = create_with(env(&[("NCCL_NVLS_ENABLE", "0"), (ALLOW_VAR, "1")]), &fake, 2, 1 << 20);
    assert!(
        matches!(r, Err(Error::MulticastRefused { variable: "NCCL_NVLS_ENABLE", ref reason }) if reason.contains("NCCL_NVLS_ENABLE=0")),
        "{r:?}"
    );
    assert!(fake.calls.borrow().is_empty(), "driver calls after a refusal: {:?}", fake.calls.borrow());
    // Not opted in: refused the same way.
    let r = create_with(env(&[]), &fake, 2, 1 << 20);
    assert!(
        matches!(r, Err(Error::MulticastRefused { variable: ALLOW_VAR, ref reason }) if reason.contains(ALLOW_VAR)),
        "{r:?}"
    );
    assert!(fake.calls.borrow().is_empty());
}

#[test]
fn public_entry_points_refuse_before_anything_else() {
    // No GPU is opened: with an empty group any driver use (or even the argument check)
    // would give a different error than the guard's.
    let e = MulticastBuffer::create(&[], 1 << 21, env(&[("NCCL_NVLS_ENABLE", "0"), (ALLOW_VAR, "1")]))
        .expect_err("must be refused");
    assert!(
        matches!(&e, Error::MulticastRefused { variable: "NCCL_NVLS_ENABLE", reason } if reason.contains("NCCL_NVLS_ENABLE=0")),
        "{e}"
    );
    let e = MulticastBuffer::create(&[], 0, env(&[("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")])).unwrap_err();
    assert!(
        matches!(&e, Error::MulticastRefused { variable: "TORCH_SYMM_MEM_DISABLE_MULTICAST", reason } if reason.contains("TORCH_SYMM_MEM_DISABLE_MULTICAST")),
        "{e}"
    );
}

#[test]
fn setup_sequence_on_a_fake_driver() {
    let fake = Fake::default();
    let permit = multicast_allowed(env(&[(ALLOW_VAR, "1")])).unwrap();
    let mut l = setup(&permit, &fake, 2, 3 << 20).unwrap();
    // Rounded up to the recommended multicast granularity; mappings aligned to it.
    assert_eq!((l.bytes, l.granularity), (512 << 20, 512 << 20));
    let names = fake.names();
    let pos = |n: &str| names.iter().position(|c| c == n).unwrap_or_else(|| panic!("{n} not called"));
    let last = |n: &str| names.iter().rposition(|c| c == n).unwrap();
    assert!(last("attribute") < pos("multicast_create"), "support checked first");
    assert!(pos("multicast_create") < pos("multicast_add_device"));
    assert!(last("multicast_add_device") < pos("multicast_bind_mem"), "all devices join before any bind");
    assert!(last("multicast_bind_mem") < pos("map"));
    assert_eq!(names.iter().filter(|n| *n == "map").count(), 4, "unicast + multicast per device");
    assert!(l.members.iter().all(|m| m.bound && m.unicast.is_some() && m.multicast.is_some()));
    let created = fake.calls.borrow().len();
    teardown(&fake, &mut l).unwrap();
    let names = fake.names()[created..].to_vec();
    assert_eq!(names.iter().filter(|n| *n == "unmap").count(), 4);
    assert_eq!(names.iter().filter(|n| *n == "multicast_unbind").count(), 2);
    assert_eq!(names.iter().filter(|n| *n == "release").count(), 3, "two memories and the multicast object");
    assert_eq!(names.last().map(String::as_str), Some("release"));
    assert_eq!(l.mc, None);
}

#[test]
fn failed_setup_releases_what_it_created() {
    let fake = Fake { fail: Some("multicast_bind_mem"), ..Default::default() };
    let permit = multicast_allowed(env(&[(ALLOW_VAR, "1")])).unwrap();
    let e = setup(&permit, &fake, 2, 1).unwrap_err();
    assert!(e.to_string().contains("fake failure in multicast_bind_mem"), "{e}");
    let names = fake.names();
    // The first memory was created, its bind failed: release it and the multicast object.
    let after = &names[names.iter().position(|n| n == "multicast_bind_mem").unwrap() + 1..];
    assert_eq!(after, ["release", "release"]);
    assert!(!names.iter().any(|n| n == "multicast_unbind"), "nothing was bound");
}

#[test]
fn unsupported_device_stops_before_creating_anything() {
    let fake = Fake { no_multicast: true, ..Default::default() };
    let permit = multicast_allowed(env(&[(ALLOW_VAR, "1")])).unwrap();
    let e = setup(&permit, &fake, 2, 1).unwrap_err();
    assert!(matches!(&e, Error::Unsupported(m) if m.contains("does not support multicast")), "{e}");
    assert!(fake.names().iter().all(|n| n == "attribute"));
    assert!(matches!(setup(&permit, &fake, 0, 1), Err(Error::InvalidArgument(_))));
    assert!(matches!(setup(&permit, &fake, 1, 0), Err(Error::InvalidArgument(_))));
}
