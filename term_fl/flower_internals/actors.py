"""Reusing the ClientApp actors of Flower's Ray backend across simulations (opt-in patch ``actor-reuse``).

Flower 1.42's Ray backend starts new ClientApp actors for every simulation
(an actor start per sweep cell: benchmarks/README.md, 'flower_patches').
Inside :func:`reusing_client_actors`, ``RayBackend.build`` reuses the kept
pool when it asks for the same resources and all its actors came back idle,
and ``RayBackend.terminate`` keeps an idle pool running for the next
simulation; a pool left busy or with lost actors is killed.
:func:`kill_actors` ends actors with ``ray.kill`` (Flower's own termination
logs a warning per actor).

Private names: ``raybackend.RayBackend.build`` / ``.terminate`` (replaced
inside the block), ``RayBackend.pool`` / ``.app_fn`` / ``.client_resources``,
``BasicActorPool.pool`` / ``._future_to_actor`` / ``.num_actors`` /
``.client_resources``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .gate import patch_on, private

__all__ = ["RAY_BACKEND", "ActorReuse", "kill_actors", "reusing_client_actors"]

RAY_BACKEND = "flwr.server.superlink.fleet.vce.backend.raybackend"


@dataclass
class ActorReuse:
    """The actor pool kept between simulations by :func:`reusing_client_actors`, and how often it was reused."""

    pool: Any = None
    reused: int = 0
    enabled: bool = True

    def drop(self) -> None:
        """End the kept actors (a simulation ended with actors busy or lost, or the session ends)."""
        pool, self.pool = self.pool, None
        if pool is not None:
            kill_actors(pool)


def kill_actors(pool: Any) -> None:
    """End every ClientApp actor of a Flower ``BasicActorPool`` with ``ray.kill``.

    Flower's ``terminate_all_actors`` asks each idle actor to exit, and each
    logs the warning 'Manually terminating ClientAppActor' as it does.
    """
    import ray

    for actor in [*pool.pool, *pool._future_to_actor.values()]:  # noqa: SLF001
        ray.kill(actor, no_restart=True)


def _idle(pool: Any) -> bool:
    """Every actor of a Flower ``BasicActorPool`` is back in the pool, none lost or busy."""
    return not pool._future_to_actor and len(pool.pool) == pool.num_actors  # noqa: SLF001


@contextmanager
def reusing_client_actors() -> Iterator[ActorReuse]:
    """Inside the block, a simulation reuses the previous one's ClientApp actors (when the patch is on).

    The kept actors are killed when the block ends. Without the patch
    ``actor-reuse`` (or without the fast paths) nothing is patched: every
    simulation starts its own actors, as in Flower (``enabled`` is False).
    """
    raybackend = private(RAY_BACKEND) if patch_on("actor-reuse") else None
    reuse = ActorReuse(enabled=raybackend is not None)
    if raybackend is None:
        yield reuse
        return
    original_build = raybackend.RayBackend.build
    original_terminate = raybackend.RayBackend.terminate

    def build_reusing_actors(self: Any, app_fn: Any) -> None:
        pool = reuse.pool
        if pool is not None and pool.client_resources == self.client_resources and _idle(pool):
            self.pool, self.app_fn = pool, app_fn
            reuse.reused += 1
            return
        reuse.drop()
        original_build(self, app_fn)
        reuse.pool = self.pool

    def keep_idle_actors(self: Any) -> None:
        if self.pool is not None and not _idle(self.pool):
            if reuse.pool is self.pool:
                reuse.drop()
            else:
                kill_actors(self.pool)

    raybackend.RayBackend.build = build_reusing_actors
    raybackend.RayBackend.terminate = keep_idle_actors
    try:
        yield reuse
    finally:
        raybackend.RayBackend.build = original_build
        raybackend.RayBackend.terminate = original_terminate
        reuse.drop()
