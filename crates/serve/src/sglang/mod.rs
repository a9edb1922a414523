//! SGLang's side of the serving edge: the PD legs of a bootstrap room as
//! `sglang-router` sends them ([`pd`]), the sans-IO table that pairs them
//! ([`bootstrap`]), the prefill a decode leg reserves for before its
//! partner came ([`prealloc`]), and SGLang's native `/generate` ([`native`]).

pub(crate) mod abort;
pub(crate) mod bootstrap;
pub(crate) mod native;
pub(crate) mod pd;
pub(crate) mod prealloc;
