"""Ape-X for continuous actions as a builder: TD3 (Fujimoto et al. 2018, "Addressing
Function Approximation Error in Actor-Critic Methods", ICML, arXiv:1802.09477) or DDPG
(Lillicrap et al. 2016) learning from Ape-X's prioritized replay (Horgan et al. 2018,
whose continuous variant is Ape-X DPG). Actors explore with Gaussian noise (or, with
``--noise ou``, an Ornstein-Uhlenbeck process restarted each episode) at scales
sigma_i spread over every env copy, send transitions (one-step by default, TD3's
targets; ``--n-step`` gives Ape-X's uncorrected n-step returns) with initial priorities
from their own critic; the learner's priorities are the critics' TD errors.

The hyperparameters are the Ape-X job's ``learn`` section (an
:class:`~algorithms.dqn.config.ApexConfig`, of which TD3/DDPG use the fields they
share with DQN: lr, gamma, n-step, batch size, tau, hidden sizes, replay ratio, the
actors' and learner's pace) and ``continuous`` section
(:class:`~algorithms.td3.config.ContinuousConfig`).
"""

from __future__ import annotations

from typing import Any

from algorithms.actor_learner import Learner
from algorithms.builder import Builder, EnvSpec, Flow
from algorithms.dqn.apex import ApexDPGActor
from algorithms.dqn.builder import DQNBuilder
from algorithms.dqn.config import ApexConfig
from algorithms.params import require
from algorithms.td3.config import CONTINUOUS_DEFAULTS, ContinuousConfig
from algorithms.td3.ddpg import DDPG


class TD3Builder(Builder):
    """Ape-X TD3 (``algorithm="td3"``) or Ape-X DDPG (``"ddpg"``) on a Box action
    space. ``network(observation_space, action_space) -> (actor, critic)`` replaces
    the default MLPs (TD3's second critic is a re-initialized copy of ``critic``)."""

    algorithm_base, actor_base, learner_base = DDPG, ApexDPGActor, Learner

    def __init__(self, *, algorithm_name: str, learn: ApexConfig, continuous: ContinuousConfig, spec: EnvSpec,
                 network: Any = None, algorithm: type | None = None, actor: type | None = None,
                 learner: type | None = None) -> None:
        from gymnasium import spaces

        if algorithm_name not in ("td3", "ddpg"):
            raise ValueError(f"TD3Builder runs td3 or ddpg, got {algorithm_name!r}")
        if not isinstance(spec.action_space, spaces.Box):
            raise ValueError(f"{algorithm_name} needs a Box action space, got {spec.action_space}")
        super().__init__(spec=spec, network=network, algorithm=algorithm, actor=actor, learner=learner)
        require(learn, tuple(CONTINUOUS_DEFAULTS))
        self.name, self.learn, self.apex, self.continuous = algorithm_name, learn, learn, continuous
        from algorithms.td3.td3 import TD3

        if algorithm is None and algorithm_name == "td3" and self.algorithm_cls is DDPG:
            self.algorithm_cls = TD3  # the shared base's TD3; a subclass's own base stays
        fits = "td3" if issubclass(self.algorithm_cls, TD3) else "ddpg"
        if fits != algorithm_name:
            cls = self.algorithm_cls
            raise ValueError(f"{type(self).__name__} runs {algorithm_name!r}, but its algorithm class "
                             f"{cls.__module__}.{cls.__qualname__} is {'a' if fits == 'td3' else 'not a'} TD3: "
                             f"algorithm_name={fits!r} (--algorithm {fits} in the Ape-X job) runs it")

    @staticmethod
    def defaults(family: str) -> dict[str, Any]:
        """The values of the fields of ``learn`` the Ape-X job leaves unset (every family's)."""
        return dict(CONTINUOUS_DEFAULTS)

    @property
    def flow(self) -> Flow:
        return DQNBuilder.flow_of(self.learn)

    def config(self, seed: int) -> Any:
        from algorithms.td3.ddpg import DDPGConfig
        from algorithms.td3.td3 import TD3Config

        learn, cont = self.learn, self.continuous
        common = {"gamma": learn.gamma, "tau": learn.tau, "actor_lr": learn.lr,
                  "critic_lr": cont.critic_lr if cont.critic_lr is not None else learn.lr,
                  "hidden": learn.hidden, "critic_layer_norm": cont.critic_layer_norm, "noise": cont.noise,
                  "noise_scale": cont.sigma, "seed": seed, "fast": learn.fast}
        if self.name == "ddpg":  # __init__ checked that the class agrees with the name
            return DDPGConfig(**common)
        return TD3Config(**common, policy_delay=cont.policy_delay, target_noise=cont.target_noise,
                         target_noise_clip=cont.target_noise_clip)

    def make_algorithm(self, *, device: Any, seed: int) -> DDPG:
        obs_space, act_space = self.spec.observation_space, self.spec.action_space
        nets: dict[str, Any] = {}
        if self.network is not None:
            made = self.network(obs_space, act_space)
            if not (isinstance(made, tuple) and len(made) == 2):
                raise TypeError(f"a {self.name} network factory returns (actor, critic), got {type(made).__name__}")
            nets = {"actor": made[0], "critic": made[1]}
        return self.algorithm_cls(obs_dim=int(obs_space.shape[0]), action_low=act_space.low,
                                  action_high=act_space.high, config=self.config(seed), device=device, **nets)

    def make_actor(self, algorithm: DDPG, *, env: Any, sink: Any, params: Any, index: int, num_actors: int,
                   seed: int) -> ApexDPGActor:
        cont = self.continuous
        return self.actor_cls(ddpg=algorithm, env=env, buffer=sink, params=params, index=index,
                              num_actors=num_actors, config=self.apex, sigma=cont.sigma,
                              sigma_alpha=cont.sigma_alpha, random_start=cont.random_start, seed=seed)

    def make_learner(self, algorithm: DDPG, *, source: Any, params: Any) -> Learner:
        return self.learner_cls(algorithm=algorithm, source=source, params=params,
                                batch_size=self.learn.batch_size, push_every=self.learn.push_every,
                                weighted=True)

    def network_of(self, algorithm: DDPG) -> Any:
        return algorithm.actor
