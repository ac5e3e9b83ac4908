//! The folder's merge of held checkpoints' changes: each key once, with its newest value.
//! The runs' heads meet in a tournament (a tree of losers): taking the least head and
//! putting its run's next entry in its place replays one path from leaf to root, one
//! comparison a level, where a binary heap sifts down with two a level and moves whole
//! heads. At 100 ms checkpoints a fold merges about ten rounds of one second, and the
//! heap was half of the folder's CPU.

use std::cmp::Ordering;

use super::{OrderedKey, StageEntry, StateChanges};

/// The entries of `changes` (each sorted, the later ones newer), each key once with its
/// newest value, by stage, group and key.
pub(crate) fn latest_of<'a>(changes: &[&'a StateChanges]) -> Vec<StageEntry<'a>> {
    let mut out: Vec<StageEntry<'_>> = Vec::with_capacity(changes.iter().map(|c| c.size().0 as usize).sum());
    let mut tournament = Tournament::new(changes);
    let mut last: Option<Head<'_>> = None;
    while let Some(head) = tournament.pop() {
        if last.is_none_or(|last| last.place(&head).is_ne()) {
            out.push((head.stage, (head.group, head.key.key, head.value)));
        }
        last = Some(head);
    }
    out
}

/// A run's next entry, and the run's place among the runs (a later run is newer).
#[derive(Clone, Copy)]
struct Head<'a> {
    stage: u32,
    group: u32,
    key: OrderedKey<'a>,
    value: Option<&'a [u8]>,
    run: usize,
}

impl Head<'_> {
    /// Where the entry goes in the merged order: by stage, group and key.
    fn place(&self, other: &Self) -> Ordering {
        (self.stage, self.group).cmp(&(other.stage, other.group)).then_with(|| self.key.cmp(&other.key))
    }

    /// Whether it is taken before `other`: of one key, the newer run's first.
    fn precedes(&self, other: &Self) -> bool {
        self.place(other).then_with(|| other.run.cmp(&self.run)).is_lt()
    }
}

/// The runs and a tree of losers over their heads. Node `n` (from 1) has the children
/// `2n` and `2n + 1`; run `r`'s leaf is node `runs + r`. Each inner node holds the run
/// that lost the match there; `losers[0]` holds the overall winner.
struct Tournament<'c, 'a> {
    changes: &'c [&'a StateChanges],
    /// Each run's next entry: `None` once it is spent, which loses to every entry.
    heads: Vec<Option<Head<'a>>>,
    /// Where each run's next entry is, in its `StateChanges`.
    next: Vec<usize>,
    losers: Vec<usize>,
}

impl<'c, 'a> Tournament<'c, 'a> {
    fn new(changes: &'c [&'a StateChanges]) -> Self {
        let runs = changes.len();
        let mut tournament = Tournament { changes, heads: Vec::with_capacity(runs), next: vec![0; runs], losers: vec![0; runs.max(1)] };
        for run in 0..runs {
            let head = tournament.head(run);
            tournament.heads.push(head);
        }
        // Matches from the deepest inner node up: each passes its winner on.
        let mut winners = vec![0; runs];
        let winner_at = |winners: &[usize], node: usize| if node >= runs { node - runs } else { winners[node] };
        for node in (1..runs).rev() {
            let (left, right) = (winner_at(&winners, 2 * node), winner_at(&winners, 2 * node + 1));
            let (winner, loser) = if tournament.beats(left, right) { (left, right) } else { (right, left) };
            winners[node] = winner;
            tournament.losers[node] = loser;
        }
        tournament.losers[0] = if runs > 1 { winners[1] } else { 0 };
        tournament
    }

    /// Run `run`'s entry at its `next` place, if it has one.
    fn head(&self, run: usize) -> Option<Head<'a>> {
        let changes = self.changes[run];
        let at = self.next[run];
        (at < changes.groups.len()).then(|| {
            let (key, value) = changes.chunk.get(at);
            Head { stage: changes.stage, group: changes.groups[at], key: OrderedKey::new(key), value, run }
        })
    }

    /// Whether run `a`'s head is taken before run `b`'s.
    fn beats(&self, a: usize, b: usize) -> bool {
        match (&self.heads[a], &self.heads[b]) {
            (Some(a), Some(b)) => a.precedes(b),
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// The least head of all runs, its run's next entry put in its place.
    fn pop(&mut self) -> Option<Head<'a>> {
        // No run at all leaves the winner's place naming none.
        let run = self.losers[0];
        let taken = self.heads.get(run).copied().flatten()?;
        self.next[run] += 1;
        self.heads[run] = self.head(run);
        // Replay run's path: at each node, the one of the two that loses stays.
        let mut winner = run;
        let mut node = (self.heads.len() + run) / 2;
        while node >= 1 {
            if self.beats(self.losers[node], winner) {
                std::mem::swap(&mut self.losers[node], &mut winner);
            }
            node /= 2;
        }
        self.losers[0] = winner;
        Some(taken)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    type Change<'a> = (u32, &'a [u8], Option<&'a [u8]>);

    fn round(stage: u32, entries: &[Change<'_>]) -> StateChanges {
        let mut changes = StateChanges::new(stage);
        for &(group, key, value) in entries {
            changes.push(group, key, value);
        }
        let _ = changes.sort();
        changes
    }

    #[test]
    fn the_latest_of_several_rounds_keeps_each_key_once_with_its_newest_value() {
        let older = round(0, &[(1, b"a", Some(b"1")), (1, b"b", Some(b"1")), (2, b"c", Some(b"1"))]);
        let other_stage = round(1, &[(1, b"a", Some(b"s"))]);
        let newer = round(0, &[(1, b"b", None), (2, b"c", Some(b"2")), (2, b"d", Some(b"2"))]);
        let merged = latest_of(&[&older, &other_stage, &newer]);
        let want: Vec<StageEntry<'_>> = vec![
            (0, (1, b"a", Some(b"1"))),
            (0, (1, b"b", None)),
            (0, (2, b"c", Some(b"2"))),
            (0, (2, b"d", Some(b"2"))),
            (1, (1, b"a", Some(b"s"))),
        ];
        assert_eq!(merged, want);
    }

    #[test]
    fn no_rounds_or_empty_ones_merge_to_nothing() {
        assert!(latest_of(&[]).is_empty());
        let empty = round(0, &[]);
        assert!(latest_of(&[&empty, &empty, &empty]).is_empty());
    }

    /// Any number of rounds, of keys short and long, alike in their first sixteen bytes
    /// or not, over several stages and groups: the same as a map written round by round.
    #[test]
    fn any_rounds_merge_as_a_map_written_in_their_order() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut random = move |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % below
        };
        for runs in 1..=13 {
            let keys: Vec<Vec<u8>> = (0..60u8)
                .map(|i| match i % 3 {
                    0 => vec![b'k', i],
                    1 => [b"0123456789abcdef".as_slice(), &[i]].concat(),
                    _ => [b"0123456789abcdef".as_slice(), &[i, 0]].concat(),
                })
                .collect();
            let values: Vec<Vec<u8>> = (0..runs).map(|run| vec![run as u8]).collect();
            let rounds: Vec<StateChanges> = (0..runs)
                .map(|run| {
                    let stage = random(2) as u32;
                    let mut entries: BTreeMap<(u32, &[u8]), Option<&[u8]>> = BTreeMap::new();
                    for _ in 0..random(40) {
                        let key = &keys[random(keys.len() as u64) as usize];
                        let value = (random(4) > 0).then_some(values[run].as_slice());
                        entries.insert((random(3) as u32, key), value);
                    }
                    let entries: Vec<Change<'_>> = entries.into_iter().map(|((group, key), value)| (group, key, value)).collect();
                    round(stage, &entries)
                })
                .collect();
            // Each key's newest value: written round by round, keyed as the merge orders.
            let mut want = BTreeMap::new();
            for changes in &rounds {
                for (group, key, value) in changes.entries() {
                    want.insert((changes.stage, group, key), value);
                }
            }
            let want: Vec<StageEntry<'_>> = want.into_iter().map(|((stage, group, key), value)| (stage, (group, key, value))).collect();
            let refs: Vec<&StateChanges> = rounds.iter().collect();
            assert_eq!(latest_of(&refs), want, "{runs} rounds");
        }
    }
}
