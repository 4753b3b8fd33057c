"""`POST /v1/routines/{name}/estimate`: the cost ceiling of a run (api.routines.ceiling), of the routine's
current version (the one a run started now would run, its `uses:` pinned as a start pins them) or of a
routine file sent with the request (checked as a store checks it, never stored).

The inputs are those a run would take: each given value, the defaults of the others. Given every required
input they are checked as a run start checks them (`400 invalid_request`, `field: "inputs"`); without some,
the given values are taken as they are, and a foreach over a missing one is bounded by its `maxItems`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from api.calls.settings import CallSettings
from api.checker import Checkers
from api.db import in_thread
from api.errors import InvalidRequest
from api.rawsql import Reads
from api.registry import catalog
from api.routines.ceiling import ceiling, pin_facts
from api.routines.models import RoutineEstimate
from api.routines.store import RoutineStore, routine_hash
from engine.routine import Routine
from engine.run_inputs import RoutineInputError, resolve_inputs
from packs.resolve import ResolveError


class Estimates:
    """Cost ceilings of the organizations' routines, over one database engine."""

    def __init__(
        self, engine: Engine, routines: RoutineStore, checkers: Checkers, settings: CallSettings
    ) -> None:
        self._engine = engine
        self._routines = routines
        self._checkers = checkers
        self._settings = settings
        self._versions: catalog.KnownVersions = {}

    async def estimate(
        self, *, org_id: str, name: str, inputs: dict[str, Any], yaml: str | None
    ) -> RoutineEstimate:
        """The most a run of the routine with these inputs can cost.

        Raises:
            NotFound: no routine of that name (and no `yaml`). InvalidRequest: the YAML has problems or
                names another routine; the inputs do not fit; a `uses:` no longer resolves.
        """
        if yaml is not None:
            routine = Routine.model_validate(await self._checkers.routine(org_id, yaml))
            if routine.name != name:
                raise InvalidRequest(
                    f"The YAML is routine {routine.name!r}, not {name[:100]!r}: estimate it at "
                    f"/v1/routines/{routine.name}/estimate.",
                    field="yaml",
                )
            return await in_thread(self.of, routine, routine_hash(yaml), inputs)

        def stored() -> RoutineEstimate:
            _, version = self._routines.current_version(org_id=org_id, name=name)
            routine = self._routines.routine_of_version(org_id=org_id, name=name, version=version)
            return self.of(routine, version, inputs)

        return await in_thread(stored)

    def of(
        self,
        routine: Routine,
        version: str,
        inputs: dict[str, Any],
        pins: dict[str, str] | None = None,
        *,
        checked: bool = False,
    ) -> RoutineEstimate:
        """The ceiling of one routine version (in a worker thread): its `uses:` pinned now, or by `pins`;
        `checked`: the inputs are a run start's, already checked with their defaults.

        Raises:
            InvalidRequest: the inputs do not fit; a `uses:` no longer resolves.
        """
        known = inputs if checked else known_inputs(routine, inputs)
        refs = {step.uses: (pins or {}).get(step.uses, step.uses) for step in routine.steps}
        try:
            with Reads(self._engine) as reads:
                facts = pin_facts(reads, refs, self._versions)
        except ResolveError as exc:
            raise InvalidRequest(
                f"Routine {routine.name!r}: a uses: cannot resolve: {exc}", field="yaml"
            ) from None
        return ceiling(routine, version=version, inputs=known, facts=facts, settings=self._settings)


def known_inputs(routine: Routine, given: dict[str, Any]) -> dict[str, Any]:
    """The inputs a run with `given` would have: checked and defaults filled when every required input is
    given; else the given values (refused when the routine has no such input) and the other defaults, their
    values unchecked (a missing one is left out).

    Raises:
        InvalidRequest: `field: "inputs"`, the inputs do not fit (every problem in `problems`).
    """
    missing = [name for name, spec in routine.inputs.items() if spec.required and name not in given]
    unknown = sorted(set(given) - set(routine.inputs))
    if missing and unknown:
        raise InvalidRequest(
            f"The inputs do not fit routine {routine.name!r}: it has no input {unknown[0][:100]!r}.",
            field=f"inputs.{unknown[0][:100]}",
        )
    if missing:
        defaults = {name: spec.default for name, spec in routine.inputs.items() if not spec.required}
        return {**defaults, **given}
    try:
        return resolve_inputs(routine, given)
    except RoutineInputError as exc:
        raise InvalidRequest(
            f"The inputs do not fit routine {routine.name!r}: {exc}", field="inputs", problems=exc.problems
        ) from None
