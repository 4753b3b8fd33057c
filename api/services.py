"""The app's routine services, made together on first use, and the route dependencies that serve them.

Temporal (api.temporal)          the client, connected on first use
RoutineStore (api.routines)      routines and their versions
Estimates (api.routines)         the cost ceiling of a run
RunReads, RunStarts (api.runs)   reading, listing and cancelling runs; starting runs and re-runs
SchedulesService (api.schedules) schedules and the scheduled run start
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from api.calls.settings import CallSettings
from api.routines.estimates import Estimates
from api.routines.store import RoutineStore
from api.runs.reads import RunReads
from api.runs.starts import RunStarts
from api.schedules.service import SchedulesService
from api.temporal import Temporal


@dataclass(frozen=True)
class RoutineServices:
    """The services of routines, runs and schedules of one app, over its engine and one Temporal client."""

    routines: RoutineStore
    reads: RunReads
    starts: RunStarts
    schedules: SchedulesService
    estimates: Estimates


def routine_services(request: Request) -> RoutineServices:
    """The app's routine services (`app.state.routine_services`), made on first use."""
    state = request.app.state
    services: RoutineServices | None = getattr(state, "routine_services", None)
    if services is None:
        temporal = Temporal(state.settings)
        routines = RoutineStore(state.engine, state.checkers)
        calls = getattr(state, "calls", None)  # the call service's settings: its unit prices and times
        estimates = Estimates(
            state.engine, routines, state.checkers, calls.settings if calls else CallSettings()
        )
        reads = RunReads(state.engine, temporal)
        starts = RunStarts(state.engine, temporal, routines, reads, estimates)
        schedules = SchedulesService(temporal, routines, starts)
        services = RoutineServices(routines, reads, starts, schedules, estimates)
        state.routine_services = services
    return services


Services = Annotated[RoutineServices, Depends(routine_services)]


def _routines(services: Services) -> RoutineStore:
    return services.routines


def _reads(services: Services) -> RunReads:
    return services.reads


def _starts(services: Services) -> RunStarts:
    return services.starts


def _schedules(services: Services) -> SchedulesService:
    return services.schedules


def _estimates(services: Services) -> Estimates:
    return services.estimates


Routines = Annotated[RoutineStore, Depends(_routines)]
Runs = Annotated[RunReads, Depends(_reads)]
Starts = Annotated[RunStarts, Depends(_starts)]
Schedules = Annotated[SchedulesService, Depends(_schedules)]
EstimatesOf = Annotated[Estimates, Depends(_estimates)]
