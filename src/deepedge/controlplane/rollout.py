"""Pure rollout policy of the control plane: trigger, accuracy gate, canary, rollback.

Every function takes the facts of one window (or one finished job) and returns a decision;
none reads a clock, a file or the store. With ``a_v(w)`` the golden-labelled accuracy of
version ``v`` on window ``w``:

* **Trigger** (in this order): an operator request; ``a_serving(w) < threshold`` outside
  ``cooldown_windows`` after the last update (accuracy drop); ``samples_since_update >=
  sample_count``; ``period_windows`` windows since the last update (schedule).
* **Gate**: a candidate ``c`` trained from parent ``p`` passes when
  ``acc_c(H) >= acc_p(H) + min_gain`` on the held-out golden-labelled split ``H`` of its
  training windows (a first version, with no parent, always passes).
* **Canary**: after ``canary.windows`` windows in which the canary served its share of the
  traffic, it is promoted when ``a_c(S) >= a_serving(S) - tolerance`` on the canary's own
  share ``S`` (both models scored on the same samples); otherwise it is rolled back.
* **Automatic rollback**: a serving version ``v`` that replaced ``u`` is rolled back to
  ``u`` as soon as one window shows ``a_v(w) < a_u(w) - tolerance`` (``u`` is scored in
  the shadow on the same samples), so a bad version never serves a second window.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepedge.controlplane.deployment_spec import GateSpec, TriggerSpec
from deepedge.controlplane.records import TriggerKind
from deepedge.learning.gate import passes_gate as accuracy_gate


@dataclass(frozen=True)
class TriggerFacts:
    window: int
    accuracy: float  # the serving version on the window's golden-labelled sample
    last_update_window: int | None
    samples_since_update: int
    requested: bool


def decide_trigger(policy: TriggerSpec, facts: TriggerFacts) -> TriggerKind:
    if facts.requested:
        return TriggerKind.REQUEST
    since = None if facts.last_update_window is None else facts.window - facts.last_update_window
    cooling = since is not None and since <= policy.cooldown_windows
    if facts.accuracy < policy.accuracy_threshold and not cooling:
        return TriggerKind.ACCURACY_DROP
    if policy.sample_count is not None and facts.samples_since_update >= policy.sample_count:
        return TriggerKind.SAMPLE_COUNT
    if policy.period_windows is not None:
        elapsed = facts.window + 1 if since is None else since
        if elapsed >= policy.period_windows:
            return TriggerKind.SCHEDULE
    return TriggerKind.NONE


def passes_gate(gate: GateSpec, candidate_accuracy: float, parent_accuracy: float | None) -> bool:
    """The one accuracy gate (:mod:`deepedge.learning.gate`), with the deployment's gain."""
    return accuracy_gate(candidate_accuracy, parent_accuracy, gate.min_gain)


def canary_holds(gate: GateSpec, canary_accuracy: float, serving_accuracy: float) -> bool:
    return canary_accuracy >= serving_accuracy - gate.rollback_tolerance - 1e-12


def must_roll_back(gate: GateSpec, served_accuracy: float, previous_accuracy: float | None) -> bool:
    if previous_accuracy is None:
        return False
    return served_accuracy < previous_accuracy - gate.rollback_tolerance - 1e-12
