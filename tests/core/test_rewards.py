"""QA metrics against hand-computed cases and the official HotpotQA script's edge cases."""

from __future__ import annotations

import pytest

from agentr1_gym.errors import RewardRangeError
from agentr1_gym.matching import exact_match, f1_score, normalize_answer, qa_metrics, sub_exact_match
from agentr1_gym.rewards import RewardConfig


def test_normalize_answer():
    assert normalize_answer("The  Kansas-Song!") == "kansassong"
    assert normalize_answer("An apple, a pear and THE plum.") == "apple pear and plum"
    assert normalize_answer("  theater ") == "theater"  # 'the' only as a whole word


def test_exact_match_and_aliases():
    assert exact_match("the Kansas Song", "Kansas Song") == 1.0
    assert exact_match("Kansas", "Kansas Song") == 0.0
    assert exact_match("NYC", ["New York City", "nyc"]) == 1.0


def test_f1_hand_computed():
    # pred tokens: [kansas, fight, song]; gold: [kansas, song]; common 2 -> P=2/3, R=1 -> F1=0.8
    assert f1_score("Kansas fight song", "Kansas Song") == pytest.approx(0.8)
    # repeated tokens count with multiplicity: pred [a1, a1], gold [a1] -> P=1/2, R=1 -> 2/3
    assert f1_score("x x", "x") == pytest.approx(2 / 3)
    assert f1_score("completely different", "Kansas Song") == 0.0


def test_f1_yes_no_noanswer_edge_cases():
    assert f1_score("yes", "no") == 0.0
    assert f1_score("yes it is", "yes") == 0.0  # gold is 'yes', prediction differs -> 0
    assert f1_score("yes", "yes because") == 0.0  # prediction is 'yes', gold differs -> 0
    assert f1_score("Yes.", "yes") == 1.0
    assert f1_score("noanswer", "no answer") == 0.0
    assert f1_score("", "Kansas") == 0.0


def test_sub_em():
    assert sub_exact_match("It is the Kansas Song, I think", "Kansas Song") == 1.0
    assert sub_exact_match("Kansas", "Kansas Song") == 0.0
    assert sub_exact_match("anything", "the") == 0.0  # empty normalised gold never matches
    assert sub_exact_match("a party", "art") == 0.0  # whole words only
    # a passage that happens to contain the answer is not an answer (FlashRAG's unbounded form still counts it)
    passage = "Kansas Song is a 1993 single by the band of the same name, recorded in Topeka over two weeks."
    assert sub_exact_match(passage, "Kansas Song") == 0.0
    assert sub_exact_match(passage, "Kansas Song", max_extra_words=None) == 1.0
    assert sub_exact_match("the answer is Kansas Song", "Kansas Song") == 1.0


def test_qa_metrics_none():
    assert qa_metrics(None, ["x"]) == {"em": 0.0, "sub_em": 0.0, "f1": 0.0}


def test_reward_config_outcome_and_agent_r1_preset():
    cfg = RewardConfig()
    assert cfg.outcome(1.0, True) == {"answer": 1.0, "format": 0.1, "offset": 0.0}
    assert cfg.outcome(0.5, True, success=True) == {"answer": 0.5, "format": 0.1, "offset": 0.0}
    # a well-formed wrong answer earns no format bonus (it could be had without solving), nor does a partly
    # right one (an echo of the question shares words with the answer); opt out to pay it anyway
    assert cfg.outcome(0.0, True) == {"answer": 0.0, "format": 0.0, "offset": 0.0}
    assert cfg.outcome(0.4, True, success=False) == {"answer": 0.4, "format": 0.0, "offset": 0.0}
    assert RewardConfig(format_needs_success=False).outcome(0.0, True)["format"] == 0.1
    assert RewardConfig(format_needs_score=False) == RewardConfig(format_needs_success=False)  # the old name
    r1 = RewardConfig.agent_r1()
    assert sum(r1.outcome(1.0, True).values()) == 1.0
    assert sum(r1.outcome(1.0, False).values()) == -1.0  # gated: a right answer in a bad format earns nothing
    assert sum(r1.outcome(0.0, True).values()) == 0.0
    with pytest.raises(RewardRangeError, match="not a finite number"):  # was read as 0.0, which hid the bug
        r1.outcome(float("nan"), True)
    with pytest.raises(ValueError):
        RewardConfig(answer_weigth=1.0)  # a typo of a generic field
    # env-specific names are checked by the env, which knows its metrics and process components
    import agentr1_gym
    from agentr1_gym.errors import ConfigError

    with pytest.raises(ConfigError, match="no answer metric 'bleu'"):
        agentr1_gym.make("AgentR1/Calculator-v0", reward=RewardConfig(answer_metric="bleu"))
    with pytest.raises(ConfigError, match="did you mean 'retrieval'"):
        agentr1_gym.make("AgentR1/HotpotQA-v0", reward={"process": {"retreival": 0.2}})
    with pytest.raises(ConfigError, match="no process reward 'retrieval'"):
        agentr1_gym.make("AgentR1/Calculator-v0", reward={"retrieval_reward": 0.2})
    # typos of generic fields in gym.make's reward= get the field's name
    with pytest.raises(ConfigError, match="did you mean the RewardConfig field 'tool_success_reward'"):
        agentr1_gym.make("AgentR1/HotpotQA-v0", reward={"tool_sucess_reward": 0.1})
    with pytest.raises(ConfigError, match="did you mean 'answer_weight'"):
        agentr1_gym.make("AgentR1/HotpotQA-v0", reward={"answer_wieght": 0.5})
    # the shorthand and the explicit form are the same config; process_scale turns shaping off
    assert RewardConfig(retrieval_reward=0.3) == RewardConfig(process={"retrieval": 0.3})
    assert r1.process_scale == 0.0


def test_needed_values_pay_each_value_once_up_to_their_count():
    """The calculator envs' "pay each needed intermediate result once" reward, in one place."""
    from agentr1_gym.rewards import NeededValues

    progress = NeededValues([3, 7, 7])
    assert progress.caps() == {"progress": 2.0} and 3 in progress
    assert [progress.pay(v) for v in (3, 3, None, 5, 7)] == [{"progress": 1.0}, {}, {}, {}, {"progress": 1.0}]
    assert 3 not in progress and progress.caps() == {"progress": 2.0}  # the cap stays the episode's


def test_the_qa_metrics_old_path_warns_until_0_3():
    import agentr1_gym.rewards as rewards

    with pytest.warns(DeprecationWarning, match="agentr1_gym.matching.exact_match"):
        assert rewards.exact_match is exact_match
