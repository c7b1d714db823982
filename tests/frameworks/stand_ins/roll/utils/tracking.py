"""FAKE roll/utils/tracking.py (8eb27cc2): ``tracker_registry`` (a module dict read when
``create_tracker`` runs), ``BaseTracker`` (``log(values, step, **kwargs)``, ``finish``),
``create_tracker(tracker_name, config, **kwargs)`` = ``tracker_registry[name](config,
**kwargs)``; an unknown name raises ValueError, an empty one gives a BaseTracker."""

tracker_registry: dict = {}


class BaseTracker:
    def log(self, values, step, **kwargs):
        pass

    def finish(self):
        pass


def create_tracker(tracker_name, config, **kwargs):
    if not tracker_name:
        return BaseTracker()
    if tracker_name not in tracker_registry:
        raise ValueError(f"Unknown tracker name: {tracker_name}")
    return tracker_registry[tracker_name](config, **kwargs)
