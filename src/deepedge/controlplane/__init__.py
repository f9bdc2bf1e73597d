"""The control plane: deployments kept accurate by their own continuous-learning loop.

A deployment (:mod:`.deployment_spec`) is one model served at the site with its trigger,
update, gate and canary policies; its state, versions and decisions live in the service's
store (:mod:`.deployments`, :mod:`.records`, :mod:`.rollout_status`); the loop
(:mod:`.loop`, a thread of the manager process) decides with the pure policy of
:mod:`.rollout` and runs updates as jobs of the job service (:mod:`.update_jobs`,
:mod:`.edge_server_window`).
"""
