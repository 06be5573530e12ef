//! What may start an upgrade (spec §14.1): one admission for every start of a group — the
//! `spec.version` patch and the retry label alike — with every reason that holds it, in the spec's
//! order of precedence. The run's evaluation, its `blocked` gauges, its conditions, `status`,
//! `explain` and the forecast all read this one answer.

/// What holds the starts of a group (the `reason` of `upgradeplan_blocked`, spec §9.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Blocked {
    Suspended,
    WindowClosed,
    ConcurrencyLimit,
    /// Held at the revision gate (spec §5.3): the target PromiseRevision does not exist yet.
    RevisionMissing,
    /// A signal gate of the group is closed (spec §13.3).
    GateClosed,
    /// The group completed and the next waits for its soakDuration (spec §13.4).
    Soaking,
    /// The group waits for an UpgradeApproval (spec §13.4).
    AwaitingApproval,
    /// An UpgradeFreeze holds the plan (spec §13.5).
    Frozen,
    /// An UpgradeBudget that selects the plan has no free unit for this run (spec §13.8).
    BudgetExhausted,
}

/// As its label: `forecast -o json`'s wait reasons and the views' JSON read it so.
impl serde::Serialize for Blocked {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl Blocked {
    /// The `reason` label of `upgradeplan_blocked` (spec §9.1).
    pub fn as_str(self) -> &'static str {
        match self {
            Blocked::Suspended => "Suspended",
            Blocked::WindowClosed => "WindowClosed",
            Blocked::ConcurrencyLimit => "ConcurrencyLimit",
            Blocked::RevisionMissing => "RevisionMissing",
            Blocked::GateClosed => "GateClosed",
            Blocked::Soaking => "Soaking",
            Blocked::AwaitingApproval => "AwaitingApproval",
            Blocked::Frozen => "Frozen",
            Blocked::BudgetExhausted => "BudgetExhausted",
        }
    }
}

/// The facts the admission of a group's starts depends on; the run's evaluation gathers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StartFacts {
    /// The run is suspended by its user (a dormant run is never evaluated at all).
    pub suspended: bool,
    /// The group has not been entered: it waits for the soak of the group before it
    /// ([`Blocked::Soaking`]) or for its approval ([`Blocked::AwaitingApproval`]).
    pub entry: Option<Blocked>,
    /// An UpgradeFreeze holds the plan now.
    pub freeze: bool,
    /// The group's windows (without freezes) are open now; windows that do not compile never are.
    pub windows_open: bool,
    /// A signal gate of the group is closed.
    pub gate_closed: bool,
    /// The group's `maxConcurrent`, resolved.
    pub limit: usize,
    /// Upgrades in flight in the group (verifying and asked retries included).
    pub in_flight: usize,
    /// The units the UpgradeBudgets selecting the plan grant the run now, the least of them
    /// (spec §13.8); `None` when no budget selects it.
    pub budget_units: Option<usize>,
}

/// The admission of a group's starts: every reason that holds them, first the one shown first,
/// and how many may go out now (none while anything holds them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StartAdmission {
    pub holds: Vec<Blocked>,
    pub starts: usize,
}

/// Admits a group's starts (spec §14.1), in this order of precedence: `Suspended`; the group not
/// entered (`Soaking`, `AwaitingApproval`); `Frozen` and `WindowClosed`; `GateClosed`;
/// `ConcurrencyLimit`; `BudgetExhausted`. A group not entered has no window, gate or limit of its
/// own yet, but a freeze holds the whole run. Starts: at most the group's free slots and the
/// budgets' units.
pub fn admit_starts(facts: &StartFacts) -> StartAdmission {
    let entered = facts.entry.is_none();
    let holds: Vec<Blocked> = [
        (facts.suspended, Blocked::Suspended),
        (!entered, facts.entry.unwrap_or(Blocked::Soaking)),
        (facts.freeze, Blocked::Frozen),
        (entered && !facts.windows_open, Blocked::WindowClosed),
        (entered && facts.gate_closed, Blocked::GateClosed),
        (entered && facts.in_flight >= facts.limit, Blocked::ConcurrencyLimit),
        (entered && facts.budget_units == Some(0), Blocked::BudgetExhausted),
    ]
    .into_iter()
    .filter_map(|(holds, reason)| holds.then_some(reason))
    .collect();
    let starts = if holds.is_empty() {
        let free = facts.limit.saturating_sub(facts.in_flight);
        facts.budget_units.map_or(free, |units| free.min(units))
    } else {
        0
    };
    StartAdmission { holds, starts }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(limit: usize, in_flight: usize) -> StartFacts {
        StartFacts {
            windows_open: true,
            limit,
            in_flight,
            ..Default::default()
        }
    }

    #[test]
    fn admission_table() {
        use Blocked::*;
        let with = |f: fn(&mut StartFacts)| {
            let mut facts = open(2, 0);
            f(&mut facts);
            facts
        };
        // (case, facts, every hold in precedence order, starts)
        let cases: Vec<(&str, StartFacts, Vec<Blocked>, usize)> = vec![
            ("nothing holds: the free slots", open(3, 1), vec![], 2),
            ("no slot left", open(2, 2), vec![ConcurrencyLimit], 0),
            (
                "over the limit (a lowered limit)",
                open(1, 3),
                vec![ConcurrencyLimit],
                0,
            ),
            ("suspended", with(|f| f.suspended = true), vec![Suspended], 0),
            ("window closed", with(|f| f.windows_open = false), vec![WindowClosed], 0),
            ("frozen, windows open", with(|f| f.freeze = true), vec![Frozen], 0),
            (
                "signal gate closed",
                with(|f| f.gate_closed = true),
                vec![GateClosed],
                0,
            ),
            (
                "everything at once, in precedence order",
                StartFacts {
                    suspended: true,
                    entry: None,
                    freeze: true,
                    windows_open: false,
                    gate_closed: true,
                    limit: 1,
                    in_flight: 1,
                    budget_units: Some(0),
                },
                vec![
                    Suspended,
                    Frozen,
                    WindowClosed,
                    GateClosed,
                    ConcurrencyLimit,
                    BudgetExhausted,
                ],
                0,
            ),
            (
                "soaking: the next group's own rules do not apply yet",
                with(|f| {
                    f.entry = Some(Soaking);
                    f.windows_open = false;
                    f.gate_closed = true;
                }),
                vec![Soaking],
                0,
            ),
            (
                "awaiting approval, suspended and frozen",
                with(|f| {
                    f.entry = Some(AwaitingApproval);
                    f.suspended = true;
                    f.freeze = true;
                }),
                vec![Suspended, AwaitingApproval, Frozen],
                0,
            ),
            ("a limit of 0 starts nothing", open(0, 0), vec![ConcurrencyLimit], 0),
            (
                "a budget's units below the free slots",
                with(|f| f.budget_units = Some(1)),
                vec![],
                1,
            ),
            (
                "the free slots below a budget's units",
                with(|f| f.budget_units = Some(5)),
                vec![],
                2,
            ),
            (
                "a budget with no unit for the run",
                with(|f| f.budget_units = Some(0)),
                vec![BudgetExhausted],
                0,
            ),
            (
                "the group's limit and a budget both hold: both exported, the limit first",
                StartFacts {
                    budget_units: Some(0),
                    ..open(1, 1)
                },
                vec![ConcurrencyLimit, BudgetExhausted],
                0,
            ),
            (
                "not entered: a budget does not hold a group not started",
                with(|f| {
                    f.entry = Some(Soaking);
                    f.budget_units = Some(0);
                }),
                vec![Soaking],
                0,
            ),
        ];
        for (case, facts, holds, starts) in cases {
            let a = admit_starts(&facts);
            assert_eq!((a.holds, a.starts), (holds, starts), "{case}");
        }
    }

    /// The literal rule, checked against every combination of the facts: starts go out only when
    /// nothing holds, never more than the free slots, and the first hold is the highest.
    #[test]
    fn admission_matches_its_definition_for_every_combination() {
        let entries = [None, Some(Blocked::Soaking), Some(Blocked::AwaitingApproval)];
        let mut checked = 0;
        for bits in 0..16u32 {
            for entry in entries {
                for limit in 0..3 {
                    for in_flight in 0..4 {
                        for budget_units in [None, Some(0), Some(1), Some(5)] {
                            let facts = StartFacts {
                                suspended: bits & 1 != 0,
                                freeze: bits & 2 != 0,
                                windows_open: bits & 4 != 0,
                                gate_closed: bits & 8 != 0,
                                entry,
                                limit,
                                in_flight,
                                budget_units,
                            };
                            let a = admit_starts(&facts);
                            let entered_holds = !facts.windows_open
                                || facts.gate_closed
                                || in_flight >= limit
                                || budget_units == Some(0);
                            let anything_holds = facts.suspended
                                || entry.is_some()
                                || facts.freeze
                                || (entry.is_none() && entered_holds);
                            assert_eq!(a.holds.is_empty(), !anything_holds, "{facts:?}");
                            let expected = if anything_holds {
                                0
                            } else {
                                (limit - in_flight).min(budget_units.unwrap_or(usize::MAX))
                            };
                            assert_eq!(a.starts, expected, "{facts:?}");
                            let first = if facts.suspended {
                                Some(Blocked::Suspended)
                            } else if entry.is_some() {
                                entry
                            } else if facts.freeze {
                                Some(Blocked::Frozen)
                            } else {
                                a.holds.first().copied()
                            };
                            assert_eq!(a.holds.first().copied(), first, "{facts:?}");
                            let last = a.holds.last().copied();
                            if budget_units == Some(0) && entry.is_none() {
                                assert_eq!(last, Some(Blocked::BudgetExhausted), "7b comes last: {facts:?}");
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 16 * 3 * 3 * 4 * 4);
    }
}
