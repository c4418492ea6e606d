"""Tools that run beside the service, never in it: simulator, replay, evaluation, baselines, bench."""
