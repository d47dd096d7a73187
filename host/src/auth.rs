//! Challenge-response over the session token, for both handshakes: the bootstrap's (a rank's
//! hello at the rendezvous and its later connects, `bootstrap::rendezvous`) and the TCP
//! transport's (each connection between two proxies, `transport::tcp::connect`).
//!
//! Each side sends a fresh [`nonce`]; the connecting side proves it knows the token over both
//! nonces and its introduction, the accepting side answers with a proof of its own. A proof is
//! HMAC-SHA256 under the token ([`Token::prove`]) over a [`Proof`] label and the handshake's
//! parts, so a proof made for one step of one handshake is never accepted for another: the labels
//! are all here, and all differ.

use crate::frame::{PROOF_LEN, Token};

/// What a proof is for: its label is the first part of what is proved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Proof {
    /// The bootstrap's connecting side (a hello or a connect).
    BootstrapClient,
    /// The bootstrap's accepting side (its welcome).
    BootstrapServer,
    /// The TCP transport's connecting side (its hello).
    TransportHello,
    /// The TCP transport's accepting side (its welcome).
    TransportWelcome,
}

impl Proof {
    /// Every kind, for the tests.
    #[cfg(test)]
    const ALL: [Proof; 4] =
        [Proof::BootstrapClient, Proof::BootstrapServer, Proof::TransportHello, Proof::TransportWelcome];

    fn label(self) -> &'static [u8] {
        match self {
            Proof::BootstrapClient => b"mscclpp-rs client",
            Proof::BootstrapServer => b"mscclpp-rs server",
            Proof::TransportHello => b"mscclpp-rs transport hello v1",
            Proof::TransportWelcome => b"mscclpp-rs transport welcome v1",
        }
    }
}

/// A fresh random nonce of `N` bytes (the operating system's generator, through `rand`).
pub(crate) fn nonce<const N: usize>() -> [u8; N] {
    use rand::RngExt;
    let mut n = [0u8; N];
    rand::rng().fill(&mut n[..]);
    n
}

/// `token`'s proof of `what` over `parts` (nonces, introduction, ...).
pub(crate) fn prove(token: &Token, what: Proof, parts: &[&[u8]]) -> [u8; PROOF_LEN] {
    token.prove(&labelled(what, parts))
}

/// Whether `proof` is [`prove`]'s for the same `what` and `parts`, compared in constant time.
pub(crate) fn verify(token: &Token, what: Proof, parts: &[&[u8]], proof: &[u8]) -> bool {
    token.verify(&labelled(what, parts), proof)
}

fn labelled<'a>(what: Proof, parts: &[&'a [u8]]) -> Vec<&'a [u8]> {
    std::iter::once(what.label()).chain(parts.iter().copied()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;

    #[test]
    fn proofs_check_out_only_for_their_own_label_token_and_parts() {
        let mut rng = rand::rng();
        for _ in 0..32 {
            let token = Token(rng.random());
            let other = Token(rng.random());
            let (a, b): ([u8; 32], [u8; 16]) = (nonce(), nonce());
            let intro: Vec<u8> = (0..rng.random_range(0..64)).map(|_| rng.random()).collect();
            let parts: [&[u8]; 3] = [&a, &b, &intro];
            for what in Proof::ALL {
                let p = prove(&token, what, &parts);
                assert!(verify(&token, what, &parts, &p), "{what:?}: its own proof");
                // The label is the first part, length-prefixed like the others.
                assert_eq!(p, token.prove(&[what.label(), &a, &b, &intro]), "{what:?}");
                assert!(!verify(&other, what, &parts, &p), "{what:?}: another token");
                assert!(!verify(&token, what, &[&a, &b], &p), "{what:?}: fewer parts");
                for other_what in Proof::ALL.into_iter().filter(|w| *w != what) {
                    assert!(!verify(&token, other_what, &parts, &p), "{what:?} accepted as {other_what:?}");
                }
            }
        }
    }

    #[test]
    fn nonces_are_fresh() {
        let seen: std::collections::HashSet<[u8; 16]> = (0..1000).map(|_| nonce()).collect();
        assert_eq!(seen.len(), 1000);
        assert_ne!(nonce::<32>(), [0; 32]);
    }
}
