"""A lean preprocessed Atari env: gymnasium's Atari preprocessing and frame stack in one step.

``make_atari("ALE/Pong-v5", frame_skip=4, screen_size=84, stack=4, noop_max=30, ...)``
gives exactly what ``gym.make(env_id, frameskip=1, ...)`` wrapped in
``AtariPreprocessing(noop_max, frame_skip, screen_size, terminal_on_life_loss)`` and
``FrameStackObservation(stack)`` gives (Machado et al. 2018, "Revisiting the Arcade
Learning Environment", JAIR): the same observations, rewards, termination and truncation
flags and noop counts for the same seed and actions (``step_info=True`` also gives the same
info dicts). It calls ``ale_py.ALEInterface`` directly instead of stepping four wrapper
layers once per emulator frame: grayscale screens land in preallocated buffers, max-pooling
and the INTER_AREA resize write in place, and the stack shifts by one memmove, so a step
allocates nothing but the returned observation. That Python layer cost about 130 us per
env step over EnvPool's C++ preprocessing (the emulator itself is the same ALE).

Only grayscale uint8 observations, shaped ``(stack, height, width)`` oldest frame first.
Needs the optional ``atari`` extra (ale-py, opencv-python).
"""

from __future__ import annotations

import re
from ctypes import memmove
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding


def rom_id(env_id: str) -> str:
    """``"ALE/Pong-v5"``, ``"Pong-v5"``, ``"Pong"``, ``"pong"``, ``"SpaceInvaders"`` -> ALE rom
    id (``"pong"``, ``"space_invaders"``); unknown games raise ValueError."""
    from ale_py import roms

    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a str such as 'ALE/Pong-v5', got {env_id!r}")
    name = env_id.split("/")[-1]
    name = re.sub(r"-v\d+$", "", name)
    if name.endswith("NoFrameskip"):
        name = name[: -len("NoFrameskip")]
    rom = name if "_" in name or name.islower() else re.sub(r"(?<!^)(?=[A-Z])", "_", name)
    rom = rom.lower()
    known = roms.get_all_rom_ids()
    if rom not in known:
        raise ValueError(f"env_id {env_id!r}: no ALE rom named {rom!r} (known: {sorted(known)})")
    return rom


class AtariEnv(gym.Env):
    """One ALE game with noop reset, frame skip with max-pooling of the last two frames,
    grayscale, INTER_AREA resize and a frame stack (see the module docstring).

    Defaults follow ALE v5 ids (sticky actions 0.25, 108K frames per episode) and
    AtariPreprocessing. ``step_info=True`` adds ALE's ``lives`` / ``episode_frame_number``
    / ``frame_number`` (and ``seeds`` on a seeded reset) to infos; off by default because
    a vector env ships every non-empty info to the parent. ``cv2_threads`` (default 1)
    sets OpenCV's thread count for the whole process that builds the env (a vector env's
    worker); ``None`` leaves it alone.

    ``copy_obs=False`` returns the internal stack itself, valid until the next ``step`` or
    ``reset``: enough for a vector env that copies each observation into its batch, wrong
    for one that keeps ``final_obs`` across a same-step reset (keep the default there).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 60}

    def __init__(
        self,
        *,
        game: str,
        frame_skip: int = 4,
        screen_size: int | tuple[int, int] = 84,
        stack: int = 4,
        noop_max: int = 30,
        terminal_on_life_loss: bool = False,
        repeat_action_probability: float = 0.25,
        max_num_frames_per_episode: int | None = 108_000,
        full_action_space: bool = False,
        mode: int | None = None,
        difficulty: int | None = None,
        step_info: bool = False,
        copy_obs: bool = True,
        render_mode: str | None = None,
        cv2_threads: int | None = 1,
    ) -> None:
        import ale_py
        import cv2

        _check_int("frame_skip", frame_skip, low=1)
        _check_int("stack", stack, low=1)
        _check_int("noop_max", noop_max, low=0)
        if max_num_frames_per_episode is not None:
            _check_int("max_num_frames_per_episode", max_num_frames_per_episode, low=1)
        if isinstance(screen_size, tuple) and len(screen_size) == 2:
            for size in screen_size:
                _check_int("screen_size", size, low=1)
            width, height = screen_size
        else:
            _check_int("screen_size", screen_size, low=1)
            width = height = screen_size  # type: ignore[assignment]
        if not 0.0 <= repeat_action_probability <= 1.0:
            raise ValueError(
                f"repeat_action_probability must be in [0, 1], got {repeat_action_probability!r}"
            )
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if cv2_threads is not None:
            _check_int("cv2_threads", cv2_threads, low=0)
            # Process-wide on purpose: OpenCV's pool costs more CPU than it saves on one
            # small resize (measured 433 vs 450 us per Pong step with 1 vs 2 threads).
            cv2.setNumThreads(cv2_threads)

        self._cv2_resize, self._inter_area = cv2.resize, cv2.INTER_AREA
        self._game = rom_id(game)
        self._mode, self._difficulty = mode, difficulty
        self.frame_skip = frame_skip
        self.noop_max = noop_max
        self.terminal_on_life_loss = terminal_on_life_loss
        self.step_info = step_info
        self.copy_obs = copy_obs
        self.render_mode = render_mode

        self.ale = ale_py.ALEInterface()
        self.ale.setLoggerMode(ale_py.LoggerMode.Error)
        self.ale.setFloat("repeat_action_probability", float(repeat_action_probability))
        if max_num_frames_per_episode is not None:
            self.ale.setInt("max_num_frames_per_episode", max_num_frames_per_episode)
        self._seed_game(None)
        self._load_game()
        legal = self.ale.getLegalActionSet() if full_action_space else None
        self._actions = list(legal if legal is not None else self.ale.getMinimalActionSet())
        if noop_max > 0 and self._actions[0] != ale_py.Action.NOOP:
            raise ValueError(f"noop_max={noop_max} needs action 0 to be NOOP in {game!r}")

        screen_h, screen_w = self.ale.getScreenDims()
        # Two raw frames for max-pooling (index 0: the last frame, and the pooled result).
        self._raw = [np.zeros((screen_h, screen_w), np.uint8) for _ in range(2)]
        self._stack = np.zeros((stack, height, width), np.uint8)
        self._last = self._stack[-1]  # the newest frame: the resize writes here
        # Shifting the stack by one frame is one overlapping memmove (numpy would copy the
        # overlapping source to a temporary first); the array never moves, so the
        # addresses are fixed.
        frame_bytes = height * width
        self._shift = (
            self._stack.ctypes.data,
            self._stack.ctypes.data + frame_bytes,
            frame_bytes * (stack - 1),
        )
        self._dsize = (width, height)
        self._lives = 0
        self.action_space = spaces.Discrete(len(self._actions))
        self.observation_space = spaces.Box(0, 255, (stack, height, width), np.uint8)

    # -- seeding, as ale_py's AtariEnv does it (so the same seed gives the same game) ------
    def _seed_game(self, seed: int | None) -> tuple[int, int]:
        np_seed, ale_seed = np.random.SeedSequence(seed).generate_state(n_words=2)
        self._np_random, _ = seeding.np_random(int(np_seed))
        self.ale.setInt("random_seed", np.int32(ale_seed))
        return np_seed, ale_seed

    def _load_game(self) -> None:
        from ale_py import roms

        self.ale.loadROM(roms.get_rom_path(self._game))
        if self._mode is not None:
            self.ale.setMode(self._mode)
        if self._difficulty is not None:
            self.ale.setDifficulty(self._difficulty)

    def _info(self) -> dict[str, Any]:
        ale = self.ale
        return {
            "lives": ale.lives(),
            "episode_frame_number": ale.getEpisodeFrameNumber(),
            "frame_number": ale.getFrameNumber(),
        }

    # -- gymnasium API -----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        info = self._reset_game(seed)
        noops = self._np_random.integers(1, self.noop_max + 1) if self.noop_max > 0 else 0
        ale, noop = self.ale, self._actions[0]
        for _ in range(noops):
            ale.act(noop)
            if ale.game_over():
                # Rare (an episode shorter than the noops): the wrappers reset with the seed.
                info = self._reset_game(seed)
        if self.step_info:
            info.update(self._info())
        self._lives = ale.lives()
        raw0, raw1 = self._raw
        ale.getScreenGrayscale(raw0)
        raw1.fill(0)
        self._pool_into_last()
        self._stack[:-1] = self._last  # FrameStackObservation pads with the reset frame
        return self._obs(), info

    def _reset_game(self, seed: int | None) -> dict[str, Any]:
        seeds = None
        if seed is not None:
            seeds = self._seed_game(seed)
            self._load_game()
        self.ale.reset_game()
        if not self.step_info:
            return {}
        info: dict[str, Any] = self._info()
        if seeds is not None:
            info["seeds"] = seeds
        return info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        try:
            ale_action = self._actions[action] if action >= 0 else None
        except (IndexError, TypeError):
            ale_action = None
        if ale_action is None:
            raise ValueError(f"action must be an int in [0, {len(self._actions)}), got {action!r}")
        ale, raw0, raw1 = self.ale, self._raw[0], self._raw[1]
        skip = self.frame_skip
        reward, terminated, truncated = 0.0, False, False
        for t in range(skip):
            reward += ale.act(ale_action)
            if self.terminal_on_life_loss:
                lives = ale.lives()
                life_lost = lives < self._lives
                self._lives = lives
            else:
                life_lost = False
            if life_lost or ale.game_over():
                terminated = life_lost or ale.game_over(with_truncation=False)
                truncated = ale.game_truncated()
                break
            # Like AtariPreprocessing: a frame cut short by the episode's end keeps the
            # buffers of the previous step (already pooled into raw0).
            if t == skip - 2:
                ale.getScreenGrayscale(raw1)
            elif t == skip - 1:
                ale.getScreenGrayscale(raw0)
        memmove(*self._shift)  # oldest first: drop frame 0, move the rest down one
        self._pool_into_last()
        return self._obs(), reward, terminated, truncated, self._info() if self.step_info else {}

    def _pool_into_last(self) -> None:
        raw0, raw1 = self._raw
        if self.frame_skip > 1:
            np.maximum(raw0, raw1, out=raw0)
        last = self._last
        resized = self._cv2_resize(raw0, self._dsize, dst=last, interpolation=self._inter_area)
        if resized is not last:  # cv2 declined the destination: copy (never seen)
            last[...] = resized

    def _obs(self) -> np.ndarray:
        return self._stack.copy() if self.copy_obs else self._stack

    def render(self) -> np.ndarray | None:
        if self.render_mode == "rgb_array":
            return self.ale.getScreenRGB()
        return None

    def get_action_meanings(self) -> list[str]:
        return [action.name for action in self._actions]


def make_atari(env_id: str, **options: Any) -> AtariEnv:
    """The lean equivalent of ``FrameStackObservation(AtariPreprocessing(gym.make(env_id,
    frameskip=1, repeat_action_probability=...), noop_max, frame_skip, screen_size,
    terminal_on_life_loss), stack)``. ``options`` are :class:`AtariEnv`'s keyword
    arguments (an unknown name raises TypeError there)."""
    return AtariEnv(game=env_id, **options)


def _check_int(name: str, value: Any, *, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value!r}")
