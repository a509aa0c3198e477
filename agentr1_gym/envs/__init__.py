"""The concrete envs: multi-hop QA (:mod:`.qa`), the synthetic k-hop world (:mod:`.synthetic`), HumanEval
(:mod:`.code`, graded by :mod:`.code_grading`), the calculator (:mod:`.calculator`), reasoning-gym tasks
(:mod:`.reasoning_gym`), the text games (:mod:`.textgames`: TextWorld), the WebShop-style shop (:mod:`.webshop`),
BFCL's multi-turn categories (:mod:`.bfcl`) and any OpenEnv server's env (:mod:`.openenv`). Importing this
package imports none of them; :mod:`agentr1_gym.registration` registers them by entry point string."""
