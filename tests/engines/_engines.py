"""What the engine-adapter tests share: the envs every engine plays (both kinds of task) and how each env's
process rewards show up per step."""

from __future__ import annotations

#: answer-shaped envs (search, math), world-shaped ones (a shop, a text game) and a conversation whose user speaks
#: several times (BFCL's multi-turn function calling)
ENGINE_ENVS = (
    "AgentR1/SyntheticMultihop-v0",
    "AgentR1/HotpotQA-v0",
    "AgentR1/Calculator-v0",
    "AgentR1/WebShop-v0",
    "AgentR1/TextWorld-Simple-v0",
    "AgentR1/TextWorld-Cooking-v0",
    "AgentR1/TextWorld-TreasureHunter-v0",
    "AgentR1/TextWorld-CoinCollector-v0",
    "AgentR1/BFCL-MultiTurn-v0",
)
SEARCH_ENVS = ("AgentR1/SyntheticMultihop-v0", "AgentR1/HotpotQA-v0")


def process_rewards_travel_per_step(env_id: str, components: list[dict[str, float]]) -> bool:
    """Whether an oracle episode's per-step reward components show its process rewards on the steps that earned
    them: retrieval on every search before the answer, the shop's purchase on the buying step, the game's points
    on the moves that scored (the calculator's progress may come with the answer)."""
    if env_id in SEARCH_ENVS:
        return all(c["retrieval"] > 0 for c in components[:-1])
    if env_id == "AgentR1/WebShop-v0":
        return components[-1]["purchase"] > 0 and all(c["purchase"] == 0 for c in components[:-1])
    if env_id.startswith("AgentR1/TextWorld-"):  # a one-move game scores on its only step
        return any(c["points"] > 0 for c in components)
    return True


def step_rewards_show_process_rewards(env_id: str, step_rewards: list[float]) -> bool:
    """The same, for engines that keep only each step's total reward."""
    if env_id in SEARCH_ENVS:
        return len(step_rewards) >= 2 and step_rewards[0] > 0
    if env_id.startswith("AgentR1/TextWorld-"):
        return len(step_rewards) < 2 or any(r > 0 for r in step_rewards[:-1])
    return True
