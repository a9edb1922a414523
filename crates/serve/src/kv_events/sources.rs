//! How gateways find and tell apart the KV event publishers.
//!
//! - llm-d's topic (`llm-d/llm-d-router`,
//!   `pkg/kvevents/engineadapter/common.go`, `parseTopic`: the subscriber
//!   filters on `kv@` and splits the topic on `@` into exactly three parts,
//!   `kv`, the pod id (`<pod IP>:<port>`) and the model, so a model name
//!   holding `@` is not told apart): [`llmd_topics`] gives each scheduler
//!   its worker's own address, so a subscriber that hears every engine (one
//!   central endpoint) still knows which one spoke.
//! - vLLM's `GET /kv_event_sources` (PR #55844,
//!   `vllm/entrypoints/serve/kv_events/api_router.py`,
//!   `get_kv_event_sources`: the engine client's table as it is): a JSON
//!   object keyed by data-parallel rank (a string), each value that rank's
//!   `KVEventsConfig` as resolved at bind time (`enable_kv_cache_events`,
//!   `publisher`, `endpoint`, `replay_endpoint`, `buffer_steps`, `hwm`,
//!   `topic`), as the consumers read it (a router's `KvEventSourceEntry`,
//!   `HashMap<String, KvEventSourceEntry>`, and verl's agent-aware router,
//!   `_parse_kv_event_sources`, "vLLM's rank-keyed response"). No
//!   publisher: `{}`.

pub use crate::kv_events::zmq::LlmdTopic;
use crate::kv_events::zmq::{KvEndpoints, PUB_HWM, REPLAY_BUFFER};
use serde_json::{json, Map, Value};
use std::net::SocketAddr;

/// Each scheduler's llm-d topic, `kv@HOST:PORT@MODEL`, by id. A worker's
/// ranks share its topic (one pod; the batch's `data_parallel_rank` tells
/// them apart). HOST and PORT are `style`'s when given, else worker `w`'s
/// listener (`listeners`, by worker), else the front listener `front`.
pub fn llmd_topics(
    style: &LlmdTopic,
    model: &str,
    schedulers: usize,
    dp_size: usize,
    listeners: &[(u32, SocketAddr)],
    front: &str,
) -> Vec<String> {
    let (front_host, front_port) = split_host_port(front);
    (0..schedulers)
        .map(|s| {
            let w = s / dp_size.max(1);
            let own = listeners.iter().find(|(id, _)| *id as usize == w);
            let host = match (&style.host, own) {
                (Some(h), _) => h.clone(),
                (None, Some((_, a))) => a.ip().to_string(),
                (None, None) => front_host.clone(),
            };
            let port = match (style.port, own) {
                (Some(p), _) => u32::from(p) + w as u32,
                (None, Some((_, a))) => u32::from(a.port()),
                (None, None) => u32::from(front_port),
            };
            format!("kv@{host}:{port}@{model}")
        })
        .collect()
}

/// `ep` with its `topics` filled when it names them as llm-d does, for
/// schedulers laid out by `dp` (one per `publish` entry).
pub fn resolve_topics(
    mut ep: KvEndpoints,
    model: &str,
    dp: handoff_core::DpLayout,
    listeners: &[(u32, SocketAddr)],
    front: &str,
) -> KvEndpoints {
    if let Some(style) = &ep.llmd {
        let n = ep.publish.len();
        ep.topics = llmd_topics(style, model, n, usize::from(dp.dp_size()), listeners, front);
    }
    ep
}

fn split_host_port(addr: &str) -> (String, u16) {
    match addr.rsplit_once(':') {
        Some((h, p)) => (h.to_string(), p.parse().unwrap_or(0)),
        None => (addr.to_string(), 0),
    }
}

/// The `/kv_event_sources` body for schedulers `members` (keyed by rank:
/// `0..` in order), from the endpoints the sockets were started with.
pub fn kv_event_sources(ep: Option<&KvEndpoints>, members: std::ops::Range<usize>) -> Value {
    let mut out = Map::new();
    let Some(ep) = ep else {
        return Value::Object(out);
    };
    for (rank, s) in members.enumerate() {
        let Some(endpoint) = ep.publish.get(s) else {
            continue;
        };
        let replay = ep.replay.get(s).filter(|_| !ep.connect);
        out.insert(
            rank.to_string(),
            json!({
                "enable_kv_cache_events": true,
                "publisher": "zmq",
                "endpoint": endpoint,
                "replay_endpoint": replay,
                "buffer_steps": REPLAY_BUFFER,
                "hwm": PUB_HWM,
                "topic": ep.topic_of(s),
            }),
        );
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_follow_each_workers_listener_or_the_flags() {
        let l: Vec<(u32, SocketAddr)> = vec![
            (0, "10.0.0.1:8100".parse().unwrap()),
            (1, "10.0.0.2:8101".parse().unwrap()),
        ];
        let t = llmd_topics(&LlmdTopic::default(), "m", 4, 2, &l, "0.0.0.0:8000");
        assert_eq!(
            t,
            [
                "kv@10.0.0.1:8100@m",
                "kv@10.0.0.1:8100@m",
                "kv@10.0.0.2:8101@m",
                "kv@10.0.0.2:8101@m"
            ]
        );
        let style = LlmdTopic {
            host: Some("pod".into()),
            port: Some(9000),
        };
        let t = llmd_topics(&style, "m", 2, 1, &[], "127.0.0.1:8000");
        assert_eq!(t, ["kv@pod:9000@m", "kv@pod:9001@m"]);
        // No listener of its own: the front's address.
        let t = llmd_topics(&LlmdTopic::default(), "m", 1, 1, &[], "127.0.0.1:8000");
        assert_eq!(t, ["kv@127.0.0.1:8000@m"]);
    }

    #[test]
    fn sources_are_keyed_by_rank_with_vllms_config_fields() {
        let ep = KvEndpoints {
            publish: (0..4).map(|i| format!("tcp://h:{}", 5557 + i)).collect(),
            replay: (0..4).map(|i| format!("tcp://h:{}", 5657 + i)).collect(),
            topics: (0..4).map(|i| format!("t{i}")).collect(),
            ..KvEndpoints::default()
        };
        let v = kv_event_sources(Some(&ep), 2..4);
        assert_eq!(
            v["1"],
            json!({"enable_kv_cache_events": true, "publisher": "zmq",
                   "endpoint": "tcp://h:5560", "replay_endpoint": "tcp://h:5660",
                   "buffer_steps": REPLAY_BUFFER, "hwm": PUB_HWM, "topic": "t3"})
        );
        assert_eq!(v.as_object().map(|o| o.len()), Some(2));
        assert_eq!(kv_event_sources(None, 0..4), json!({}));
        let connected = KvEndpoints {
            connect: true,
            ..ep
        };
        assert_eq!(
            kv_event_sources(Some(&connected), 0..1)["0"]["replay_endpoint"],
            Value::Null
        );
    }
}
