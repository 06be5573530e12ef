//! What a run recorded of its resources' outcomes (spec §5.5): once counted, an outcome stands for
//! the run — an undone skip, a Resource Request deleted and created again under the same binding
//! name, or a binding set back by hand moves no count and is never started again by that run.
//!
//! Successes and skips are recorded per group as sets of indexes into the group's snapshot order,
//! written in Kubernetes' interval format (`"0-479,482,490-499"`, as a Job's `completedIndexes`):
//! a group that went as planned records `"0-<n-1>"` whatever its size. Failures keep their own
//! list with the detail (`failedResources`).

use std::collections::HashMap;
use std::fmt;

use super::snapshot::{Snapshot, SnapshotResource};
use crate::api::{GroupStatus, ResourceFailure};

/// A set of indexes in Kubernetes' interval format: ascending, comma-separated, each a number or
/// an inclusive range `a-b`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexSet {
    /// Disjoint, not adjacent, ascending inclusive ranges.
    ranges: Vec<(usize, usize)>,
}

/// Why a recorded index set cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not an ascending list of indexes and ranges (\"0-3,7\"): {why}")]
pub struct IndexSetError {
    text: String,
    why: &'static str,
}

impl IndexSet {
    /// Reads the interval format; the empty string is the empty set.
    pub fn parse(text: &str) -> Result<IndexSet, IndexSetError> {
        let err = |why| IndexSetError {
            text: text.chars().take(64).collect(),
            why,
        };
        let mut set = IndexSet::default();
        if text.is_empty() {
            return Ok(set);
        }
        for item in text.split(',') {
            let number = |s: &str| {
                if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err("not a number"));
                }
                s.parse::<usize>().map_err(|_| err("a number too large"))
            };
            let (lo, hi) = match item.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => {
                    let n = number(item)?;
                    (n, n)
                }
            };
            if lo > hi {
                return Err(err("a range that runs backwards"));
            }
            if set.ranges.last().is_some_and(|&(_, last)| lo <= last) {
                return Err(err("not ascending"));
            }
            set.push_range(lo, hi);
        }
        Ok(set)
    }

    fn push_range(&mut self, lo: usize, hi: usize) {
        match self.ranges.last_mut() {
            Some((_, last)) if *last + 1 == lo => *last = hi,
            _ => self.ranges.push((lo, hi)),
        }
    }

    pub fn contains(&self, index: usize) -> bool {
        let at = self.ranges.partition_point(|&(_, hi)| hi < index);
        self.ranges.get(at).is_some_and(|&(lo, _)| lo <= index)
    }

    /// Adds `index`, merging it with the ranges it touches.
    pub fn insert(&mut self, index: usize) {
        let at = self.ranges.partition_point(|&(_, hi)| hi < index);
        if self.ranges.get(at).is_some_and(|&(lo, _)| lo <= index) {
            return;
        }
        let joins_before = at > 0 && self.ranges[at - 1].1 + 1 == index;
        let joins_after = self.ranges.get(at).is_some_and(|&(lo, _)| lo == index + 1);
        match (joins_before, joins_after) {
            (true, true) => {
                self.ranges[at - 1].1 = self.ranges[at].1;
                self.ranges.remove(at);
            }
            (true, false) => self.ranges[at - 1].1 = index,
            (false, true) => self.ranges[at].0 = index,
            (false, false) => self.ranges.insert(at, (index, index)),
        }
    }

    pub fn len(&self) -> usize {
        self.ranges.iter().map(|&(lo, hi)| hi - lo + 1).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The highest index, if any.
    pub fn last(&self) -> Option<usize> {
        self.ranges.last().map(|&(_, hi)| hi)
    }

    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.ranges.iter().flat_map(|&(lo, hi)| lo..=hi)
    }
}

impl fmt::Display for IndexSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(lo, hi)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match hi - lo {
                0 => write!(f, "{lo}")?,
                // Two neighbours read better listed than as a range, as Kubernetes writes them.
                1 => write!(f, "{lo},{hi}")?,
                _ => write!(f, "{lo}-{hi}")?,
            }
        }
        Ok(())
    }
}

/// Where each resource that sits in several groups of a snapshot sits: (group, index) per
/// occurrence, keyed by (namespace, binding). Computed once per snapshot; most snapshots have
/// none, and a resource in one group needs no lookup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overlaps(HashMap<(String, String), Vec<(usize, usize)>>);

impl Overlaps {
    pub fn of(snapshot: &Snapshot) -> Overlaps {
        let mut seen: HashMap<(&str, &str), Vec<(usize, usize)>> = HashMap::new();
        for (g, group) in snapshot.groups.iter().enumerate() {
            for (i, r) in group.resources.iter().enumerate() {
                seen.entry((&r.namespace, &r.binding)).or_default().push((g, i));
            }
        }
        Overlaps(
            seen.into_iter()
                .filter(|(_, at)| at.len() > 1)
                .map(|((ns, b), at)| ((ns.to_string(), b.to_string()), at))
                .collect(),
        )
    }

    /// Whether no resource sits in more than one group (most snapshots).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The places of `resource` in other groups than `group`.
    fn elsewhere<'o>(&'o self, resource: &SnapshotResource, group: usize) -> impl Iterator<Item = (usize, usize)> + 'o {
        let at = if self.0.is_empty() {
            None
        } else {
            self.0.get(&(resource.namespace.clone(), resource.binding.clone()))
        };
        at.into_iter().flatten().copied().filter(move |&(g, _)| g != group)
    }
}

/// An outcome the run's status records for a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded<'r> {
    /// Counted Succeeded in the group asked about (`here`), or in another group holding it too.
    Succeeded {
        here: bool,
    },
    Skipped,
    Failed(&'r ResourceFailure),
}

/// One group's recorded successes and skips, read from its status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupRecord {
    pub succeeded: IndexSet,
    pub skipped: IndexSet,
}

impl GroupRecord {
    /// The record of `status`, for a snapshot group of `size` resources. A record that cannot be
    /// read, or names an index the group does not have, is not this run's (someone edited the
    /// status): it reads as empty, and the group's resources are judged by their bindings.
    pub fn read(status: &GroupStatus, size: usize) -> GroupRecord {
        let set = |text: &str| {
            IndexSet::parse(text)
                .ok()
                .filter(|s| s.last().is_none_or(|last| last < size))
                .unwrap_or_default()
        };
        GroupRecord {
            succeeded: set(&status.succeeded_indexes),
            skipped: set(&status.skipped_indexes),
        }
    }

    /// Writes the record into the group's status.
    pub fn write(&self, status: &mut GroupStatus) {
        status.succeeded_indexes = self.succeeded.to_string();
        status.skipped_indexes = self.skipped.to_string();
    }
}

/// Everything a run's status records of its resources' outcomes, per group of its snapshot.
#[derive(Debug, Clone, Default)]
pub struct Records<'r> {
    statuses: &'r [GroupStatus],
    /// Per snapshot group; `None` where the status records no group of that name at that place.
    groups: Vec<Option<GroupRecord>>,
    overlaps: Option<&'r Overlaps>,
}

impl<'r> Records<'r> {
    /// The records of `statuses` (the run's `status.rolloutGroups`, matched to the snapshot's
    /// groups by place and name).
    pub fn read(statuses: &'r [GroupStatus], snapshot: &Snapshot, overlaps: &'r Overlaps) -> Records<'r> {
        let groups = snapshot
            .groups
            .iter()
            .enumerate()
            .map(|(i, g)| {
                statuses
                    .get(i)
                    .filter(|s| s.name == g.name)
                    .map(|s| GroupRecord::read(s, g.resources.len()))
            })
            .collect();
        Records {
            statuses,
            groups,
            overlaps: Some(overlaps),
        }
    }

    /// No records: judge by the bindings alone.
    pub fn none() -> Records<'static> {
        Records::default()
    }

    /// The failures alone (the views of single resources, which have no snapshot places).
    pub fn failures(statuses: &'r [GroupStatus]) -> Records<'r> {
        Records {
            statuses,
            ..Records::default()
        }
    }

    /// The run's `status.rolloutGroups` the records were read from.
    pub fn statuses(&self) -> &'r [GroupStatus] {
        self.statuses
    }

    /// The record of group `group`, if the status has one.
    pub fn group(&self, group: usize) -> Option<&GroupRecord> {
        self.groups.get(group).and_then(Option::as_ref)
    }

    /// What the run recorded for `resource`, the `index`th of group `group`: a failure in any
    /// group (failures are kept by name), else its success or skip in this group, else in
    /// another group that holds it too.
    pub fn of(&self, (group, index): (usize, usize), resource: &SnapshotResource) -> Option<Recorded<'r>> {
        if let Some(f) = super::run::recorded_failure(self.statuses, resource) {
            return Some(Recorded::Failed(f));
        }
        let at = |g: usize, i: usize| {
            let record = self.group(g)?;
            if record.succeeded.contains(i) {
                Some(Recorded::Succeeded { here: g == group })
            } else if record.skipped.contains(i) {
                Some(Recorded::Skipped)
            } else {
                None
            }
        };
        at(group, index).or_else(|| self.overlaps?.elsewhere(resource, group).find_map(|(g, i)| at(g, i)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use std::collections::BTreeSet;

    #[test]
    fn index_sets_read_and_write_the_interval_format() {
        let cases: &[(&str, Result<&str, &str>)] = &[
            ("", Ok("")),
            ("0", Ok("0")),
            ("0-4", Ok("0-4")),
            ("0,1", Ok("0,1")),
            ("0-1", Ok("0,1")),
            ("0-3,4-6", Ok("0-6")),
            ("1,3,5-7,9", Ok("1,3,5-7,9")),
            ("3,1", Err("not ascending")),
            ("1-3,2", Err("not ascending")),
            ("1,1", Err("not ascending")),
            ("4-2", Err("a range that runs backwards")),
            ("a", Err("not a number")),
            ("-1", Err("not a number")),
            ("1,", Err("not a number")),
            (" 1", Err("not a number")),
            ("1-2-3", Err("not a number")),
            ("99999999999999999999999", Err("a number too large")),
        ];
        for (text, want) in cases {
            let got = IndexSet::parse(text).map(|s| s.to_string());
            match (want, got) {
                (Ok(w), Ok(g)) => assert_eq!(&g, w, "{text:?}"),
                (Err(why), Err(e)) => assert_eq!(e.why, *why, "{text:?}"),
                (want, got) => panic!("{text:?}: want {want:?}, got {got:?}"),
            }
        }
    }

    /// Against a plain set of numbers: whatever is inserted in whatever order, the set holds
    /// exactly those, writes them ascending and reads back to itself.
    #[test]
    fn index_sets_agree_with_a_plain_set() {
        let seed = std::env::var("INDEX_SET_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x0001_D5E7_2026_u64);
        println!("INDEX_SET_SEED={seed}");
        let mut rng = SplitMix64(seed);
        for case in 0..3000 {
            let size = rng.range(1, 80) as usize;
            let mut set = IndexSet::default();
            let mut oracle = BTreeSet::new();
            for _ in 0..rng.range(0, 120) {
                let i = rng.below(size as u64) as usize;
                set.insert(i);
                oracle.insert(i);
            }
            let what = || format!("INDEX_SET_SEED={seed} case {case}: {oracle:?}");
            assert_eq!(
                set.iter().collect::<Vec<_>>(),
                oracle.iter().copied().collect::<Vec<_>>(),
                "{}",
                what()
            );
            assert_eq!(set.len(), oracle.len(), "{}", what());
            for i in 0..size + 2 {
                assert_eq!(set.contains(i), oracle.contains(&i), "{} index {i}", what());
            }
            let written = set.to_string();
            let want: Vec<String> = oracle.iter().map(|i| i.to_string()).collect();
            let expanded: Vec<String> = written
                .split(',')
                .filter(|s| !s.is_empty())
                .flat_map(|item| match item.split_once('-') {
                    Some((a, b)) => (a.parse::<usize>().unwrap()..=b.parse().unwrap())
                        .map(|i| i.to_string())
                        .collect::<Vec<_>>(),
                    None => vec![item.to_string()],
                })
                .collect();
            assert_eq!(expanded, want, "{} wrote {written:?}", what());
            assert_eq!(
                IndexSet::parse(&written).as_ref(),
                Ok(&set),
                "{} wrote {written:?}",
                what()
            );
        }
    }

    #[test]
    fn a_record_naming_an_index_the_group_lacks_reads_as_none() {
        let status = GroupStatus {
            succeeded_indexes: "0-4".into(),
            skipped_indexes: "x".into(),
            ..Default::default()
        };
        let record = GroupRecord::read(&status, 4);
        assert!(record.succeeded.is_empty(), "index 4 of a group of 4");
        assert!(record.skipped.is_empty(), "unreadable");
        let record = GroupRecord::read(&status, 5);
        assert_eq!(record.succeeded.len(), 5);
    }
}
