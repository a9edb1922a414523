//! Spare buffers handed back by an event's consumer (`Worker::recycle`),
//! reused for later events so that steady stepping allocates nothing: a
//! step's pass shapes and token emissions, and the cores' KV event hashes
//! (`KvEventQueue::give_back`).

/// The contents of `filled` for an event, leaving `filled` empty with a
/// spare's capacity for the core to fill next time. With no spare it copies
/// instead (one allocation of the exact size), so a consumer that never
/// recycles does not make the core regrow its buffer every step.
pub(crate) fn take_filled<T: Clone>(filled: &mut Vec<T>, spares: &mut Vec<Vec<T>>) -> Vec<T> {
    if filled.is_empty() {
        return Vec::new();
    }
    match spares.pop() {
        Some(spare) => std::mem::replace(filled, spare),
        None => filled.clone(),
    }
}

/// Keeps `buf`, emptied, as a spare unless it has no capacity or `max`
/// spares are already kept (then it is dropped).
pub(crate) fn keep_spare<T>(mut buf: Vec<T>, spares: &mut Vec<Vec<T>>, max: usize) {
    if buf.capacity() > 0 && spares.len() < max {
        buf.clear();
        spares.push(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::{keep_spare, take_filled};

    /// The bound these tests keep spares to.
    const MAX: usize = 4;

    #[test]
    fn an_event_takes_the_filled_buffer_and_leaves_a_spare() {
        let mut spares = Vec::new();
        let mut filled = vec![1u32, 2, 3];
        // No spare: a copy, the core keeps its buffer.
        assert_eq!(take_filled(&mut filled, &mut spares), vec![1, 2, 3]);
        assert_eq!(filled, vec![1, 2, 3]);
        keep_spare(Vec::with_capacity(8), &mut spares, MAX);
        let ptr = filled.as_ptr();
        let event = take_filled(&mut filled, &mut spares);
        assert_eq!(event, vec![1, 2, 3]);
        assert_eq!(event.as_ptr(), ptr, "moved, not copied");
        assert!(filled.is_empty() && filled.capacity() >= 8);
        assert!(spares.is_empty());
        // Nothing to take: no spare consumed, nothing allocated.
        keep_spare(Vec::with_capacity(8), &mut spares, MAX);
        let mut empty: Vec<u32> = Vec::new();
        assert_eq!(take_filled(&mut empty, &mut spares).capacity(), 0);
        assert_eq!(spares.len(), 1);
    }

    #[test]
    fn spares_are_bounded_and_cleared() {
        let mut spares = Vec::new();
        for _ in 0..MAX + 3 {
            keep_spare(vec![7u8; 4], &mut spares, MAX);
        }
        keep_spare(Vec::new(), &mut spares, MAX);
        assert_eq!(spares.len(), MAX);
        assert!(spares.iter().all(|s| s.is_empty() && s.capacity() >= 4));
    }
}
