"""``qcheck eval``: quality loss of quantised candidates against the unquantised transformers reference.

Public entry points (torch/transformers are imported only when a run starts):

- ``qcheck.eval.run.run_eval(config: EvalConfig) -> EvalResult``
- ``qcheck.eval.run.EvalConfig``, ``qcheck.eval.gate.Thresholds`` (``Thresholds.from_mapping(d)``)
- ``qcheck.eval.runners.base``: the runner protocol that candidate backends implement.
"""
