"""The concrete envs: multi-hop QA (:mod:`.qa`), the synthetic k-hop world (:mod:`.synthetic`), HumanEval
(:mod:`.code`, graded by :mod:`.code_grading`) and the calculator (:mod:`.calculator`). Importing this package
imports none of them; :mod:`agentr1_gym.registration` registers them by entry point string."""
