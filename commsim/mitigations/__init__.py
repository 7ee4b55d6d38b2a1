"""Mitigations: what backup workers, gradient compression, local SGD, asynchronous SGD and
bucket tuning would buy on a scenario (``commsim compare``).

Built on the simulator's public functions, one module per remedy:

- :mod:`.spec`: the remedies' records, the ``--mitigations`` syntax and the ``mitigation:`` section;
- :mod:`.hooked`: DDP with a communication hook (the engine's step, each bucket's all-reduce
  replaced by the hook's stages);
- :mod:`.compression`: fp16/bf16 compression and PowerSGD as hooks; :mod:`.shapes` their gradients;
- :mod:`.localsgd`: post-local SGD with periodic model averaging, a hook;
- :mod:`.backup`: backup workers (the n-th of n + b arrivals);
- :mod:`.async_ps`: asynchronous SGD with parameter servers (SimPy processes and resources);
- :mod:`.buckets`: the bucket cap that minimizes the step time (a 1-D search over ``simulate``);
- :mod:`.compare`: every remedy against the baseline, as rows.
"""
