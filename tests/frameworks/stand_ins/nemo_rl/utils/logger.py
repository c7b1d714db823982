"""FAKE nemo_rl/utils/logger.py (7ea279ab): the composite ``Logger`` as its backends see
it: ``loggers`` (a list, filled from the ``*_enabled`` switches: all off here),
``log_metrics(metrics, step, prefix="", step_metric=None, step_finished=False)`` calling
each backend positionally with all five, ``log_hyperparams`` and ``log_histogram`` likewise,
``finish()`` calling each backend's ``finish`` where it has one."""


class Logger:
    def __init__(self, cfg=None):
        self.loggers = []

    def log_metrics(self, metrics, step, prefix="", step_metric=None, step_finished=False):
        for logger in self.loggers:
            logger.log_metrics(metrics, step, prefix, step_metric, step_finished)

    def log_hyperparams(self, params):
        for logger in self.loggers:
            logger.log_hyperparams(params)

    def log_histogram(self, histogram, step, name):
        for logger in self.loggers:
            logger.log_histogram(histogram, step, name)

    def finish(self):
        for logger in self.loggers:
            finish = getattr(logger, "finish", None)
            if finish is not None:
                finish()
