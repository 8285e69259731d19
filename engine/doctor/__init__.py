"""``parley-cli doctor`` and the app's Help > Check this computer: what Parley finds on this
machine and what to do about each problem.

One module per group of checks (``python_env``, ``machine``, ``cuda``, ``backends``,
``sound``, ``desktop``, ``hub``, ``placement``, ``stack``), each check a function of ``Probes``
(``engine.doctor.probes``: the machine, replaceable in tests) returning a ``Section``
(``engine.doctor.report``); ``engine.doctor.run.run_checks`` runs them all into a
``Report``, shown as text or as JSON for bug reports. No model is loaded; Qt is never
imported here (it is started in a child process, or read by the app).
"""
