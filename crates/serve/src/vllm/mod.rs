//! vLLM's side of the serving edge: a PD request's `kv_transfer_params`
//! as vLLM's NIXL connector and its proxies pass them
//! ([`kv_transfer`]), and the wire layout of vLLM's ZMQ KV events
//! ([`wire`]).

pub(crate) mod kv_fields;
pub(crate) mod kv_transfer;
pub mod lora;
pub(crate) mod proxy_error;
pub(crate) mod wire;
