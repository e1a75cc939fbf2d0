"""envs.multiagent.registry: PettingZoo parallel envs by id, their keyword
parameters, and the check that a factory built a ParallelEnv."""

import functools
import pickle

import pytest

from envs.multiagent import CooperativeEnv
from envs.multiagent.registry import (
    NotParallelEnv,
    ParallelEnvFactory,
    keyword_params,
    known_ids,
    lookup,
)


def test_builtin_ids_and_their_keywords():
    entry = lookup("cooperative_hetero")
    assert {"n_agents", "max_steps", "continuous"} <= entry.params
    env = ParallelEnvFactory(entry.factory, (("n_agents", 3),))()
    assert env.heterogeneous and env.possible_agents == ["agent_0", "agent_1", "agent_2"]
    assert not ParallelEnvFactory(lookup("cooperative").factory)().heterogeneous


def test_mpe_short_and_versioned_names_read_keywords_from_raw_env():
    pytest.importorskip("mpe2")
    for env_id in ("simple_adversary", "simple_adversary_v3"):
        entry = lookup(env_id)
        assert {"N", "max_cycles", "continuous_actions"} <= entry.params
    env = ParallelEnvFactory(lookup("simple_spread").factory, (("N", 2), ("max_cycles", 5)))()
    assert env.possible_agents == ["agent_0", "agent_1"]
    env.close()
    with pytest.raises(ValueError, match="unknown env id 'simple_spread_v2'"):
        lookup("simple_spread_v2")


def test_module_factory_paths():
    assert lookup("envs.multiagent.cooperative:CooperativeEnv").factory is CooperativeEnv
    with pytest.raises(ValueError, match="cannot import module 'no_such_module'"):
        lookup("no_such_module:make")
    with pytest.raises(ValueError, match="has no attribute 'Missing'"):
        lookup("envs.multiagent:Missing")
    with pytest.raises(ValueError, match="is not callable"):
        lookup("envs.multiagent.registry:BUILTIN")
    with pytest.raises(ValueError, match="expected 'module:factory'"):
        lookup("envs.multiagent:")


def test_unknown_id_lists_the_known_ones():
    with pytest.raises(ValueError) as exc:
        lookup("nope")
    for name in known_ids():
        assert name in str(exc.value)
    assert {"simple_spread", "simple_tag", "simple_adversary", "cooperative"} <= set(known_ids())


def test_keyword_params_of_kwargs_only_factories_are_unknown():
    def only_kwargs(**kwargs):
        return CooperativeEnv(**kwargs)

    def some(*, n_agents=2, **kwargs):
        return CooperativeEnv(n_agents=n_agents)

    assert keyword_params(only_kwargs) is None
    assert keyword_params(some) == frozenset({"n_agents"})
    assert keyword_params(functools.partial(CooperativeEnv, n_agents=2)) >= {"n_agents", "max_steps"}


def test_factories_that_build_no_parallel_env_are_refused_by_name():
    with pytest.raises(NotParallelEnv, match="my factory returned object, not a PettingZoo ParallelEnv"):
        ParallelEnvFactory(object, source="my factory")()
    pytest.importorskip("mpe2")
    with pytest.raises(NotParallelEnv, match="returned an AEC env"):
        ParallelEnvFactory(lookup("mpe2.simple_spread_v3:env").factory)()


def test_bound_factory_pickles():
    factory = ParallelEnvFactory(lookup("cooperative").factory, (("n_agents", 4),))
    assert pickle.loads(pickle.dumps(factory))().n_agents == 4
