//! The macros that make each wrapper from one row: the wrapper (with `#[doc(alias = mnemonic)]`),
//! its check kernel (nvptx64 with feature `check-kernels`) and its [`Check`](super::check::Check)
//! for [`CHECKS`](super::CHECKS). See [`check`](super::check) for what a row yields.
//!
//! A row's mnemonic is a literal: the `asm!` template is built from it (`concat!`), so the
//! instruction, the doc alias and the expectation cannot disagree. The typed layers above
//! ([`crate::multimem`], [`crate::bulk`]) name wrappers only and read their mnemonics back from the
//! rows' tables (`check::mnemonic`). A row's `sass [..]` lists the
//! opcodes its check kernel's SASS must hold (whole tokens), `forbid [..]` texts that must appear
//! in neither its PTX nor its SASS, and `no_sass ".."` why an instruction has no SASS opcode of
//! its own.

// On other targets the wrappers are not compiled, and with them the operand helpers.
#![cfg_attr(not(any(target_arch = "nvptx64", doc)), allow(unused_macros))]

/// The [`Check`](super::check::Check) of one row: `check_entry!(target, wrapper, [ptx..],
/// [sass..], [forbid..], [no_sass reason?], [callee?])`.
macro_rules! check_entry {
    ($target:expr, $name:ident, [$($ptx:expr),*], [$($sass:expr),*], [$($forbid:expr),*], [$($why:expr)?],
     [$($callee:expr)?]) => {
        $crate::ptx::check::Check {
            wrapper: stringify!($name),
            kernel: concat!("check_", stringify!($name)),
            target: $target,
            ptx: &[$($ptx),*],
            sass: &[$($sass),*],
            forbid: &[$($forbid),*],
            callee: check_entry!(@opt $($callee)?),
            no_sass: check_entry!(@opt $($why)?),
        }
    };
    (@opt) => { None };
    (@opt $e:expr) => { Some($e) };
}

/// The check kernel of one row: `check_kernel!((cfg predicate) wrapper, |args| body)` defines
/// `check_<wrapper>(args)` running `body`, on nvptx64 with feature `check-kernels` when the
/// predicate holds (`(all())`, or `(feature = "sm100a")` for the forms that need sm_100a).
macro_rules! check_kernel {
    ($gate:tt $name:ident, |$($a:ident: $t:ty),*| $body:block) => {
        #[cfg(all(target_arch = "nvptx64", feature = "check-kernels"))]
        #[cfg $gate]
        const _: () = {
            #[unsafe(export_name = concat!("check_", stringify!($name)))]
            unsafe extern "ptx-kernel" fn kernel($($a: $t),*) {
                // SAFETY: check kernels are assembled and disassembled on the CPU, never launched.
                #[allow(unused_unsafe)]
                unsafe {
                    $body
                }
            }
        };
    };
}

/// Hand-written wrappers, each under a header that says what it emits and how it is checked:
///
/// ```text
/// hand! {
///     table = NAME;
///     #[check("mnemonic", also ["more PTX"], sass ["OPCODE"], forbid ["TEXT"], no_sass "why",
///             kernel |p: *mut u32| { .. })]      // `also`, `forbid`, `no_sass` optional;
///                                                // `"mnemonic" [no_alias]` when it is the name
///     /// docs
///     pub [unsafe] fn name<const N: u32>(args) -> ret { .. concat!(mnemonic!(), " operands;") .. }
/// }
/// ```
///
/// The body reads the mnemonic through `mnemonic!()`, so its instruction is the header's.
macro_rules! hand {
    (table = $table:ident; $($rows:tt)*) => {
        hand!(@row $table [] $($rows)*);
    };
    // The mnemonic is the search alias, unless it is the wrapper's name (`"trap" [no_alias]`).
    (@alias $mn:literal [] $item:item) => {
        #[doc(alias = $mn)]
        $item
    };
    (@alias $mn:literal [no_alias] $item:item) => {
        $item
    };
    (@row $table:ident [$($entries:expr,)*]) => {
        #[doc(hidden)]
        pub const $table: &[$crate::ptx::check::Check] = &[$($entries,)*];
    };
    (@row $table:ident [$($entries:expr,)*] #[check $c:tt] $(#[$m:meta])* pub unsafe fn $($rest:tt)*) => {
        hand!(@fn $table [$($entries,)*] [unsafe] $c [$(#[$m])*] $($rest)*);
    };
    (@row $table:ident [$($entries:expr,)*] #[check $c:tt] $(#[$m:meta])* pub fn $($rest:tt)*) => {
        hand!(@fn $table [$($entries,)*] [] $c [$(#[$m])*] $($rest)*);
    };
    (@fn $table:ident [$($entries:expr,)*] [$($unsafe:ident)?]
        ($mn:literal $([$flag:ident])? $(, also [$($also:literal),*])?, sass [$($sass:literal),*]
            $(, forbid [$($forbid:literal),*])? $(, no_sass $why:literal)?,
            kernel |$($ka:ident: $kt:ty),*| $kb:block $(,)?)
        [$(#[$m:meta])*]
        $name:ident $(<const $cg:ident: $cgt:ty>)? ($($arg:ident: $argt:ty),* $(,)?) $(-> $ret:ty)? $body:block
        $($rest:tt)*
    ) => {
        hand!(@alias $mn [$($flag)?]
            $(#[$m])*
            #[cfg(any(target_arch = "nvptx64", doc))]
            pub $($unsafe)? fn $name $(<const $cg: $cgt>)? ($($arg: $argt),*) $(-> $ret)? {
                #[allow(unused_macros)]
                macro_rules! mnemonic {
                    () => {
                        $mn
                    };
                }
                $body
            }
        );
        check_kernel!((all()) $name, |$($ka: $kt),*| $kb);
        hand!(@row $table [$($entries,)* check_entry!("sm_90", $name, [$mn $($(, $also)*)?], [$($sass),*],
            [$($($forbid),*)?], [$($why)?], []),]
            $($rest)*);
    };
}

/// Instructions without operands: `pub fn name() = "mnemonic" ("ISA"), sass [..];`. The check
/// kernel stores to its argument, then runs the instruction.
macro_rules! no_operands {
    (table = $table:ident;
     $( $(#[$doc:meta])* pub fn $name:ident() = $mn:literal ($isa:literal), sass [$($sass:literal),*]
        $(, no_sass $why:literal)?; )*) => {
        $(
            #[doc = concat!("`", $mn, ";` (", $isa, ")")]
            ///
            $(#[$doc])*
            #[doc(alias = $mn)]
            #[cfg(any(target_arch = "nvptx64", doc))]
            #[inline(always)]
            pub fn $name() {
                // SAFETY: an instruction without operands: it accesses no memory through a Rust
                // reference or pointer; its ordering or scheduling effect is the one its docs state.
                unsafe { asm!(concat!($mn, ";"), options(nostack)) };
            }
            check_kernel!((all()) $name, |p: *mut u32| { *p = 1; $name(); });
        )*
        #[doc(hidden)]
        pub const $table: &[$crate::ptx::check::Check] = &[$(
            check_entry!("sm_90", $name, [$mn], [$($sass),*], [], [$($why)?], []),
        )*];
    };
}

/// The operand text of a shape in the docs.
macro_rules! operand_text {
    (x1 $reg:ident) => {
        "d"
    };
    (w1) => {
        "d"
    };
    (w2) => {
        "{d0, d1}"
    };
    (w4) => {
        "{d0, d1, d2, d3}"
    };
    (d2) => {
        "{d0, d1}"
    };
    (h2) => {
        "{h0, h1}"
    };
    (h4) => {
        "{h0, h1, h2, h3}"
    };
    (h8) => {
        "{h0, h1, h2, h3, h4, h5, h6, h7}"
    };
}

/// One load of `$mn` that returns a value of type `$t`, its operand shaped as `$shape`: a scalar
/// in one register of its own type (`x1 reg32`), 32-bit words (`w1`, `w2`, `w4`), two 64-bit
/// words (`d2`), or 16-bit halves (`h2`, `h4`, `h8`).
macro_rules! load_shaped {
    ($mn:expr, $p:expr, $t:ty, x1 $reg:ident) => {{
        let d: $t;
        // SAFETY: the caller of the wrapper upholds its `# Safety` contract (address, alignment).
        unsafe { asm!(concat!($mn, " {d}, [{p}];"), d = out($reg) d, p = in(reg64) $p, options(nostack)) };
        d
    }};
    ($mn:expr, $p:expr, $t:ty, w1) => {{
        let d: u32;
        // SAFETY: the caller of the wrapper upholds its `# Safety` contract (address, alignment).
        unsafe { asm!(concat!($mn, " {d}, [{p}];"), d = out(reg32) d, p = in(reg64) $p, options(nostack)) };
        bytemuck::cast::<u32, $t>(d)
    }};
    ($mn:expr, $p:expr, $t:ty, w2) => {{
        let (d0, d1): (u32, u32);
        // SAFETY: the caller of the wrapper upholds its `# Safety` contract (address, alignment).
        unsafe {
            asm!(concat!($mn, " {{{d0}, {d1}}}, [{p}];"),
                d0 = out(reg32) d0, d1 = out(reg32) d1, p = in(reg64) $p, options(nostack))
        };
        bytemuck::cast::<[u32; 2], $t>([d0, d1])
    }};
    ($mn:expr, $p:expr, $t:ty, w4) => {{
        let (d0, d1, d2, d3): (u32, u32, u32, u32);
        // SAFETY: the caller of the wrapper upholds its `# Safety` contract (address, alignment).
        unsafe {
            asm!(concat!($mn, " {{{d0}, {d1}, {d2}, {d3}}}, [{p}];"),
                d0 = out(reg32) d0, d1 = out(reg32) d1, d2 = out(reg32) d2, d3 = out(reg32) d3,
                p = in(reg64) $p, options(nostack))
        };
        bytemuck::cast::<[u32; 4], $t>([d0, d1, d2, d3])
    }};
    ($mn:expr, $p:expr, $t:ty, d2) => {{
        let (d0, d1): (u64, u64);
        // SAFETY: the caller of the wrapper upholds its `# Safety` contract (address, alignment).
        unsafe {
            asm!(concat!($mn, " {{{d0}, {d1}}}, [{p}];"),
                d0 = out(reg64) d0, d1 = out(reg64) d1, p = in(reg64) $p, options(nostack))
        };
        bytemuck::cast::<[u64; 2], $t>([d0, d1])
    }};
    ($mn:expr, $p:expr, $t:ty, h2) => {{
        let (h0, h1): (u16, u16);
        // SAFETY: the caller of the wrapper upholds its `# Safety` contract (address, alignment).
        unsafe {
            asm!(concat!($mn, " {{{h0}, {h1}}}, [{p}];"),
                h0 = out(reg16) h0, h1 = out(reg16) h1, p = in(reg64) $p, options(nostack))
        };
        bytemuck::cast::<[u16; 2], $t>([h0, h1])
    }};
    ($mn:expr, $p:expr, $t:ty, h4) => {{
        let (h0, h1, h2, h3): (u16, u16, u16, u16);
        // SAFETY: the caller of the wrapper upholds its `# Safety` contract (address, alignment).
        unsafe {
            asm!(concat!($mn, " {{{h0}, {h1}, {h2}, {h3}}}, [{p}];"),
                h0 = out(reg16) h0, h1 = out(reg16) h1, h2 = out(reg16) h2, h3 = out(reg16) h3,
                p = in(reg64) $p, options(nostack))
        };
        bytemuck::cast::<[u16; 4], $t>([h0, h1, h2, h3])
    }};
    ($mn:expr, $p:expr, $t:ty, h8) => {{
        let (h0, h1, h2, h3, h4, h5, h6, h7): (u16, u16, u16, u16, u16, u16, u16, u16);
        // SAFETY: the caller of the wrapper upholds its `# Safety` contract (address, alignment).
        unsafe {
            asm!(concat!($mn, " {{{h0}, {h1}, {h2}, {h3}, {h4}, {h5}, {h6}, {h7}}}, [{p}];"),
                h0 = out(reg16) h0, h1 = out(reg16) h1, h2 = out(reg16) h2, h3 = out(reg16) h3,
                h4 = out(reg16) h4, h5 = out(reg16) h5, h6 = out(reg16) h6, h7 = out(reg16) h7,
                p = in(reg64) $p, options(nostack))
        };
        bytemuck::cast::<[u16; 8], $t>([h0, h1, h2, h3, h4, h5, h6, h7])
    }};
}

/// One store or reduction `$mn` of the value `$v: $t` with its operand shaped as `$shape` (see
/// [`load_shaped`]).
macro_rules! store_shaped {
    ($mn:expr, $p:expr, $v:expr, $t:ty, x1 $reg:ident) => {{
        let v: $t = $v;
        // SAFETY: the caller of the wrapper upholds its `# Safety` contract (address, alignment).
        unsafe { asm!(concat!($mn, " [{p}], {v};"), p = in(reg64) $p, v = in($reg) v, options(nostack)) };
    }};
    ($mn:expr, $p:expr, $v:expr, $t:ty, w1) => {{
        let v = bytemuck::cast::<$t, u32>($v);
        // SAFETY: the caller of the wrapper upholds its `# Safety` contract (address, alignment).
        unsafe { asm!(concat!($mn, " [{p}], {v};"), p = in(reg64) $p, v = in(reg32) v, options(nostack)) };
    }};
    ($mn:expr, $p:expr, $v:expr, $t:ty, w2) => {{
        let [d0, d1] = bytemuck::cast::<$t, [u32; 2]>($v);
        // SAFETY: the caller of the wrapper upholds its `# Safety` contract (address, alignment).
        unsafe {
            asm!(concat!($mn, " [{p}], {{{d0}, {d1}}};"),
                p = in(reg64) $p, d0 = in(reg32) d0, d1 = in(reg32) d1, options(nostack))
        };
    }};
    ($mn:expr, $p:expr, $v:expr, $t:ty, w4) => {{
        let [d0, d1, d2, d3] = bytemuck::cast::<$t, [u32; 4]>($v);
        // SAFETY: the caller of the wrapper upholds its `# Safety` contract (address, alignment).
        unsafe {
            asm!(concat!($mn, " [{p}], {{{d0}, {d1}, {d2}, {d3}}};"),
                p = in(reg64) $p, d0 = in(reg32) d0, d1 = in(reg32) d1, d2 = in(reg32) d2, d3 = in(reg32) d3,
                options(nostack))
        };
    }};
    ($mn:expr, $p:expr, $v:expr, $t:ty, d2) => {{
        let [d0, d1] = bytemuck::cast::<$t, [u64; 2]>($v);
        // SAFETY: the caller of the wrapper upholds its `# Safety` contract (address, alignment).
        unsafe {
            asm!(concat!($mn, " [{p}], {{{d0}, {d1}}};"),
                p = in(reg64) $p, d0 = in(reg64) d0, d1 = in(reg64) d1, options(nostack))
        };
    }};
    ($mn:expr, $p:expr, $v:expr, $t:ty, h2) => {{
        let [h0, h1] = bytemuck::cast::<$t, [u16; 2]>($v);
        // SAFETY: the caller of the wrapper upholds its `# Safety` contract (address, alignment).
        unsafe {
            asm!(concat!($mn, " [{p}], {{{h0}, {h1}}};"),
                p = in(reg64) $p, h0 = in(reg16) h0, h1 = in(reg16) h1, options(nostack))
        };
    }};
    ($mn:expr, $p:expr, $v:expr, $t:ty, h4) => {{
        let [h0, h1, h2, h3] = bytemuck::cast::<$t, [u16; 4]>($v);
        // SAFETY: the caller of the wrapper upholds its `# Safety` contract (address, alignment).
        unsafe {
            asm!(concat!($mn, " [{p}], {{{h0}, {h1}, {h2}, {h3}}};"),
                p = in(reg64) $p, h0 = in(reg16) h0, h1 = in(reg16) h1, h2 = in(reg16) h2, h3 = in(reg16) h3,
                options(nostack))
        };
    }};
    ($mn:expr, $p:expr, $v:expr, $t:ty, h8) => {{
        let [h0, h1, h2, h3, h4, h5, h6, h7] = bytemuck::cast::<$t, [u16; 8]>($v);
        // SAFETY: the caller of the wrapper upholds its `# Safety` contract (address, alignment).
        unsafe {
            asm!(concat!($mn, " [{p}], {{{h0}, {h1}, {h2}, {h3}, {h4}, {h5}, {h6}, {h7}}};"),
                p = in(reg64) $p, h0 = in(reg16) h0, h1 = in(reg16) h1, h2 = in(reg16) h2, h3 = in(reg16) h3,
                h4 = in(reg16) h4, h5 = in(reg16) h5, h6 = in(reg16) h6, h7 = in(reg16) h7, options(nostack))
        };
    }};
}

/// Loads through an ordinary pointer (`ld_st`): `pub unsafe fn name(ptr: *const P) -> T: shape
/// = "mnemonic" ("ISA"), sass [..];`. The check kernel stores the loaded value 16 bytes past the
/// address it loads from.
macro_rules! loads {
    (table = $table:ident, safety = $safety:literal;
     $( $(#[$doc:meta])* pub unsafe fn $name:ident(ptr: *const $p:ty) -> $t:ty: $($shape:ident)+ =
        $mn:literal ($isa:literal),
        sass [$($sass:literal),*] $(, forbid [$($forbid:literal),*])?; )*) => {
        $(
            #[doc = concat!("`", $mn, " ", operand_text!($($shape)+), ", [a];` (", $isa, ")")]
            ///
            $(#[$doc])*
            ///
            /// # Safety
            #[doc = $safety]
            #[doc(alias = $mn)]
            #[cfg(any(target_arch = "nvptx64", doc))]
            #[inline(always)]
            pub unsafe fn $name(ptr: *const $p) -> $t {
                load_shaped!($mn, ptr, $t, $($shape)+)
            }
            check_kernel!((all()) $name, |p: *mut $p| { *p.add(16 / size_of::<$p>()).cast::<$t>() = $name(p); });
        )*
        #[doc(hidden)]
        pub const $table: &[$crate::ptx::check::Check] = &[$(
            check_entry!("sm_90", $name, [$mn], [$($sass),*], [$($($forbid),*)?], [], []),
        )*];
    };
}

/// Stores through an ordinary pointer (`ld_st`): `pub unsafe fn name(ptr: *mut P, value: T):
/// shape = "mnemonic" ("ISA"), sass [..];`. The check kernel stores the value it reads 16 bytes
/// before the address.
macro_rules! stores {
    (table = $table:ident, safety = $safety:literal;
     $( $(#[$doc:meta])* pub unsafe fn $name:ident(ptr: *mut $p:ty, value: $t:ty): $($shape:ident)+ =
        $mn:literal ($isa:literal),
        sass [$($sass:literal),*] $(, forbid [$($forbid:literal),*])?; )*) => {
        $(
            #[doc = concat!("`", $mn, " [a], ", operand_text!($($shape)+), ";` (", $isa, ")")]
            ///
            $(#[$doc])*
            ///
            /// # Safety
            #[doc = $safety]
            #[doc(alias = $mn)]
            #[cfg(any(target_arch = "nvptx64", doc))]
            #[inline(always)]
            pub unsafe fn $name(ptr: *mut $p, value: $t) {
                store_shaped!($mn, ptr, value, $t, $($shape)+)
            }
            check_kernel!((all()) $name, |p: *mut $p| { $name(p.add(16 / size_of::<$p>()), *p.cast::<$t>()); });
        )*
        #[doc(hidden)]
        pub const $table: &[$crate::ptx::check::Check] = &[$(
            check_entry!("sm_90", $name, [$mn], [$($sass),*], [$($($forbid),*)?], [], []),
        )*];
    };
}

/// Atomic read-modify-writes with a result (`atom`): `pub unsafe fn name(T, reg) = "mnemonic",
/// sass [..];`, all doing `$effect`. The check kernel stores the result.
macro_rules! atom {
    (table = $table:ident, isa = $isa:literal, effect = $effect:literal;
     $( $(#[$doc:meta])* pub unsafe fn $name:ident($t:ty, $reg:ident) = $mn:literal,
        sass [$($sass:literal),*] $(, forbid [$($forbid:literal),*])?; )*) => {
        $(
            #[doc = concat!("`", $mn, " d, [a], b;` (", $isa, ")")]
            ///
            #[doc = $effect]
            ///
            $(#[$doc])*
            ///
            /// # Safety
            /// `ptr` must be valid for atomic reads and writes of the type and naturally aligned.
            #[doc(alias = $mn)]
            #[cfg(any(target_arch = "nvptx64", doc))]
            #[inline(always)]
            pub unsafe fn $name(ptr: *mut $t, value: $t) -> $t {
                let old: $t;
                // SAFETY: the caller guarantees `ptr` is valid and aligned.
                unsafe {
                    asm!(
                        concat!($mn, " {o}, [{p}], {v};"),
                        o = out($reg) old, p = in(reg64) ptr, v = in($reg) value, options(nostack)
                    )
                };
                old
            }
            check_kernel!((all()) $name, |p: *mut $t| { *p.add(1) = $name(p, *p.add(2)); });
        )*
        #[doc(hidden)]
        pub const $table: &[$crate::ptx::check::Check] = &[$(
            check_entry!("sm_90", $name, [$mn], [$($sass),*], [$($($forbid),*)?], [], []),
        )*];
    };
}

/// Reductions without a result (`red`): `pub unsafe fn name(T, reg) = "mnemonic", sass [..];`,
/// all doing `$effect`.
macro_rules! red {
    (table = $table:ident, isa = $isa:literal, effect = $effect:literal;
     $( $(#[$doc:meta])* pub unsafe fn $name:ident($t:ty, $reg:ident) = $mn:literal,
        sass [$($sass:literal),*] $(, forbid [$($forbid:literal),*])?; )*) => {
        $(
            #[doc = concat!("`", $mn, " [a], b;` (", $isa, ")")]
            ///
            #[doc = $effect]
            ///
            $(#[$doc])*
            ///
            /// # Safety
            /// `ptr` must be valid for atomic reads and writes of the type and naturally aligned.
            #[doc(alias = $mn)]
            #[cfg(any(target_arch = "nvptx64", doc))]
            #[inline(always)]
            pub unsafe fn $name(ptr: *mut $t, value: $t) {
                // SAFETY: the caller guarantees `ptr` is valid and aligned.
                unsafe { asm!(concat!($mn, " [{p}], {v};"), p = in(reg64) ptr, v = in($reg) value, options(nostack)) };
            }
            check_kernel!((all()) $name, |p: *mut $t| { $name(p, *p.add(2)); });
        )*
        #[doc(hidden)]
        pub const $table: &[$crate::ptx::check::Check] = &[$(
            check_entry!("sm_90", $name, [$mn], [$($sass),*], [$($($forbid),*)?], [], []),
        )*];
    };
}

/// Bulk reductions from shared into global memory (`cp.reduce.async.bulk`): `pub unsafe fn name
/// = "mnemonic", sass [..];`. The check kernel reads the global address and, packed in one word,
/// the shared address and the size.
macro_rules! bulk_reduce {
    (table = $table:ident, isa = $isa:literal;
     $( pub unsafe fn $name:ident = $mn:literal, sass [$($sass:literal),*]; )*) => {
        $(
            #[doc = concat!("`", $mn, " [d], [s], n;` (", $isa, ")")]
            ///
            /// # Safety
            /// `dst` and `src` 16-byte aligned, `bytes` a multiple of 16, both ranges valid and holding
            /// elements of the instruction's type; the source must stay unchanged until a
            /// `cp.async.bulk.wait_group.read` covers this group.
            #[doc(alias = $mn)]
            #[cfg(any(target_arch = "nvptx64", doc))]
            #[inline(always)]
            pub unsafe fn $name(dst: *mut u8, src: $crate::ptr::SharedPtr<u8>, bytes: u32) {
                // SAFETY: caller guarantees the alignment and sizes.
                unsafe {
                    asm!(
                        concat!($mn, " [{d}], [{s}], {n};"),
                        d = in(reg64) dst, s = in(reg32) src.addr(), n = in(reg32) bytes, options(nostack)
                    )
                };
            }
            check_kernel!((all()) $name, |p: *mut u64| {
                let w = *p.add(1);
                $name(*p as *mut u8, $crate::ptr::SharedPtr::from_addr(w as u32), (w >> 32) as u32);
            });
        )*
        #[doc(hidden)]
        pub const $table: &[$crate::ptx::check::Check] = &[$(
            check_entry!("sm_90", $name, [$mn], [$($sass),*], [], [], []),
        )*];
    };
}

/// `multimem.ld_reduce` wrappers: `pub unsafe fn name(T: shape) = "mnemonic", sass [..];`. The
/// check kernel loads through the multicast address in its first argument and stores the result
/// through its second. `gate` is the `cfg` predicate of the wrappers and kernels (the forms that
/// need sm_100a); their checks are there on every build.
macro_rules! ld_reduce {
    (table = $table:ident, target = $target:literal, isa = $isa:literal, gate = $gate:tt;
     $( pub unsafe fn $name:ident($t:ty: $($shape:ident)+) = $mn:literal, sass [$($sass:literal),*]; )*) => {
        $(
            #[doc = concat!("`", $mn, " ", operand_text!($($shape)+), ", [a];` (", $isa, ")")]
            ///
            /// Loads the value at `ptr` from every device of the multicast group and returns the
            /// reduction of all copies.
            ///
            /// # Safety
            /// `ptr` must lie inside a multicast mapping of this device whose every member has memory
            /// bound, be aligned to the size of the value, and the value's bytes must stay inside
            /// the mapping.
            #[doc(alias = $mn)]
            #[cfg(any(target_arch = "nvptx64", doc))]
            #[cfg $gate]
            #[inline(always)]
            pub unsafe fn $name(ptr: $crate::ptr::MultimemPtr<$t>) -> $t {
                load_shaped!($mn, ptr.as_ptr(), $t, $($shape)+)
            }
            check_kernel!($gate $name, |p: $crate::ptr::MultimemPtr<$t>, out: *mut $t| { *out = $name(p); });
        )*
        #[doc(hidden)]
        pub const $table: &[$crate::ptx::check::Check] = &[$(
            check_entry!($target, $name, [$mn], [$($sass),*], [], [], []),
        )*];
    };
}

/// `multimem.st` and `multimem.red` wrappers (value operand after the address), each doing
/// `$effect`. The check kernel stores or reduces the value its second argument points to.
macro_rules! multimem_store {
    (table = $table:ident, target = $target:literal, isa = $isa:literal, gate = $gate:tt, effect = $effect:literal;
     $( pub unsafe fn $name:ident($t:ty: $($shape:ident)+) = $mn:literal, sass [$($sass:literal),*]; )*) => {
        $(
            #[doc = concat!("`", $mn, " [a], ", operand_text!($($shape)+), ";` (", $isa, ")")]
            ///
            #[doc = $effect]
            ///
            /// # Safety
            /// `ptr` must lie inside a multicast mapping of this device whose every member has memory
            /// bound, be aligned to the size of the value, and the value's bytes must stay inside
            /// the mapping.
            #[doc(alias = $mn)]
            #[cfg(any(target_arch = "nvptx64", doc))]
            #[cfg $gate]
            #[inline(always)]
            pub unsafe fn $name(ptr: $crate::ptr::MultimemPtr<$t>, value: $t) {
                store_shaped!($mn, ptr.as_ptr(), value, $t, $($shape)+)
            }
            check_kernel!($gate $name, |p: $crate::ptr::MultimemPtr<$t>, v: *const $t| { $name(p, *v); });
        )*
        #[doc(hidden)]
        pub const $table: &[$crate::ptx::check::Check] = &[$(
            check_entry!($target, $name, [$mn], [$($sass),*], [], [], []),
        )*];
    };
}
