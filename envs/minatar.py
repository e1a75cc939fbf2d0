"""MinAtar's gym env with faster game engines that keep its rules exactly.

MinAtar's games (Young & Tian 2019) are numpy code written for clarity: SpaceInvaders
shifts its bullet and alien maps with ``np.roll`` (three calls a step, each about 10 us
of Python around a 100-cell copy) and tests columns with ``np.sum(...) > 0``. On this
2-core machine its game logic took about 31 us a step against Breakout's 9, and was the
larger half of an Ape-X actor's CPU per step. :class:`SpaceInvadersEngine` steps the
same game with slice copies and ``any()``: the same state, rewards, terminals and
random draws, step for step (``tests/envs/test_minatar.py`` plays both side by side).

:class:`MinAtarEnv` is ``minatar.gym.BaseEnv`` with the game swapped for its engine
here when there is one; :mod:`envs.registry` registers the MinAtar ids with it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from minatar.environments import space_invaders
from minatar.gym import BaseEnv


def _shift_down(grid: np.ndarray) -> np.ndarray:
    """``np.roll(grid, 1, axis=0)``: every row one down, the last row wrapping to the top."""
    out = np.empty_like(grid)
    out[1:] = grid[:-1]
    out[0] = grid[-1]
    return out


def _shift_columns(grid: np.ndarray, shift: int) -> np.ndarray:
    """``np.roll(grid, shift, axis=1)`` for ``shift`` of +-1 (columns wrap around)."""
    out = np.empty_like(grid)
    if shift > 0:
        out[:, 1:] = grid[:, :-1]
        out[:, 0] = grid[:, -1]
    else:
        out[:, :-1] = grid[:, 1:]
        out[:, -1] = grid[:, 0]
    return out


class SpaceInvadersEngine(space_invaders.Env):
    """MinAtar's SpaceInvaders, stepped without ``np.roll`` and ``np.sum``; the maps
    still hold 0./1. floats as upstream's do, so ``state`` is unchanged."""

    def act(self, a: int) -> tuple[Any, bool]:
        r: Any = 0
        if self.terminal:
            return r, self.terminal
        a = self.action_map[a]
        if a == "f" and self.shot_timer == 0:
            self.f_bullet_map[9, self.pos] = 1
            self.shot_timer = space_invaders.shot_cool_down
        elif a == "l":
            self.pos = max(0, self.pos - 1)
        elif a == "r":
            self.pos = min(9, self.pos + 1)

        # Friendly bullets one row up (the top row leaves), enemy bullets one row down.
        friendly, enemy = self.f_bullet_map, self.e_bullet_map
        friendly[:-1] = friendly[1:]
        friendly[9] = 0
        enemy[1:] = enemy[:-1]  # numpy buffers overlapping copies
        enemy[0] = 0
        if enemy[9, self.pos]:
            self.terminal = True

        aliens = self.alien_map
        if aliens[9, self.pos]:
            self.terminal = True
        if self.alien_move_timer == 0:
            self.alien_move_timer = min(np.count_nonzero(aliens), self.enemy_move_interval)
            if (self.alien_dir < 0 and aliens[:, 0].any()) or (self.alien_dir > 0 and aliens[:, 9].any()):
                self.alien_dir = -self.alien_dir
                if aliens[9].any():
                    self.terminal = True
                aliens = self.alien_map = _shift_down(aliens)
            else:
                aliens = self.alien_map = _shift_columns(aliens, self.alien_dir)
            if aliens[9, self.pos]:
                self.terminal = True
        if self.alien_shot_timer == 0:
            self.alien_shot_timer = space_invaders.enemy_shot_interval
            nearest = self._nearest_alien(self.pos)
            enemy[nearest[0], nearest[1]] = 1

        kills = np.logical_and(aliens, aliens == friendly)
        r += kills.sum()
        aliens[kills] = friendly[kills] = 0

        self.shot_timer -= self.shot_timer > 0
        self.alien_move_timer -= 1
        self.alien_shot_timer -= 1
        if not aliens.any():
            if self.enemy_move_interval > 6 and self.ramping:
                self.enemy_move_interval -= 1
                self.ramp_index += 1
            aliens[0:4, 2:8] = 1
        return r, self.terminal

    def _nearest_alien(self, pos: int) -> list[int] | None:
        columns = self.alien_map.any(axis=0)
        for i in sorted(range(10), key=lambda x: abs(x - pos)):  # upstream's order: ties to the left
            if columns[i]:
                return [int(np.flatnonzero(self.alien_map[:, i] == 1).max()), i]
        return None


ENGINES: dict[str, type] = {"space_invaders": SpaceInvadersEngine}


class MinAtarEnv(BaseEnv):
    """``minatar.gym.BaseEnv`` (same arguments) on the engine of :data:`ENGINES` for its
    game when there is one: the game's random state and ramping carry over, so seeding
    and sticky actions behave as upstream's."""

    def __init__(self, game: str, **kwargs: Any) -> None:
        super().__init__(game, **kwargs)
        engine = ENGINES.get(game)
        if engine is not None:
            upstream = self.game.env
            fast = engine(ramping=upstream.ramping)
            fast.random = upstream.random
            self.game.env = fast
