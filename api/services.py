"""The app's routine services, made together on first use, and the route dependencies that serve them.

Temporal (api.temporal)          the client, connected on first use
RoutineStore (api.routines)      routines and their versions
Estimates (api.routines)         the cost ceiling of a run
RunReads, RunStarts (api.runs)   reading, listing and cancelling runs; starting runs and re-runs
SchedulesService (api.schedules) schedules and the scheduled run start
ForeachLinks (api.runs.links)    whose child the workflow sending a step's call is
Subscriptions, Deliveries         routines' trigger subscriptions; webhook deliveries and their runs
(api.triggers)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from starlette.datastructures import State

from api.calls.settings import CallSettings
from api.routines.estimates import Estimates
from api.routines.store import RoutineStore
from api.runs.links import ForeachLinks
from api.runs.reads import RunReads
from api.runs.starts import RunStarts
from api.schedules.service import SchedulesService
from api.temporal import Temporal
from api.triggers.deliveries import Deliveries
from api.triggers.polls import Polls
from api.triggers.subscriptions import Subscriptions


@dataclass(frozen=True)
class RoutineServices:
    """The services of routines, runs and schedules of one app, over its engine and one Temporal client."""

    routines: RoutineStore
    reads: RunReads
    starts: RunStarts
    schedules: SchedulesService
    links: ForeachLinks
    subscriptions: Subscriptions
    deliveries: Deliveries
    polls: Polls
    estimates: Estimates


async def routine_services(request: Request) -> RoutineServices:
    """The app's routine services (`app.state.routine_services`), made on first use (on the event loop,
    as are the accessors below: a dependency that is a plain function runs in a worker thread, a hop
    each, three for a run start)."""
    return services_of(request.app.state)


def services_of(state: State) -> RoutineServices:
    """The routine services of an app's state, made on first use."""
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
        deliveries = Deliveries(state.engine, state.settings, starts)
        services = RoutineServices(
            routines,
            reads,
            starts,
            SchedulesService(temporal, routines, starts),
            ForeachLinks(temporal),
            Subscriptions(state.engine),
            deliveries,
            Polls(state.engine, state.settings, temporal, deliveries),
            estimates,
        )
        state.routine_services = services
    return services


Services = Annotated[RoutineServices, Depends(routine_services)]


async def _routines(services: Services) -> RoutineStore:
    return services.routines


async def _reads(services: Services) -> RunReads:
    return services.reads


async def _starts(services: Services) -> RunStarts:
    return services.starts


async def _schedules(services: Services) -> SchedulesService:
    return services.schedules


async def _subscriptions(services: Services) -> Subscriptions:
    return services.subscriptions


async def _deliveries(services: Services) -> Deliveries:
    return services.deliveries


async def _polls(services: Services) -> Polls:
    return services.polls


async def _estimates(services: Services) -> Estimates:
    return services.estimates


Routines = Annotated[RoutineStore, Depends(_routines)]
Runs = Annotated[RunReads, Depends(_reads)]
Starts = Annotated[RunStarts, Depends(_starts)]
Schedules = Annotated[SchedulesService, Depends(_schedules)]
SubscriptionsDep = Annotated[Subscriptions, Depends(_subscriptions)]
DeliveriesDep = Annotated[Deliveries, Depends(_deliveries)]
PollsDep = Annotated[Polls, Depends(_polls)]


EstimatesOf = Annotated[Estimates, Depends(_estimates)]
