//! The hand-driven source-first handoff holds and frees what it should.

#[test]
fn source_first_handoff_pins_reserves_activates_and_drains() {
    let mut lines = Vec::new();
    let o = cherry_pick_example::run(2000, 16, &mut |l| lines.push(l)).expect("the handoff runs");
    // 2000 tokens in 16-token blocks: 125 blocks pinned at the source.
    assert_eq!(o.pinned_blocks, 125);
    assert_eq!(
        o.pinned_after_release, 0,
        "released once the reader completed"
    );
    assert!(o.reserved_blocks > 0, "the destination reserved");
    assert_eq!(o.reserved_after_activation, 0);
    assert!(o.active_after_activation >= o.reserved_blocks);
    assert_eq!(o.tokens, 16);
    assert!(o.kv_events.0 > 0 && o.kv_events.1 > 0);
    assert!(o.drained, "{lines:#?}");
    assert!(lines.iter().any(|l| l.contains("ReleaseSource")));
}
