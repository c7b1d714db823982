"""FAKE slime/observability/timer.py (624b824a): the per-process ``Timer`` singleton
(start, end, add, reset, log_dict, context), ``timer`` as a context manager or
decorator, ``inverse_timer``. Same semantics: durations add up by name until reset;
starting a started timer or ending a stopped one is an error."""

from contextlib import contextmanager
from functools import wraps
from time import time


class Timer:
    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
            cls._instance.timers = {}
            cls._instance.start_time = {}
        return cls._instance

    def start(self, name):
        assert name not in self.start_time, f"Timer {name} already started."
        self.start_time[name] = time()

    def end(self, name):
        assert name in self.start_time, f"Timer {name} not started."
        self.add(name, time() - self.start_time.pop(name))

    def reset(self, name=None):
        if name is None:
            self.timers = {}
        else:
            self.timers.pop(name, None)

    def add(self, name, elapsed_time):
        self.timers[name] = self.timers.get(name, 0) + elapsed_time

    def log_dict(self):
        return self.timers

    @contextmanager
    def context(self, name):
        self.start(name)
        try:
            yield
        finally:
            self.end(name)


def timer(name_or_func):
    if isinstance(name_or_func, str):
        return Timer().context(name_or_func)
    func = name_or_func

    @wraps(func)
    def wrapper(*args, **kwargs):
        with Timer().context(func.__name__):
            return func(*args, **kwargs)
    return wrapper


@contextmanager
def inverse_timer(name):
    Timer().end(name)
    try:
        yield
    finally:
        Timer().start(name)
