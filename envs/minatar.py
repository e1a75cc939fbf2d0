"""MinAtar's gym env with faster game engines that keep its rules exactly.

MinAtar's games (Young & Tian 2019) are numpy code written for clarity: SpaceInvaders
shifts its bullet and alien maps with ``np.roll`` (three calls a step, each about 10 us
of Python around a 100-cell copy) and tests columns with ``np.sum(...) > 0``. On this
2-core machine its game logic took about 31 us a step against Breakout's 9, and was the
larger half of an Ape-X actor's CPU per step. :class:`SpaceInvadersEngine` steps the
same game with slice copies and ``any()``: the same state, rewards, terminals and
random draws, step for step (``tests/envs/test_minatar.py`` plays both side by side).

Seaquest keeps its objects in short Python lists and is cheaper (about 3.1 us a step,
``act`` plus ``state``, with random play), but that is paid on every step: ``act`` compares
positions as sliced lists (``bullet[0:2] == x[0:2]``) and walks empty lists, and
``state`` writes each object into a fresh numpy array one indexed write at a time.
:class:`SeaquestEngine` compares ints, skips empty lists, and writes the frame as bytes
over a cached copy of its gauge row, viewed as the same bool array: 1.7 us a step
(random play; 6.0 against 10.1 us with the difficulty at its floor, an enemy spawning
every step), and an Ape-X actor's CPU per Seaquest step went from about 45 to 43 us
(median of 5 runs each, load 4-5). It updates upstream's lists in upstream's order and
removes from them by value as upstream does, so even its quirks carry over.

:class:`MinAtarEnv` is ``minatar.gym.BaseEnv`` with the game swapped for its engine
here when there is one; :mod:`envs.registry` registers the MinAtar ids with it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.minatar_import import import_minatar

import_minatar()  # before minatar's own imports: its display libraries load on first use

from minatar.environments import seaquest, space_invaders  # noqa: E402
from minatar.gym import BaseEnv  # noqa: E402


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


# Seaquest's frame as bytes: cell (y, x) of channel c is byte 100 * y + 10 * x + c.
_SEAQUEST_SHAPE = (10, 10, 10)
_BOOL = np.dtype(bool)


class SeaquestEngine(seaquest.Env):
    """MinAtar's Seaquest on upstream's own lists and in upstream's order of updates and
    removals (``list.remove`` by value, loops over ``reversed``), so every odd case stays
    as it is: a sub shot down on its own move still fires, a full surfacing leaves the
    diver count at -1. What changes is the cost of a step: positions compared as ints
    rather than as sliced lists, empty lists skipped, and the frame written as bytes."""

    def act(self, a: int) -> tuple[Any, bool]:
        r: Any = 0
        if self.terminal:
            return r, self.terminal
        a = self.action_map[a]
        if self.e_spawn_timer == 0:
            self._spawn_enemy()
            self.e_spawn_timer = self.e_spawn_speed
        if self.d_spawn_timer == 0:
            self._spawn_diver()
            self.d_spawn_timer = seaquest.diver_spawn_speed

        sx, sy = self.sub_x, self.sub_y
        if a == "f" and self.shot_timer == 0:
            self.f_bullets.append([sx, sy, self.sub_or])
            self.shot_timer = seaquest.shot_cool_down
        elif a == "l":
            if sx > 0:
                sx = self.sub_x = sx - 1
            self.sub_or = False
        elif a == "r":
            if sx < 9:
                sx = self.sub_x = sx + 1
            self.sub_or = True
        elif a == "u":
            if sy > 0:
                sy = self.sub_y = sy - 1
        elif a == "d":
            if sy < 8:
                sy = self.sub_y = sy + 1

        bullets, fishes, subs = self.f_bullets, self.e_fish, self.e_subs
        terminal = False
        if bullets:
            for bullet in reversed(bullets):
                bx = bullet[0] = bullet[0] + (1 if bullet[2] else -1)
                if bx < 0 or bx > 9:
                    bullets.remove(bullet)
                    continue
                by = bullet[1]
                for fish in fishes:  # fish are hit before subs
                    if fish[0] == bx and fish[1] == by:
                        fishes.remove(fish)
                        bullets.remove(bullet)
                        r += 1
                        break
                else:
                    for sub in subs:
                        if sub[0] == bx and sub[1] == by:
                            subs.remove(sub)
                            bullets.remove(bullet)
                            r += 1
                            break

        divers = self.divers
        if divers:
            count = self.diver_count
            for diver in reversed(divers):
                if diver[0] == sx and diver[1] == sy and count < 6:
                    divers.remove(diver)
                    count += 1
                elif diver[3] == 0:
                    diver[3] = seaquest.diver_move_interval
                    dx = diver[0] = diver[0] + (1 if diver[2] else -1)
                    if dx < 0 or dx > 9:
                        divers.remove(diver)
                    elif dx == sx and diver[1] == sy and count < 6:
                        divers.remove(diver)
                        count += 1
                else:
                    diver[3] -= 1
            self.diver_count = count

        move_speed = self.move_speed
        enemy_bullets = self.e_bullets
        if subs:
            for sub in reversed(subs):
                # A sub that leaves the board or is shot still shoots below, as upstream's does.
                hit, dead = _advance(sub, subs, bullets, sx, sy, move_speed)
                r += hit
                terminal = terminal or dead
                if sub[4] == 0:
                    sub[4] = seaquest.enemy_shot_interval
                    enemy_bullets.append([sub[0], sub[1], sub[2]])
                else:
                    sub[4] -= 1

        if enemy_bullets:
            for bullet in reversed(enemy_bullets):
                if bullet[0] == sx and bullet[1] == sy:
                    terminal = True
                bx = bullet[0] = bullet[0] + (1 if bullet[2] else -1)
                if bx < 0 or bx > 9:
                    enemy_bullets.remove(bullet)
                elif bx == sx and bullet[1] == sy:
                    terminal = True

        if fishes:
            for fish in reversed(fishes):
                hit, dead = _advance(fish, fishes, bullets, sx, sy, move_speed)
                r += hit
                terminal = terminal or dead

        if self.e_spawn_timer > 0:
            self.e_spawn_timer -= 1
        if self.d_spawn_timer > 0:
            self.d_spawn_timer -= 1
        if self.shot_timer > 0:
            self.shot_timer -= 1
        if self.oxygen <= 0:
            terminal = True
        if sy > 0:
            self.oxygen -= 1
            self.surface = False
        elif not self.surface:
            if self.diver_count == 0:
                terminal = True
            else:
                r += self._surface()
        if terminal:
            self.terminal = True
        return r, self.terminal

    def _spawn_enemy(self) -> None:
        # Upstream's three draws, then its no-head-on rule without building lists.
        lr = self.random.rand() < 1 / 2
        is_sub = self.random.rand() < 1 / 3
        y = self.random.randint(low=1, high=9)
        for enemies in (self.e_subs, self.e_fish):
            for enemy in enemies:
                if enemy[1] == y and enemy[2] != lr:
                    return
        if is_sub:
            self.e_subs.append([0 if lr else 9, y, lr, self.move_speed, seaquest.enemy_shot_interval])
        else:
            self.e_fish.append([0 if lr else 9, y, lr, self.move_speed])

    def state(self) -> np.ndarray:
        # Upstream drops whatever leaves the board before its state is read, so each
        # object's cell is one byte of the flat frame. The gauges come from a cache keyed
        # by what they show: a count of 0 or less (upstream's count goes negative after a
        # full surfacing, and lower with each surfacing after) shows no divers.
        oxygen, divers = self.oxygen, self.diver_count
        key = (oxygen * 10 // seaquest.max_oxygen if oxygen > 0 else 0, divers if divers > 0 else 0)
        gauges = _SEAQUEST_GAUGES.get(key)
        if gauges is None:
            gauges = _SEAQUEST_GAUGES[key] = _seaquest_gauges(*key)
        frame = gauges[:]
        x, row = self.sub_x, 100 * self.sub_y
        frame[row + 10 * x] = 1
        frame[row + 10 * (x - 1 if self.sub_or else x + 1) + 1] = 1
        if self.f_bullets:
            for bullet in self.f_bullets:
                frame[100 * bullet[1] + 10 * bullet[0] + 2] = 1
        if self.e_bullets:
            for bullet in self.e_bullets:
                frame[100 * bullet[1] + 10 * bullet[0] + 4] = 1
        # Enemies and divers with the cell they came from on the trail channel (3).
        for movers, channel in ((self.e_fish, 5), (self.e_subs, 6), (self.divers, 9)):
            for mover in movers:
                x, row = mover[0], 100 * mover[1]
                frame[row + 10 * x + channel] = 1
                back = x - 1 if mover[2] else x + 1
                if 0 <= back <= 9:
                    frame[row + 10 * back + 3] = 1
        return np.ndarray(_SEAQUEST_SHAPE, _BOOL, frame)


def _advance(enemy: list, enemies: list, bullets: list, sx: int, sy: int, move_speed: int) -> tuple[int, bool]:
    """One enemy's (fish or sub) turn in upstream's order: meeting the player's sub where it
    stands, moving on its timer, leaving the board, meeting the sub or a bullet where it
    arrives. Returns (reward, whether the player's sub was hit)."""
    dead = enemy[0] == sx and enemy[1] == sy
    if enemy[3] != 0:
        enemy[3] -= 1
        return 0, dead
    enemy[3] = move_speed
    nx = enemy[0] = enemy[0] + (1 if enemy[2] else -1)
    if nx < 0 or nx > 9:
        enemies.remove(enemy)
        return 0, dead
    ny = enemy[1]
    if nx == sx and ny == sy:
        return 0, True
    for bullet in bullets:
        if bullet[0] == nx and bullet[1] == ny:
            enemies.remove(enemy)
            bullets.remove(bullet)
            return 1, dead
    return 0, dead


def _seaquest_gauges(oxygen_cells: int, divers: int) -> bytearray:
    """The bottom row's oxygen and diver gauges, as upstream's ``state`` slices them."""
    frame = np.zeros(_SEAQUEST_SHAPE, dtype=bool)
    frame[9, 0:oxygen_cells, 7] = 1
    frame[9, 9 - divers:9, 8] = 1
    return bytearray(frame.tobytes())


_SEAQUEST_GAUGES: dict[tuple[int, int], bytearray] = {}


ENGINES: dict[str, type] = {"seaquest": SeaquestEngine, "space_invaders": SpaceInvadersEngine}


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
