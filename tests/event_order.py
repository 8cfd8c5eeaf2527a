"""The order a Dagster instance logged a run's events in: storage order, no clocks, so a test of "the
forecast was recorded before its target started" cannot depend on how fast the machine is."""

from dagster import DagsterInstance

from marin_pipelines.steps import Step


def recorded_before_started(
    instance: DagsterInstance, run_ids: list[str], recorded: Step, started: Step
) -> bool:
    """Whether ``recorded``'s materialisation was logged before ``started``'s step began (across the runs,
    in order). Raises ValueError when either event is missing."""
    events = []
    for run_id in run_ids:
        for entry in instance.all_logs(run_id):
            event = entry.dagster_event
            if event is None:
                continue
            if event.event_type_value == "ASSET_MATERIALIZATION":
                events.append(("materialized", event.asset_key.to_user_string()))
            elif event.event_type_value == "STEP_START":
                events.append(("started", event.step_key))
    return events.index(("materialized", recorded.name)) < events.index(
        ("started", started.name.replace("/", "__"))
    )
