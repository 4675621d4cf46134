"""A restart reads each tenant's models' output lengths back from the stored program ends
(``Repository.restart_events`` over ``learned.RELEARNED``) and predicts them as before."""

from __future__ import annotations

from agentconsole.scheduler.learned import RELEARNED
from agentconsole.server.store import Store
from tests.scheduler.relearn_helpers import events_of, new_driver, run_program

#: the latest ends read per tenant and group: few, so a group's window is passed here
PER_GROUP = 2


def test_a_restart_reads_back_a_models_output_lengths_past_its_workloads_window(
    store: Store,
) -> None:
    """alpha's ``rare`` model ran one coding program; three coding programs of ``common``
    ended after it. Grouped by kind and workload alone, rare's end fell out of the window and
    the restart predicted rare's calls by alpha's mean over all its calls."""
    first = new_driver()
    events_of(first).subscribe(store.writer.emit)
    coding = {"workload": "coding"}
    run_program(first, "rare", "alpha", {**coding, "model": "rare"}, [4_000, 3_000])
    for k in range(PER_GROUP + 1):
        run_program(first, f"common-{k}", "alpha", {**coding, "model": "common"}, [30])
    run_program(first, "other", "bravo", {**coding, "model": "rare"}, [10])
    store.writer.flush().result(10)
    before = first.controller.output_lengths

    second = new_driver()
    second.relearn(store.repo.restart_events(RELEARNED, PER_GROUP).latest)
    after = second.controller.output_lengths
    for tenant, model in (("alpha", "rare"), ("alpha", "common"), ("alpha", ""), ("bravo", "rare")):
        assert after.predict(tenant, model) == before.predict(tenant, model), (tenant, model)
    assert after.predict("alpha", "rare") != after.predict("alpha")  # its own, not alpha's mean
